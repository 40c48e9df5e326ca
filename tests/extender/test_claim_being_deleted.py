"""A claim being deleted is never reserved for a pod, allocated or not (upstream's PreFilter: `resourceclaim "x" is being deleted`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from kubesim.fakeapi import FakeApiServer
from kubesim.objects import claim, node
from tests.extender.api_cluster import ApiCluster, gpu_class, node_slice, pod_with_claim

GROUP = "resource.k8s.io"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class())
        api.create(node("del-a", hostname=True))
        api.create(node_slice("del-a", 2))
        c = ApiCluster(api, tmp_path)
        yield c
        await c.stop()


async def _in_use_by_the_first_pod(c: ApiCluster) -> None:
    """A shared claim: the first pod is bound with it and still runs."""


async def _first_pod_gone(c: ApiCluster) -> None:
    """The first pod is gone: its reservation removed (as the resourceclaim controller does), the allocation kept."""
    current = c.api.get("resourceclaims", "default", "shared", group=GROUP)
    assert current is not None
    c.api.patch("resourceclaims", "default", "shared", {"status": {"reservedFor": None}}, subresource="status", group=GROUP)


ROWS: list[tuple[str, Callable[[ApiCluster], Awaitable[None]]]] = [
    ("allocated-and-reserved-for-another-pod", _in_use_by_the_first_pod),
    ("allocated-and-reserved-for-nobody", _first_pod_gone),
]


@pytest.mark.parametrize(("name", "setup"), ROWS, ids=[r[0] for r in ROWS])
async def test_an_allocated_claim_being_deleted_is_refused_at_filter_and_bind(
    cluster: ApiCluster, name: str, setup: Callable[[ApiCluster], Awaitable[None]]
) -> None:
    api = cluster.api
    api.create(claim("shared"))
    first = api.create(pod_with_claim("first", "shared"))
    second = api.create(pod_with_claim("second", "shared"))
    await cluster.start()
    await cluster.caught_up()
    assert await cluster.bind(first, "del-a") == ""
    await setup(cluster)
    api.delete("resourceclaims", "default", "shared", group=GROUP)  # the finalizer keeps it, with a deletionTimestamp
    deleting = api.get("resourceclaims", "default", "shared", group=GROUP)
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp") and deleting["status"].get("allocation")
    reserved_before = deleting["status"].get("reservedFor")
    await cluster.caught_up()

    passed, failed = await cluster.filter(second, ["del-a"])
    assert passed == [] and failed == {"del-a": 'resourceclaim "shared" is being deleted'}, (name, passed, failed)
    answer = await cluster.bind(second, "del-a")
    assert 'resourceclaim "shared" is being deleted' in answer, (name, answer)

    after = api.get("resourceclaims", "default", "shared", group=GROUP)
    assert after is not None and after["status"].get("reservedFor") == reserved_before, name
    assert not api.get("pods", "default", "second")["spec"].get("nodeName"), name
