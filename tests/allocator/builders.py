"""Small builders for allocator tests: API-shaped dicts in, parsed values out.

Objects go through the same parse functions as production input, so the
tests also exercise parsing.
"""

from __future__ import annotations

import itertools
from typing import Any

from allocator.device_view import DeviceView, SliceView
from allocator.parse import parse_device_class, parse_resource_claim, parse_resource_slice
from allocator.types import DeviceClass, DeviceID, DeviceTaint, ResourceClaim, ResourceSlice

DRIVER = "gpu.example.com"
_versions = itertools.count()  # every built view is a new device version for the CEL caches


def dev(name: str, attrs: dict[str, Any] | None = None, capacity: dict[str, str] | None = None, taints=(), **node) -> dict:
    d: dict[str, Any] = {"name": name}
    if attrs:
        d["attributes"] = {
            k: {"bool": v} if isinstance(v, bool) else {"int": v} if isinstance(v, int) else {"string": v} for k, v in attrs.items()
        }
    if capacity:
        d["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if taints:
        d["taints"] = [dict(t) for t in taints]
    d.update(node)
    return d


def taint(key: str, effect: str, value: str = "") -> dict:
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


def slice_(
    name: str,
    devices: list[dict],
    *,
    node: str | None = "node-1",
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 0,
    count: int = 1,
    node_selector: dict | None = None,
    all_nodes: bool = False,
    per_device: bool = False,
    counters: dict[str, dict[str, str]] | None = None,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or (node or name), "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if counters is not None:  # counter set -> counter -> quantity
        spec["sharedCounters"] = [{"name": n, "counters": {k: {"value": v} for k, v in c.items()}} for n, c in counters.items()]
    if per_device:
        spec["perDeviceNodeSelection"] = True
    elif all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = node_selector
    else:
        spec["nodeName"] = node
    return parse_resource_slice({"metadata": {"name": name}, "spec": spec})


def view(s: ResourceSlice, extra_taints: dict[str, list[DeviceTaint]] | None = None) -> SliceView:
    extra_taints = extra_taints or {}
    devices = []
    for d in s.devices:
        reach = (d.node_name, d.node_selector, d.all_nodes) if s.per_device_node_selection else (s.node_name, s.node_selector, s.all_nodes)
        taints = d.taints + tuple(extra_taints.get(d.name, ()))
        devices.append(
            DeviceView(
                id=DeviceID(s.driver, s.pool, d.name),
                cel_key=(s.meta.name, d.name, next(_versions)),
                attributes=d.attributes,
                capacity=d.capacity,
                taints=taints,
                taint_sources=("slice",) * len(taints),
                node_name=reach[0],
                node_selector=reach[1],
                all_nodes=reach[2],
                consumes_counters=d.consumes_counters,
                allow_multiple_allocations=d.allow_multiple_allocations,
                capacity_policies=d.capacity_policies,
                binds_to_node=d.binds_to_node,
                binding_conditions=d.binding_conditions,
                binding_failure_conditions=d.binding_failure_conditions,
                refused=d.refused,
            )
        )
    return SliceView(
        s.meta.name,
        s.driver,
        s.pool,
        s.generation,
        s.resource_slice_count,
        tuple(devices),
        s.node_name,
        s.node_selector,
        s.all_nodes,
        s.per_device_node_selection,
        s.shared_counters,
    )


def device_class(name: str, *selectors: str, config: list[dict] | None = None) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if config:
        spec["config"] = config
    return parse_device_class({"metadata": {"name": name}, "spec": spec})


def exactly(cls: str = "gpu", *, count: int | None = None, mode: str | None = None, selectors=(), tolerations=(), admin=False) -> dict:
    e: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        e["count"] = count
    if mode is not None:
        e["allocationMode"] = mode
    if selectors:
        e["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if tolerations:
        e["tolerations"] = list(tolerations)
    if admin:
        e["adminAccess"] = True
    return e


def req(name: str, cls: str = "gpu", **kw) -> dict:
    return {"name": name, "exactly": exactly(cls, **kw)}


def first_available(name: str, *subs: tuple[str, dict]) -> dict:
    return {"name": name, "firstAvailable": [{"name": n, **e} for n, e in subs]}


def claim(
    name: str,
    *requests: dict,
    constraints: list[dict] | None = None,
    config: list[dict] | None = None,
    status: dict | None = None,
    namespace: str = "default",
) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    raw: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": {"devices": devices}}
    if status:
        raw["status"] = status
    return parse_resource_claim(raw)
