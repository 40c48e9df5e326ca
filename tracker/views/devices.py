"""The patched device views: slices, DeviceTaintRules, ResourceSlicePatches and DeviceClasses.

What upstream's resourceslice/tracker does: every device as the allocator
and the eviction controller see it, the driver's slice with the patches'
attributes and the rules' taints applied (tracker/views/patched.py), kept
current by recomputing only the devices a change can touch. A part of
tracker/state.py's ClusterState: it shares the ledger, the change log and
the problem reporter with the object store (tracker/store.py).

`DeviceViews` composes smaller parts, each with one job, and is the only
way in or out of them:

- intake: tracker/views/slice_intake.py (slices, parsing again only the devices
  an update changed) and tracker/views/selector_intake.py (classes, rules and
  patches);
- the indexes (tracker/views/index.py: by node, pool and device, and the
  rules and patches by driver, pool and device, with wildcards);
- the view builder (tracker/views/builder.py): computes and holds each
  device's view, and the versions that name it in CEL cache keys;
- the scheduler (tracker/views/recompute.py): views computed in the handler while
  cheap, the rest and the CEL warm-up (tracker/views/warmup.py) in the background;
- tracker/views/node_changes.py: which nodes must decide again, and each node's
  taken devices;
- the read queries (tracker/views/queries.py), handed out as `queries`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from allocator.device_view import DeviceView, SliceView
from allocator.types import DeviceClass, DeviceID, DeviceTaintRule, ResourceSlice, ResourceSlicePatch
from tracker import events as ev
from tracker.foreground import Foreground
from tracker.ledger import AllocationLedger
from tracker.store import ChangeLog, Problem
from tracker.views.builder import CelVersions, DeviceObjects, ViewBuilder
from tracker.views.digests import RawDevices
from tracker.views.index import SelectorIndex, SliceIndex
from tracker.views.node_changes import NodeChanges
from tracker.views.queries import DeviceQueries
from tracker.views.recompute import Recompute
from tracker.views.selector_intake import SelectorIntake
from tracker.views.slice_intake import SliceIntake

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine


class DeviceViews:
    """Every device's patched view, indexed by node, slice and (driver, pool, device); a part of ClusterState."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        ledger: AllocationLedger,
        changes: ChangeLog,
        report: Callable[[Problem], None],
        *,
        release: Callable[[ev.ObjectEvent], None],
        started: Callable[[], bool],
        foreground: Foreground | None = None,
    ) -> None:
        """`release` tells the listeners of an event held back (see `hold_back`); `started`: some kind has its initial state.

        The CEL warm-up waits for `foreground`'s quiet moments (tracker/foreground.py).
        """
        self.cel = cel
        objects = DeviceObjects()
        self.classes: dict[str, DeviceClass] = objects.classes
        self.slices: dict[str, ResourceSlice] = objects.slices
        self.rules: dict[tuple[str, str], DeviceTaintRule] = objects.rules  # (group, name)
        self.patches: dict[str, ResourceSlicePatch] = objects.patches
        index = SliceIndex(objects.slices)
        selectors = SelectorIndex()
        versions = CelVersions()
        raw_devices: RawDevices = {}  # the slice intake's raw device digests, read by the builder's slice digests
        builder = ViewBuilder(
            cel,
            objects,
            versions,
            index,
            selectors,
            report=report,
            slice_changed=lambda s: self._nodes.pool_changed(s),
            raw_devices=raw_devices,
        )
        self.slice_views: dict[str, SliceView] = builder.slice_views
        self.devices: dict[DeviceID, DeviceView] = builder.devices
        self._nodes = NodeChanges(changes, ledger, index, objects.slices, builder.devices)
        self._recompute = Recompute(cel, builder, index, objects.classes, release=release, foreground=foreground)
        self.queries = DeviceQueries(objects, builder, index, ledger)  # the read queries, handed out as they are
        slice_intake = SliceIntake(objects.slices, versions, index, builder, self._recompute, self._nodes, raw_devices)
        selector_intake = SelectorIntake(
            cel, objects, versions, index, selectors, builder, self._recompute, changes=changes, report=report, started=started
        )
        self._handlers: dict[str, Callable[[ev.ObjectEvent], None]] = {
            ev.DEVICE_CLASS: selector_intake.on_class,
            ev.RESOURCE_SLICE: slice_intake.apply,
            ev.DEVICE_TAINT_RULE: selector_intake.on_rule,
            ev.RESOURCE_SLICE_PATCH: selector_intake.on_patch,
        }
        self._views_ready = False

    # ------------------------------------------------------------------ what ClusterState asks of its parts

    def handles(self, kind: str) -> bool:
        return kind in self._handlers

    def apply(self, event: ev.ObjectEvent) -> None:
        """Apply one event of a kind these views `handle` (raises ValidationError for an invalid object)."""
        self._handlers[event.kind](event)

    def views_ready(self) -> bool:
        """Asked once every required kind is listed: the first time, the views those lists ask for
        must be computed (a rule listed after the slices must taint them before the first /filter);
        later recomputes are lag, as a watch event's is."""
        if not self._views_ready:
            if self._recompute.pending:
                return False
            self._views_ready = True
        return True

    def hold_back(self, event: ev.ObjectEvent) -> bool:
        """Whether the listeners hear of `event` later, through `release` (see Recompute.hold_back)."""
        return self._recompute.hold_back(event)

    def warm_all(self) -> None:
        """Every required kind has its initial state: classes may have arrived after the slices, warm what is still cold."""
        self._recompute.warm(self.devices.values(), self.classes.values())

    def device_changed(self, did: DeviceID) -> None:
        """A device was allocated, freed, reserved or released: its node (or its pool's nodes) must decide again."""
        self._nodes.device_changed(did)

    def _store(self, kind: str) -> Mapping[str, Any]:
        if kind == ev.DEVICE_CLASS:
            return self.classes
        if kind == ev.RESOURCE_SLICE:
            return self.slices
        if kind == ev.RESOURCE_SLICE_PATCH:
            return self.patches
        return {}

    def keys_of(self, kind: str, group: str) -> set[str]:
        if kind == ev.DEVICE_TAINT_RULE:
            return {name for (g, name) in self.rules if g == group}
        return set(self._store(kind))

    def holds(self, kind: str, group: str, key: str) -> bool:
        if kind == ev.DEVICE_TAINT_RULE:
            return (group, key) in self.rules
        return key in self._store(kind)

    def uid_of(self, kind: str, group: str, name: str) -> str:
        held: Any = self.rules.get((group, name)) if kind == ev.DEVICE_TAINT_RULE else self._store(kind).get(name)
        return held.meta.uid if held is not None else ""

    def taken_on_node(self, node_name: str) -> int:
        """How many of the node's own (node-local) devices are allocated or in flight."""
        return self._nodes.taken_on_node(node_name)
