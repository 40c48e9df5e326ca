"""The CEL warm-up on the event loop: what it does to the verbs that run beside it.

It freezes what it built out of the collector's full scans once a large
warm-up is done: at 5,000 nodes x 8 GPUs x 7 partitions the start-up warm-up
builds ~280,000 activations after the reflector's gc.freeze(); unfrozen,
every full collection scanned them (~1 s, on /filter's clock). A small
warm-up (a slice update) does not freeze. And work that reaches the loop in
two steps (a verb from the HTTP thread) runs after the slice in progress,
not after two more.
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
from tracker.views import recompute
from tracker.views.warmup import GC_FREEZE_DEVICES, SelectorWarmup

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


def _listed(devices: int) -> ClusterState:
    """A state with every kind listed, before the last mark_synced (which queues the warm-up of every device)."""
    state = ClusterState(CelEnvironment())
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in _objects(devices):
        groups.setdefault((o["kind"], o["apiVersion"].rpartition("/")[0]), []).append(o)
    for (kind, group), items in groups.items():
        state.replace(kind, group, items)
    return state


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_warm_up_freezes_its_activations(unfrozen: None, row: Row) -> None:
    state = _listed(row.devices)
    assert gc.get_freeze_count() == 0
    for kind, group in state.required:
        state.mark_synced(kind, group)  # the last one queues the warm-up of every device
    warming = [t for t in asyncio.all_tasks() if t.get_name() == "warm-selectors"]
    assert warming, "the warm-up runs in the background on an event loop"
    await asyncio.gather(*warming)
    assert state.ready
    assert (gc.get_freeze_count() > 0) is row.frozen, gc.get_freeze_count()


@dataclass(frozen=True)
class HopRow:
    name: str
    arrives_in_slice: int  # the warm-up slice during which the work reaches the loop


HOP_ROWS = [
    HopRow("arrives during the first slice", 1),
    HopRow("arrives during a later slice", 4),
]


@pytest.mark.parametrize("row", HOP_ROWS, ids=[r.name for r in HOP_ROWS])
async def test_two_step_work_runs_after_the_slice_in_progress(monkeypatch: pytest.MonkeyPatch, row: Row | HopRow) -> None:
    """A verb handed over by the HTTP thread is a callback that creates a task: two turns of the loop.

    Controlled interleaving, no clock: every warm-up slice is one device
    (`WARMUP_SLICE_SECONDS` 0); during slice `arrives_in_slice` the work is
    scheduled as `run_coroutine_threadsafe` would (a callback creating a
    task). Its task must start before another slice runs.
    """
    assert isinstance(row, HopRow)
    monkeypatch.setattr(recompute, "WARMUP_SLICE_SECONDS", 0.0)  # the scheduler passes it to each drain
    loop = asyncio.get_running_loop()
    slices = 0
    started_after: list[int] = []

    async def verb() -> None:
        started_after.append(slices)

    original = SelectorWarmup._warm_slice

    def counted(self: SelectorWarmup, *args: Any, **kwargs: Any) -> int:
        nonlocal slices
        slices += 1
        if slices == row.arrives_in_slice:
            loop.call_soon(lambda: loop.create_task(verb()))  # as call_soon_threadsafe from the HTTP thread
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SelectorWarmup, "_warm_slice", counted)
    state = _listed(PER_SLICE * 4)
    for kind, group in state.required:
        state.mark_synced(kind, group)
    warming = [t for t in asyncio.all_tasks() if t.get_name() == "warm-selectors"]
    await asyncio.gather(*warming)
    assert slices > row.arrives_in_slice + 2, "the warm-up had more slices to run"
    assert started_after == [row.arrives_in_slice], f"the verb waited for {started_after[0] - row.arrives_in_slice} more slice(s)"


async def test_the_warm_up_waits_while_a_verb_is_in_flight_and_runs_once_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up warm-up's slices wait while the scheduler's verbs come (tracker/foreground.py), then run."""
    slices = 0
    original = SelectorWarmup._warm_slice

    def counted(self: SelectorWarmup, *args: Any, **kwargs: Any) -> int:
        nonlocal slices
        slices += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SelectorWarmup, "_warm_slice", counted)
    state = _listed(PER_SLICE * 4)
    monkeypatch.setattr(state.foreground, "_max_defer", 3600.0)
    state.foreground.begin()
    for kind, group in state.required:
        state.mark_synced(kind, group)
    warming = [t for t in asyncio.all_tasks() if t.get_name() == "warm-selectors"]
    assert warming
    await asyncio.sleep(0.1)
    assert slices == 0 and not any(t.done() for t in warming), "the warm-up ran while a verb was in flight"
    state.foreground.end()
    await asyncio.wait_for(asyncio.gather(*warming), 30)
    assert slices > 0


async def test_activations_filter_builds_while_the_warm_up_waits_are_frozen_by_its_next_slice(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a scheduler that never pauses the warm-up runs one slice per longest deferral, and /filter
    builds most activations itself: they count towards the next freeze, as the warm-up's own do.

    Counted in slices, not time: each slice warms one device, the freeze is due every 90 activations,
    and /filter has built 100 before the first slice; the warm-up alone would need 90 slices.
    """
    from tracker.views import warmup

    monkeypatch.setattr(recompute, "WARMUP_SLICE_SECONDS", 0.0)  # a slice is one device
    monkeypatch.setattr(warmup, "GC_FREEZE_EVERY", 90)
    slices = 0
    frozen_after: list[int] = []
    original_slice, original_freeze = SelectorWarmup._warm_slice, SelectorWarmup._freeze

    def counted(self: SelectorWarmup, *args: Any, **kwargs: Any) -> int:
        nonlocal slices
        slices += 1
        return original_slice(self, *args, **kwargs)

    def freeze(self: SelectorWarmup) -> None:
        frozen_after.append(slices)
        original_freeze(self)

    monkeypatch.setattr(SelectorWarmup, "_warm_slice", counted)
    monkeypatch.setattr(SelectorWarmup, "_freeze", freeze)
    cel = CelEnvironment()
    state = ClusterState(cel)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in _objects(PER_SLICE * 20):
        groups.setdefault((o["kind"], o["apiVersion"].rpartition("/")[0]), []).append(o)
    for (kind, group), items in groups.items():
        state.replace(kind, group, items)
    monkeypatch.setattr(state.foreground, "_max_defer", 0.01)
    state.foreground.begin()  # never ended
    selector = cel.compile(f'device.driver == "{D}"')
    for view in list(state.devices.values())[-100:]:  # as /filter evaluates the devices it looks at
        cel.evaluate(selector, view)
    for kind, group in state.required:
        state.mark_synced(kind, group)  # queues the warm-up, which waits for quiet
    for _ in range(3000):
        if frozen_after or slices >= 10:
            break
        await asyncio.sleep(0.001)
    assert frozen_after and frozen_after[0] <= 2, f"frozen after slices {frozen_after} ({slices} run)"
