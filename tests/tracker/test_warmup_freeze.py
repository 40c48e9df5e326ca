"""The CEL warm-up freezes what it built out of the collector's full scans once a large warm-up is done.

At 5,000 nodes x 8 GPUs x 7 partitions the start-up warm-up builds ~280,000
activations after the reflector's gc.freeze(); unfrozen, every full
collection scanned them (~1 s, on /filter's clock). A small warm-up (a slice
update) does not freeze: what it would freeze is not worth a full scan's cost.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from tracker.state import ClusterState
from tracker.views.warmup import GC_FREEZE_DEVICES

D = "gpu.example.com"
PER_SLICE = 8


def _objects(devices: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]},
        }
    ]
    for i in range(-(-devices // PER_SLICE)):
        node = f"node-{i}"
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "resourceVersion": str(10 + i)}})
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpus", "resourceVersion": str(100_000 + i)},
                "spec": {
                    "driver": D,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{j}"} for j in range(PER_SLICE)],
                },
            }
        )
    return objs


@dataclass(frozen=True)
class Row:
    name: str
    devices: int
    frozen: bool


ROWS = [
    Row("start-up warm-up of more devices than the threshold: frozen", GC_FREEZE_DEVICES + 2 * PER_SLICE, True),
    Row("a warm-up of a few devices: not frozen", 2 * PER_SLICE, False),
]


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_warm_up_freezes_its_activations(unfrozen: None, row: Row) -> None:
    state = ClusterState(CelEnvironment())
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in _objects(row.devices):
        groups.setdefault((o["kind"], o["apiVersion"].rpartition("/")[0]), []).append(o)
    for (kind, group), items in groups.items():
        state.replace(kind, group, items)
    assert gc.get_freeze_count() == 0
    for kind, group in state.required:
        state.mark_synced(kind, group)  # the last one queues the warm-up of every device
    warming = [t for t in asyncio.all_tasks() if t.get_name() == "warm-selectors"]
    assert warming, "the warm-up runs in the background on an event loop"
    await asyncio.gather(*warming)
    assert state.ready
    assert (gc.get_freeze_count() > 0) is row.frozen, gc.get_freeze_count()
