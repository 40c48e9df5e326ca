"""A node's fullness (extender/prioritize/packing.py) follows a republished pool although its slice-decided shape is kept between binds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.types import DeviceID
from extender.prioritize.packing import NodeFullness
from tracker import events as ev
from tracker.state import ClusterState

D = "gpu.example.com"


def _slices(counter: str, part_a: str) -> list[dict[str, Any]]:
    pool = {"name": "node-a", "generation": 1, "resourceSliceCount": 2}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-counters", "resourceVersion": "10"},
            "spec": {
                "driver": D,
                "nodeName": "node-a",
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": counter}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-devices", "resourceVersion": "11"},
            "spec": {
                "driver": D,
                "nodeName": "node-a",
                "pool": pool,
                "devices": [
                    {"name": "part-a", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": part_a}}}]},
                    {"name": "part-b", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": "1"}}}]},
                ],
            },
        },
    ]


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "a", "namespace": "default", "uid": "uid-a", "resourceVersion": "5"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": D}}]}},
    "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": D, "pool": "node-a", "device": "part-a"}]}}},
}


def _state() -> ClusterState:
    state = ClusterState(CelEnvironment())
    state.replace(ev.NODE, ev.GROUP_CORE, [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "resourceVersion": "1"}}])
    state.replace(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, _slices("4", "1"))
    state.replace(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, [CLAIM])
    for kind, group in state.required:
        state.mark_synced(kind, group)
    return state


@dataclass(frozen=True)
class Row:
    name: str
    counter: str  # the counter set's mem after the republish
    part_a: str  # what the allocated part-a consumes after it
    use: float  # the node's mean use then (one unit: the GPU)


ROWS = [
    Row("unchanged slices: the kept shape", "4", "1", 0.25),
    Row("counter set grown", "8", "1", 0.125),
    Row("allocated partition consumes more", "4", "2", 0.5),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_fullness_after_a_republish(row: Row) -> None:
    state = _state()
    fullness = NodeFullness(state)
    before = fullness.of("node-a")
    assert (before.base_touched, before.base_use) == (1, 0.25)
    for i, raw in enumerate(_slices(row.counter, row.part_a)):
        raw["metadata"]["resourceVersion"] = str(20 + i)
        state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, raw["metadata"]["name"], raw))
    after = fullness.of("node-a")
    assert (after.base_touched, after.base_use) == (1, row.use)


def _plain_slice(node: str, devices: list[dict[str, Any]], counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": D, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
    spec["devices"] = devices
    if counters:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": node, "resourceVersion": "1"}, "spec": spec}


def _counter_pool() -> list[dict[str, Any]]:
    """node-a's pool: counter set gpu-0 in one slice; a device named gpu-0 (no counters) and a partition of the set in another."""
    slices = _slices("4", "1")
    devices = slices[1]["spec"]["devices"]
    devices[:] = [{"name": "gpu-0"}, devices[1]]
    return slices


def _allocated(node: str, device: str) -> dict[str, Any]:
    return {
        **CLAIM,
        "metadata": {**CLAIM["metadata"], "name": f"{node}-{device}", "uid": f"uid-{node}-{device}"},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": D, "pool": node, "device": device}]}}},
    }


@dataclass(frozen=True)
class WholeRow:
    name: str
    slices: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    base: dict[str, tuple[int, float]]  # node -> (touched units, mean use)
    extra: dict[str, tuple[str, tuple[int, float]]]  # node -> (a pod's device, the node's measure with it)


WHOLE_ROWS = [
    WholeRow(
        "devices taken whole: one of three allocated, nodes side by side share nothing",
        [_plain_slice(n, [{"name": f"gpu-{i}"} for i in range(3)]) for n in ("node-a", "node-b")],
        [_allocated("node-a", "gpu-0")],
        {"node-a": (1, 1 / 3), "node-b": (0, 0.0)},
        {"node-a": ("gpu-1", (2, 2 / 3)), "node-b": ("gpu-2", (1, 1 / 3))},
    ),
    WholeRow(
        "a device named like a counter set of its pool is a unit of its own",
        _counter_pool(),
        [_allocated("node-a", "gpu-0")],
        {"node-a": (1, 0.5)},
        {"node-a": ("part-b", (2, (1 + 0.25) / 2))},
    ),
]


@pytest.mark.parametrize("row", WHOLE_ROWS, ids=[r.name for r in WHOLE_ROWS])
def test_units_of_devices_taken_whole(row: WholeRow) -> None:
    state = ClusterState(CelEnvironment())
    nodes = sorted(row.base)
    state.replace(
        ev.NODE, ev.GROUP_CORE, [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "resourceVersion": "1"}} for n in nodes]
    )
    state.replace(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, row.slices)
    state.replace(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, row.claims)
    for kind, group in state.required:
        state.mark_synced(kind, group)
    fullness = NodeFullness(state)
    units = {n: fullness.of(n) for n in nodes}
    for n in nodes:  # every node measured after all were built: a node's units are its own
        assert (units[n].base_touched, units[n].base_use / len(units[n].units)) == row.base[n], n
    for n, (device, expected) in row.extra.items():
        view = state.device(DeviceID(D, n, device))
        assert view is not None
        assert units[n].measure([view]) == expected, n
    assert {n: (u.base_touched, u.base_use / len(u.units)) for n, u in units.items()} == row.base  # measuring changed nothing
