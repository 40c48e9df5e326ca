"""A node's fullness (extender/prioritize/packing.py) follows a republished pool although its slice-decided shape is kept between binds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from allocator.cel import CelEnvironment
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
