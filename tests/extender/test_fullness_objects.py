"""A node's fullness (extender/prioritize/packing.py) keeps no per-device objects.

/filter's first pass of a shape computes it for every node it looks at, and
whatever it keeps is scanned by every full garbage collection after: a
per-device table was ~190 tracked objects per partitioned node (~1 M at
5,000 nodes x 8 GPUs x 7 partitions, full collections of ~0.5-1 s).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from extender.prioritize.packing import NodeFullness
from kubesim.objects import PARTITIONS_GI, partitioned_slices
from tracker import events as ev
from tracker.state import ClusterState

D = "gpu.example.com"
NODES = 40
MAX_TRACKED_PER_NODE = 30  # the units (one per GPU), their maps, the node's record


@dataclass(frozen=True)
class Row:
    name: str
    gpus: int


ROWS = [
    Row("8 GPUs x 7 partitions", 8),
    Row("2 GPUs x 7 partitions", 2),
]


def _state(gpus: int) -> ClusterState:
    state = ClusterState(CelEnvironment())
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    for i in range(NODES):
        name = f"node-{i}"
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": str(i + 1)}})
        slices += partitioned_slices(name, D, gpus)
    for rv, s in enumerate(slices, start=1000):
        s["metadata"]["resourceVersion"] = str(rv)
    state.replace(ev.NODE, ev.GROUP_CORE, nodes)
    state.replace(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, slices)
    for kind, group in state.required:
        state.mark_synced(kind, group)
    return state


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_fullness_keeps_no_per_device_objects(row: Row) -> None:
    state = _state(row.gpus)
    fullness = NodeFullness(state)
    gc.collect()
    before = len(gc.get_objects())
    units = [fullness.of(f"node-{i}") for i in range(NODES)]
    gc.collect()  # what is kept and still tracked after a full collection
    per_node = (len(gc.get_objects()) - before) / NODES
    assert per_node <= MAX_TRACKED_PER_NODE, per_node
    for u in units:  # an untouched node: every GPU whole
        assert (u.base_touched, u.base_use) == (0, 0.0)
        assert len(u.units) == row.gpus
    assert len(units[0].own) == 2 and sum(len(s.devices) for s in units[0].own) == row.gpus * len(PARTITIONS_GI)
