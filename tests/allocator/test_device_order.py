"""Device order within a node: upstream's first fit by default, the emptiest counter set or share first under spread (allocator/device_order.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_resource_slice
from allocator.types import Node
from tests.allocator.builders import claim, req, view
from tests.allocator.test_partitionable import CLASSES, State, _pool_slices, device, shared, slice_raw

NODE = Node("node-1")


def _gpus(n: int) -> list[dict]:
    """n GPUs of 40Gi, each with three 10Gi partitions drawing on its own counter set."""
    devices = [
        device(f"gpu-{g}-part-{p}", memory="10Gi", consumes={"memory": "10Gi"}, counter_set=f"gpu-{g}") for g in range(n) for p in range(3)
    ]
    return [
        slice_raw("devices", count=2, devices=devices),
        slice_raw("counters", count=2, counters={f"gpu-{g}": {"memory": "40Gi"} for g in range(n)}),
    ]


SHARED = [slice_raw("shared", devices=[shared(f"s-{i}", {"memory": {"value": "40Gi"}}) for i in range(2)])]


@dataclass(frozen=True)
class Row:
    name: str
    order: str
    slices: list[dict]
    state: State
    want: str  # the device a one-device claim gets
    share: str = ""  # the claim asks this much memory of a shared device


ROWS = [
    Row("binpack: an empty node, the first partition", "binpack", _gpus(2), State(), "gpu-0-part-0"),
    Row("spread: an empty node, the first partition too (all equal, order kept)", "spread", _gpus(2), State(), "gpu-0-part-0"),
    Row("binpack: the cut GPU's next partition (upstream's first fit)", "binpack", _gpus(2), State(["gpu-0-part-0"]), "gpu-0-part-1"),
    Row("spread: the untouched GPU before the cut one", "spread", _gpus(2), State(["gpu-0-part-0"]), "gpu-1-part-0"),
    Row(
        "spread: the GPU with the most left when every GPU is cut",
        "spread",
        _gpus(2),
        State(["gpu-0-part-0", "gpu-0-part-1", "gpu-1-part-0"]),
        "gpu-1-part-1",
    ),
    Row("binpack: the fuller cut GPU first", "binpack", _gpus(2), State(["gpu-0-part-0", "gpu-0-part-1", "gpu-1-part-0"]), "gpu-0-part-2"),
    Row("binpack: the first shared device with room", "binpack", SHARED, State(shares={"s-0": {"memory": "10Gi"}}), "s-0", "10Gi"),
    Row("spread: the shared device whose shares use the least", "spread", SHARED, State(shares={"s-0": {"memory": "10Gi"}}), "s-1", "10Gi"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_device_order(row: Row) -> None:
    views = [view(parse_resource_slice(s)) for s in row.slices]
    allocator = Allocator(CelEnvironment(), device_placement=row.order)
    request = req("r", "class-a")
    if row.share:
        request["exactly"]["capacity"] = {"requests": {"memory": row.share}}
    out = allocator.allocate(NODE, [claim("c", request)], views, CLASSES, row.state, pool_slices=_pool_slices(views))
    assert out.ok, out.failure
    assert [r.device for r in out.allocations["default/c"].results] == [row.want]


def test_an_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="device placement 'pack'"):
        Allocator(CelEnvironment(), device_placement="pack")
