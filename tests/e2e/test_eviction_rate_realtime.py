"""The eviction rate on real time against the fake API server with write latency.

The fake-clock tests cannot see what the API's latency does to the rate: here
every write takes 30 ms, the controller runs on the real clock with its real
debounce, and the times the deletions reach the server must show the
configured burst and rate (within 10 %).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from allocator.cel import CelEnvironment
from controllers.eviction import EvictionController, Settings
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.objects import node
from serving.metrics import Metrics
from tests.eviction.harness import claim_and_pod, gpu_slice, rule, seed
from tracker.apiserver.source import ApiSource
from tracker.state import ClusterState

PODS = 60
BURST = 10
WRITE_LATENCY_MS = 30

RATES = [
    # name, evictionsPerSecond of the rule
    ("default-rate", None),
    ("25-per-second", 25),
]


@pytest.mark.parametrize(("name", "rate"), RATES, ids=[r[0] for r in RATES])
async def test_burst_and_rate_hold_with_real_api_latency(tmp_path: Path, name: str, rate: int | None) -> None:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        seed(api, node("node-a"), gpu_slice(PODS))
        for i in range(PODS):
            claim, pod = claim_and_pod(f"p{i}", i)
            seed(api, claim, pod)
        deleted: list[float] = []

        def record(info: RequestInfo) -> None:
            if info.method == "DELETE" and info.resource == "pods":
                deleted.append(time.monotonic())

        api.add_reactor(record)
        api.set_faults(latency_ms=WRITE_LATENCY_MS, verbs=["create", "update", "patch", "delete"])
        state = ClusterState(CelEnvironment())
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        controller = EvictionController(state, source, Settings(), metrics=Metrics())
        tasks = [asyncio.create_task(source.run(state)), asyncio.create_task(controller.run())]
        try:
            for _ in range(500):
                if state.ready:
                    break
                await asyncio.sleep(0.01)
            assert state.ready
            taint = {"evictionsPerSecond": rate} if rate is not None else {}
            seed(api, rule("drain", **taint))
            expected = (PODS - BURST) / (rate or 10)
            deadline = time.monotonic() + 3 * expected + 10
            while len(deleted) < PODS and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            for t in tasks:
                t.cancel()
            _, running = await asyncio.wait(tasks, timeout=10)
            for t in running:
                t.print_stack()
            assert not running, f"{len(running)} task(s) did not stop within 10 s of their cancellation"
        assert len(deleted) == PODS, f"{len(deleted)} of {PODS} pods deleted"
        first = deleted[0]
        burst = sum(1 for t in deleted if t - first < 0.5 * (1 / (rate or 10)) + 0.1)
        took = deleted[-1] - first
        print(f"{name}: burst {burst} within the first token's time, the other {PODS - BURST} in {took:.2f} s (expected {expected:.2f} s)")
        assert burst >= BURST, f"only {burst} deletions in the burst"
        assert abs(took - expected) <= 0.1 * expected, f"{PODS} pods took {took:.2f} s after the first; the rate says {expected:.2f} s"
