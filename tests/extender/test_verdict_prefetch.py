"""A repeating shape's remaining verdicts are computed between verbs (extender/filter/prefetch.py), and are ordinary cached verdicts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from extender import wire
from extender.filter import prefetch as prefetch_module
from extender.service import Service
from extender.wire import BindingArgs, ExtenderArgs
from serving.http_thread import LoopBridge
from tests.extender.manifest_cluster import claimed_pod, filter_args, manifest_service
from tracker.views.warmup import WARMUP_YIELDS

NODES = [f"node-{i:02d}" for i in range(12)]
OFFER = 3  # /filter looks at 3 names at a time: 4 looks make the first pass

CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
"""

# pod -> its claim's `exactly` (None: one device): two shapes, each repeating
SHAPES: dict[str, dict[str, object] | None] = {f"p{i}": ({"count": 2} if i % 3 == 0 else None) for i in range(1, 10)}


def _cluster(directory: Path, gpus: dict[str, int]) -> None:
    docs = [CLASS]
    for node in NODES:
        docs.append(f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n")
        devices = "".join(f"  - name: gpu-{i}\n" for i in range(gpus[node]))
        if devices:
            docs.append(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\n"
                f"metadata: {{name: {node}-gpu}}\n"
                f"spec:\n  driver: gpu.example.com\n  nodeName: {node}\n"
                f"  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}"
            )
    for name, exactly in SHAPES.items():
        docs += [yaml.safe_dump(o) for o in claimed_pod(name, f"c{name[1:]}", "gpu.example.com", exactly)]
    directory.mkdir()
    (directory / "cluster.yaml").write_text("---\n".join(docs))


Start = Callable[..., Awaitable[Service]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    tasks: list[asyncio.Task[None]] = []

    async def run(gpus: dict[str, int], *, prefetch: bool = True) -> Service:
        directory = tmp_path / f"c{len(tasks)}"
        _cluster(directory, gpus)
        service, task = await manifest_service(directory, offer_nodes=OFFER, placement_wait=0.2)
        if not prefetch:
            service.fit.prefetch = None
        tasks.append(task)
        return service

    yield run
    for task in tasks:
        task.cancel()


def _args(name: str, names: list[str] = NODES) -> ExtenderArgs:
    return filter_args(name, f"c{name[1:]}", names)


async def _drained(service: Service) -> None:
    prefetch = service.fit.prefetch
    if prefetch is not None and prefetch.task is not None:
        await prefetch.task


async def _filter_decided(service: Service, name: str) -> list[str]:
    """/filter for `name`, then its bind counted as decided (no node taken): the next filter does not wait for it."""
    passed, _ = await service.filter(_args(name))
    service.bind_decided(f"uid-{name}")
    return passed


async def _look_over_every_name(service: Service, name: str) -> tuple[int, list[str], dict[str, str]]:
    """(verdicts computed, passed, failed) of a /filter for `name` that looks at every name at once."""
    service.fit.offer_nodes = 0
    before = service.outcomes.misses
    passed, failed = await service.filter(_args(name))
    return service.outcomes.misses - before, passed, failed


@pytest.mark.parametrize(
    ("prefetch", "computed_by_third"),
    [
        pytest.param(True, 0, id="prefetched: the third pod computes nothing"),
        pytest.param(False, len(NODES) - 2 * OFFER, id="without: the third pod computes the nodes not looked at"),
    ],
)
async def test_a_repeating_shape_has_every_verdict_after_its_second_pod(start: Start, prefetch: bool, computed_by_third: int) -> None:
    service = await start(dict.fromkeys(NODES, 2), prefetch=prefetch)
    await _filter_decided(service, "p1")
    await _filter_decided(service, "p2")
    await _drained(service)
    computed, passed, _ = await _look_over_every_name(service, "p4")  # p4 has p1's shape
    assert computed == computed_by_third
    assert passed == NODES


async def test_a_one_off_shape_starts_no_prefetch(start: Start) -> None:
    service = await start(dict.fromkeys(NODES, 2))
    prefetch = service.fit.prefetch
    assert prefetch is not None
    await _filter_decided(service, "p1")  # one device
    await _filter_decided(service, "p3")  # two devices: another shape, seen once each
    assert prefetch.task is None and prefetch.computed == 0
    await _filter_decided(service, "p2")  # p1's shape again
    assert prefetch.task is not None
    await prefetch.task
    assert prefetch.computed == len(NODES) - 2 * OFFER  # every name but those p1 and p2 looked at (p3's look was its own shape's)


@pytest.mark.parametrize(
    ("bound_node", "slices_before_bind", "recomputed"),
    [
        pytest.param(NODES[2 * OFFER], None, {1}, id="bind after the prefetch drained, on a node it computed first"),
        pytest.param(NODES[-1], None, {1}, id="bind after the prefetch drained, on the node it computed last"),
        pytest.param(NODES[2 * OFFER], 1, {1}, id="bind while the prefetch runs, on a node it computed already"),
        # The prefetch may reach the node after the bind (its verdict already sees the device taken)
        # or between the bind's reservation and the claim's update (computed again): both are right.
        pytest.param(NODES[-1], 1, {0, 1}, id="bind while the prefetch runs, on a node it has not reached"),
    ],
)
async def test_a_prefetched_verdict_is_computed_again_after_a_bind_on_its_node(
    start: Start, monkeypatch: pytest.MonkeyPatch, bound_node: str, slices_before_bind: int | None, recomputed: set[int]
) -> None:
    monkeypatch.setattr(prefetch_module, "PREFETCH_SLICE_SECONDS", 0.0)  # one step of nodes per slice: the interleaving is ours
    service = await start(dict.fromkeys(NODES, 1))
    await _filter_decided(service, "p1")
    await _filter_decided(service, "p2")
    prefetch = service.fit.prefetch
    assert prefetch is not None and prefetch.task is not None
    if slices_before_bind is None:
        await prefetch.task
    else:
        for _ in range(slices_before_bind * (WARMUP_YIELDS + 1)):
            await asyncio.sleep(0)  # one loop turn each (no wall time)
        assert 0 < prefetch.computed < len(NODES) - 2 * OFFER, "the bind lands inside the prefetch"
    assert await service.bind(BindingArgs("p4", "default", "uid-p4", bound_node)) is None  # p4: p1's shape, one GPU
    await prefetch.task
    computed, passed, failed = await _look_over_every_name(service, "p5")
    assert bound_node in failed and bound_node not in passed, "its only GPU is taken: a stale prefetched fit would offer it"
    assert passed == [n for n in NODES if n != bound_node]
    assert computed in recomputed, f"{computed} verdicts computed again; only the bound node may be"


async def test_filter_answers_are_byte_identical_with_and_without_the_prefetch(start: Start) -> None:
    gpus = {node: i % 3 for i, node in enumerate(NODES)}  # 0, 1 or 2 GPUs: fits and failures of both shapes
    answers: dict[bool, list[bytes]] = {}
    for prefetch in (True, False):
        service = await start(gpus, prefetch=prefetch)
        out = answers[prefetch] = []
        for name in SHAPES:
            args = _args(name)
            passed, failed = await service.filter(args)
            out.append(wire.filter_result(args, passed, unresolvable=failed))
            await _drained(service)
            if passed:
                assert await service.bind(BindingArgs(name, "default", f"uid-{name}", passed[0])) is None
            else:
                service.bind_decided(f"uid-{name}")
        if prefetch:
            assert service.fit.prefetch is not None and service.fit.prefetch.computed > 0, "the prefetch ran"
    assert answers[True] == answers[False]


async def test_the_prefetch_runs_on_the_main_loop_when_the_verbs_come_from_the_http_thread(start: Start) -> None:
    service = await start(dict.fromkeys(NODES, 2))
    main = asyncio.get_running_loop()
    bridge = LoopBridge(main, stall_threshold=60)

    def from_the_http_thread(name: str) -> None:  # a loop of its own, as uvicorn's thread has
        asyncio.run(bridge.call(lambda: service.filter(_args(name))))

    for name in ("p1", "p2"):
        await asyncio.to_thread(from_the_http_thread, name)
        service.bind_decided(f"uid-{name}")
    prefetch = service.fit.prefetch
    assert prefetch is not None and prefetch.task is not None
    assert prefetch.task.get_loop() is main
    await prefetch.task
    assert prefetch.computed == len(NODES) - 2 * OFFER


async def test_a_failing_prefetch_is_logged_and_leaves_the_verbs_alone(start: Start, caplog: pytest.LogCaptureFixture) -> None:
    service = await start(dict.fromkeys(NODES, 2))
    await _filter_decided(service, "p1")
    real = service.outcomes.verdicts

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("boom")

    await _filter_decided(service, "p2")
    service.outcomes.verdicts = broken  # type: ignore[method-assign]  # the prefetch's next step fails
    prefetch = service.fit.prefetch
    assert prefetch is not None and prefetch.task is not None
    await prefetch.task  # ends without raising
    assert prefetch.task.exception() is None
    assert "verdict prefetch stopped" in caplog.text
    service.outcomes.verdicts = real  # type: ignore[method-assign]  # back to the real method
    passed, _ = await service.filter(_args("p4"))
    assert len(passed) == OFFER


async def test_the_prefetch_stops_when_its_shape_leaves_the_cache(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch_module, "PREFETCH_SLICE_SECONDS", 0.0)  # one step of nodes per slice
    service = await start(dict.fromkeys(NODES, 2))
    await _filter_decided(service, "p1")
    await _filter_decided(service, "p2")
    prefetch = service.fit.prefetch
    assert prefetch is not None and prefetch.task is not None
    service.outcomes.size = 1  # the next shape's verdicts push the oldest shape's out of the cache
    await _filter_decided(service, "p3")
    await prefetch.task
    assert prefetch.computed <= prefetch_module.STEP_NODES < len(NODES) - 2 * OFFER, "stopped, at most one step in"
