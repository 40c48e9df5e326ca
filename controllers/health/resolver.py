"""An alert's labels → one device, against the tracker's patched device views (the allocator's).

The rule's `match` says how: the driver (fixed or from a label); the node
from a label, then the device among that node's devices of the driver by an
attribute equal to a label (e.g. `uuid` ← `UUID`, an index ← `gpu`) or by
name; or pool and device from labels directly; or, with no node or pool, by
the attribute across all of the driver's devices. An alert that names no
published device — or more than one — resolves to a reason instead, which
the controller counts and reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from allocator.device_view import DeviceView
from allocator.types import DeviceID, qualify
from controllers.health.policy import DeviceMapping
from tracker.state import ClusterState


@dataclass(frozen=True, slots=True)
class Unresolved:
    reason: str


def _same(value: object, label: str) -> bool:
    return not isinstance(value, bool) and str(value) == label


def resolve(state: ClusterState, m: DeviceMapping, labels: Mapping[str, str]) -> DeviceView | Unresolved:
    """The one published device the labels name, or why not."""
    driver = m.driver or labels.get(m.driver_label, "")
    if not driver:
        return Unresolved(f"label {m.driver_label!r} (the driver) missing")
    for label in (m.node_label, m.pool_label, m.device_label, m.attribute_label):
        if label and label not in labels:
            return Unresolved(f"label {label!r} missing")
    if m.pool_label:
        candidates: Iterable[DeviceView] = (d for s in state.queries.pool_slices(driver, labels[m.pool_label]) for d in s.devices)
        where = f"pool {labels[m.pool_label]!r}"
    elif m.node_label:
        node = labels[m.node_label]
        candidates = (d for s in state.queries.slices_for_node(node) if s.driver == driver and s.node_name == node for d in s.devices)
        where = f"node {node!r}"
    else:
        candidates = (d for d in state.devices.values() if d.id.driver == driver)
        where = "the cluster"
    if m.attribute:
        attr, want = qualify(m.attribute, driver), labels[m.attribute_label]
        found = [d for d in candidates if _same(d.attributes.get(attr), want)]
        what = f"{attr}={want}"
    else:
        name = labels[m.device_label]
        found = [d for d in candidates if d.id.device == name]
        what = f"device {name!r}"
    if not found:
        return Unresolved(f"no {driver} device with {what} on {where}")
    if len(found) > 1:
        return Unresolved(f"{len(found)} {driver} devices with {what} on {where}: ambiguous")
    return found[0]


def device_key(did: DeviceID) -> str:
    return f"{did.driver}/{did.pool}/{did.device}"
