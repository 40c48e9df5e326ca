"""What /debug/devices and /debug/objects show, built from the cluster state on the main loop.

The HTTP edge (extender/app.py, extender/routes/) never reads the state:
the service builds these bodies here and the edge only encodes and sends
them.
"""

from __future__ import annotations

from typing import Any

from allocator.types import DeviceID
from tracker.device_rows import attributes_json, device_row
from tracker.state import ClusterState

MAX_DEBUG_PAGE = 1000  # /debug/devices items per page: one page costs the loop a few ms


def device_page(state: ClusterState, node: str, driver: str, pool: str, tainted: str, limit: int, cont: str) -> dict[str, object]:
    """The patched device view, page by page (sorted by driver/pool/device)."""
    limit = max(1, min(limit, MAX_DEBUG_PAGE))
    ids = _sorted_devices(state)
    if node:
        reach = {d.id for s in state.queries.slices_for_node(node) for d in s.devices}
        ids = [d for d in ids if d in reach]
    if driver:
        ids = [d for d in ids if d.driver == driver]
    if pool:
        ids = [d for d in ids if d.pool == pool]
    if tainted.lower() == "true":
        ids = [d for d in ids if state.devices[d].taints]
    start = 0
    if cont:
        after = tuple(cont.split("\x1f"))
        start = next((i for i, d in enumerate(ids) if (d.driver, d.pool, d.device) > after), len(ids))
    page = ids[start : start + limit]
    items = [_device_item(state, did) for did in page]
    more = start + limit < len(ids)
    last: DeviceID | None = page[-1] if page and more else None
    return {"items": items, "continue": "\x1f".join((last.driver, last.pool, last.device)) if last else ""}


def _device_item(state: ClusterState, did: DeviceID) -> dict[str, Any]:
    """One device (tracker/device_rows.py) with its attributes and capacity as published and as patched, and its taints."""
    view = state.devices[did]
    slice_ = state.queries.slice_of(did)
    original = next((d for d in slice_.devices if d.name == did.device), None) if slice_ else None
    row = device_row(state, did)
    return {
        "driver": did.driver,
        "pool": did.pool,
        "device": did.device,
        "node": row.node,
        "attributes": {
            "original": attributes_json(original.attributes) if original else {},
            "effective": row.attributes,
        },
        "capacity": {
            "original": {k: str(v) for k, v in original.capacity.items()} if original else {},
            "effective": {k: str(v) for k, v in view.capacity.items()},
        },
        "taints": [
            {"key": t.key, "value": t.value, "effect": t.effect, "timeAdded": t.time_added, "source": src}
            for t, src in zip(view.taints, view.taint_sources, strict=False)
        ],
        "allocatedTo": row.holder,
        **row.sharing,
    }


def objects_snapshot(state: ClusterState) -> dict[str, Any]:
    """resourceVersion of every object in the view, by `Kind.group`, with the state's generation and readiness."""
    body = {
        f"{kind}.{group}" if group else kind: dict(sorted(versions.items())) for (kind, group), versions in sorted(state.versions.items())
    }
    return {"generation": state.generation, "ready": state.ready, "objects": body}


_sorted_cache: dict[int, tuple[int, list[DeviceID]]] = {}


def _sorted_devices(state: ClusterState) -> list[DeviceID]:
    """Device ids in page order, sorted once per state generation (pages of one listing share it)."""
    cached = _sorted_cache.get(id(state))
    if cached is not None and cached[0] == state.generation:
        return cached[1]
    ids = sorted(state.devices, key=lambda d: (d.driver, d.pool, d.device))
    _sorted_cache.clear()  # one state per process: keep a single entry
    _sorted_cache[id(state)] = (state.generation, ids)
    return ids
