"""The extender's own extended-resource claim is never taken for another allocator's (no false alarm for on-call).

docs/operator-guide.md tells on-call to watch for "device allocated by another
allocator while we were allocating it" and for dra_extender_foreign_allocations_total:
a bind of a pod with DRA-backed extended resources must raise neither.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubesim.fakeapi import FakeApiServer
from kubesim.objects import claim, node
from tests.extender.api_cluster import RESOURCE, ApiCluster, extended_pod, gpu_class, node_slice

FOREIGN = ("device allocated by another allocator", "claim allocated by another allocator", "device is allocated to two claims")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class(RESOURCE))
        api.create(node("own-a", hostname=True))
        api.create(node_slice("own-a", 2))
        c = ApiCluster(api, tmp_path)
        yield c
        await c.stop()


COUNTS = [
    # name, devices of the extended resource, whether the pod also has a claim of its own (written before the extended one)
    ("one-device", 1, False),
    ("two-devices", 2, False),
    ("after-a-claim-of-its-own", 1, True),
]


@pytest.mark.parametrize(("name", "count", "own_claim"), COUNTS, ids=[c[0] for c in COUNTS])
async def test_binding_an_extended_resource_pod_raises_no_foreign_allocation_alarm(
    cluster: ApiCluster, caplog: pytest.LogCaptureFixture, name: str, count: int, own_claim: bool
) -> None:
    raw = extended_pod("own-pod", count)
    if own_claim:
        cluster.api.create(claim("own-c"))
        raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "own-c"}]
    pod = cluster.api.create(raw)
    service = await cluster.start()
    await cluster.caught_up()
    with caplog.at_level(logging.INFO, logger="dra_extender"):
        assert await cluster.bind(pod, "own-a") == ""
        await cluster.caught_up()
    alarms = [r.getMessage() for r in caplog.records if r.getMessage().startswith(FOREIGN)]
    assert alarms == [], f"{name}: {alarms}"
    assert not service.metrics.registry.get_sample_value("dra_extender_foreign_allocations_total")
    assert not service.state.inflight, "the in-flight hold is released once the claim is written"
    allocated = [c for c in cluster.api.list("resourceclaims", group="resource.k8s.io") if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == (2 if own_claim else 1), allocated
