"""Backpressure: while --max-binds-in-flight binds are in progress, /filter waits (at most --placement-wait) for fewer.

On the fake API server, every Binding is held until the test lets them go,
so the binds stay in progress as they do behind an API server that cannot
keep up (extender/bind/backlog.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from extender.bind.backlog import BindBacklog
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.objects import claim, node
from tests.extender.api_cluster import RESOURCE, ApiCluster, extended_pod, gpu_class, node_slice, pod_with_claim, until


class HeldBindings:
    """Holds every Binding the extender creates until `release()`."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.held = 0

    async def __call__(self, info: RequestInfo) -> Any:
        if info.resource == "pods" and info.subresource == "binding":
            self.held += 1
            await self.go.wait()
        return None

    def release(self) -> None:
        self.go.set()


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(bookmark_interval=0.2) as server:
        server.create(gpu_class(extended_resource=RESOURCE))
        server.create(node("n1", hostname=True))
        server.create(node_slice("n1", 8))
        for i in range(3):
            server.create(claim(f"c{i}"))
            server.create(pod_with_claim(f"p{i}", f"c{i}"))
        server.create(extended_pod("px"))  # its claim is made at its /bind, from the class's extended resource
        yield server


@dataclass(frozen=True)
class Row:
    name: str
    limit: int
    placement_wait: float
    waits_for_a_bind: bool  # the third pod's /filter answers only once a bind is let go (else while they are held)
    waited_at_least: float  # seconds the metric must show (0: no wait observed)
    probe: str = "p2"  # the pod whose /filter comes while two binds are held


ROWS = [
    Row("at the limit, a filter waits until a bind completes", 2, 5.0, True, 0.2),
    Row("no limit (0): a filter answers at once", 0, 5.0, False, 0.0),
    Row("below the limit: a filter answers at once", 3, 5.0, False, 0.0),
    Row("the wait is bounded by --placement-wait", 2, 0.4, False, 0.4),
    Row("a pod asking for a DRA-backed extended resource waits too", 2, 5.0, True, 0.2, probe="px"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_filter_waits_while_too_many_binds_are_in_progress(api: FakeApiServer, tmp_path: Path, row: Row) -> None:
    cluster = ApiCluster(api, tmp_path, max_binds_in_flight=row.limit, placement_wait=row.placement_wait)
    service = await cluster.start()
    await cluster.caught_up()
    held = HeldBindings()
    api.add_reactor(held)
    pods: list[dict[str, Any]] = []
    for name in ("p0", "p1", row.probe):
        got = api.get("pods", "default", name)
        assert got is not None
        pods.append(got)
    try:
        binds = [asyncio.create_task(cluster.bind(p, "n1")) for p in pods[:2]]
        await until(lambda: held.held == 2, "both Bindings to be held")
        assert service.backlog.in_flight == 2
        assert service.metrics.registry.get_sample_value("dra_extender_binds_in_flight") == 2
        start = time.monotonic()
        third = asyncio.create_task(cluster.filter(pods[2], ["n1"]))
        if row.waits_for_a_bind:
            await asyncio.sleep(0.2)
            assert not third.done(), "the third /filter answered while both binds were held"
            held.release()
        else:
            await asyncio.wait_for(asyncio.shield(third), 2.0)  # answered with both binds still held
            assert held.held == 2 and service.backlog.in_flight == 2
        passed, failed = await third
        took = time.monotonic() - start
        held.release()
        assert passed == ["n1"], failed
        assert [await b for b in binds] == ["", ""]
    finally:
        held.release()
        await cluster.stop()
    assert service.backlog.in_flight == 0
    observed = next(iter(service.metrics.bind_backlog_wait.collect())).samples
    count = next(s.value for s in observed if s.name.endswith("_count"))
    total = next(s.value for s in observed if s.name.endswith("_sum"))
    if row.waited_at_least:
        assert count == 1 and total >= row.waited_at_least * 0.9 and took >= row.waited_at_least * 0.9, (count, total, took)
    else:
        assert count == 0, (count, total)


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max binds in flight -1"):
        BindBacklog(-1)
