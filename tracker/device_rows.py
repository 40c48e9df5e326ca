"""One device as the operator surfaces show it: `/debug/devices` and `kubectl dra devices` build their rows here.

Both used to read who holds a device and render its attributes each their
own way: `/debug/devices` read only the claims' statuses (`allocated`), so a
device chosen by a /bind whose claim write had not landed yet looked free
there while `kubectl dra devices` showed it held. The row says it once:
held means allocated, in flight or in shares (`ClusterState.holder`), and an
attribute is its JSON scalar (a version as its text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.types import AttributeValue, DeviceID
from tracker.state import ClusterState


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """The facts both surfaces show of a published device; each lays them out in its own shape."""

    id: DeviceID
    node: str | None  # None: a device not bound to one node (each surface says which nodes in its own words)
    attributes: dict[str, object]  # attributes_json of the patched view
    holder: str | None  # the claim(s) holding it, allocated or in flight or in shares; None while free
    sharing: dict[str, Any]  # counters and shares now (ClusterState.sharing)


def device_row(state: ClusterState, did: DeviceID) -> DeviceRow:
    view = state.devices[did]
    return DeviceRow(did, view.node_name, attributes_json(view.attributes), state.holder(did), state.queries.sharing(did))


def attributes_json(attributes: Mapping[str, AttributeValue]) -> dict[str, object]:
    """Attributes by name, sorted: int, bool and string as they are, a semantic version as its text."""
    return {k: (v if isinstance(v, int | bool | str) else str(v)) for k, v in sorted(attributes.items())}
