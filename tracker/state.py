"""ClusterState: everything the extender knows about the cluster, kept current.

Sources push ObjectEvents in; the state parses each object once, keeps the
patched device views (recomputing only the devices a change can touch), an
index from node to slices, the devices allocated to claims and the in-flight
ledger of allocations being written. Readers (filter, bind, eviction) get
plain values and never see a half-applied change: every mutation happens
synchronously on the event loop.

The facade over three pieces, along upstream's seams:

- tracker/store.py: the object store (nodes, pods, claims, templates,
  volumes), intake, the change log, Problems and readiness (`ready`);
- tracker/device_views.py: the patched device views (slices, rules,
  patches, classes, the CEL warm-up), as upstream's resourceslice/tracker;
- tracker/ledger.py: which devices are allocated or in flight, the only
  writer of `allocated` and `inflight`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tracker.device_views import DeviceViews
from tracker.resources import REQUIRED_KINDS
from tracker.store import CHANGE_LOG_MAX, POD_CLAIM_NAME_ANNOTATION, Problem

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

__all__ = ["CHANGE_LOG_MAX", "POD_CLAIM_NAME_ANNOTATION", "REQUIRED_KINDS", "ClusterState", "Problem"]


class ClusterState(DeviceViews):
    """What the extender, the eviction controller and kubectl dra read; the EventSink both sources feed."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        *,
        required: Iterable[tuple[str, str]] = REQUIRED_KINDS,
        on_problem: Callable[[Problem], None] | None = None,
    ) -> None:
        super().__init__(cel, required=required, on_problem=on_problem)
