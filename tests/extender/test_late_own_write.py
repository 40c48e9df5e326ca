"""Our own claim write that lands after its bind gave up is not reported as another allocator's.

A bind's claim status write can time out at the extender and still be
applied by the API server (it was slow, not refusing). Its watch event then
brings an allocation the bind no longer waits for; on-call's alarm for a
second allocator (dra_extender_foreign_allocations_total) must stay quiet.
A write the API server refused (4xx) never lands, so its expectation goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.objects import claim, node
from tests.extender.api_cluster import ApiCluster, gpu_class, node_slice, pod_with_claim, until

FOREIGN = "claim allocated by another allocator"


@dataclass
class LateStatusWrite:
    """The first claim status write is applied `delay` seconds late, after the client gave up on it.

    As kube-apiserver does: a request whose client went away is still carried
    out ("post-timeout activity"). The fake server cancels such a handler, so
    this reactor applies the write itself, late, and holds the request until then.
    """

    api: FakeApiServer
    delay: float
    landed: bool = False
    used: bool = False

    async def __call__(self, info: RequestInfo) -> Any:
        if self.used or info.resource != "resourceclaims" or info.subresource != "status" or info.verb != "patch":
            return None
        self.used = True
        body = orjson.loads(info.body)
        body.get("metadata", {}).pop("resourceVersion", None)  # applied as it came: nothing wrote the claim meanwhile
        await asyncio.shield(asyncio.ensure_future(self._apply_late(info, body)))
        return None

    async def _apply_late(self, info: RequestInfo, body: dict[str, Any]) -> None:
        await asyncio.sleep(self.delay)
        self.api.patch("resourceclaims", info.namespace, info.name or "", body, subresource="status", group="resource.k8s.io")
        self.landed = True


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class())
        api.create(node("late-a", hostname=True))
        api.create(node_slice("late-a", 2))
        api.create(claim("c1"))
        api.create(pod_with_claim("p1", "c1"))
        c = ApiCluster(api, tmp_path, bind_timeout=0.4)
        yield c
        await c.stop()


async def test_a_status_write_that_lands_after_its_bind_timed_out_raises_no_foreign_alarm(
    cluster: ApiCluster, caplog: pytest.LogCaptureFixture
) -> None:
    late = LateStatusWrite(cluster.api, delay=0.8)
    cluster.api.add_reactor(late)
    service = await cluster.start()
    await cluster.caught_up()
    pod = cluster.api.get("pods", "default", "p1")
    assert pod is not None
    with caplog.at_level(logging.INFO, logger="dra_extender"):
        answer = await cluster.bind(pod, "late-a")
        assert "timed out" in answer, answer
        await until(lambda: late.landed, "the late write to land")
        await cluster.caught_up()
    alarms = [r.getMessage() for r in caplog.records if r.getMessage().startswith(FOREIGN)]
    assert alarms == []
    assert not service.metrics.registry.get_sample_value("dra_extender_foreign_allocations_total")
