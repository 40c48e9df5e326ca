"""The binding timeout against a driver that reports ready at that moment, and a /bind that sees it (a controlled interleaving).

The deallocation a timeout decides is held at its claim write; meanwhile the
driver reports the device ready and the scheduler's /bind arrives. Whatever
the order, the pod must never end bound with its claim deallocated: either
the bind waits for the deallocation (and the ready claim keeps its
allocation), or the bind wins and nothing is deallocated.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubesim.clock import FakeClock
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.lease import FakeLease
from kubesim.objects import claim, node
from tests.extender.api_cluster import ApiCluster, Held, gpu_class, node_slice, pod_with_claim, ready_condition, until
from tracker.leadership_gate import LeadershipGate

TIMEOUT = 600.0


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class())
        api.create(node("bc-a", hostname=True))
        api.create(node_slice("bc-a", 1, binding_conditions=True))
        c = ApiCluster(api, tmp_path, binding_timeout=TIMEOUT)
        yield c
        await c.stop()


def _claim_status_write(name: str):
    def match(info: RequestInfo) -> bool:
        return info.resource == "resourceclaims" and info.subresource == "status" and info.verb == "patch" and info.name == name

    return match


async def _by_timer(c: ApiCluster, pod: dict, uid: str) -> None:
    c.service.binder.binding.expire(uid)


async def _by_filter(c: ApiCluster, pod: dict, uid: str) -> None:
    passed, failed = await c.filter(pod, ["bc-a"])
    assert passed == [] and "device binding timeout" in failed["bc-a"], failed


TRIGGERS = [
    # name, what sees the timeout first
    ("the-extenders-timer", _by_timer),
    ("a-filter-of-the-pod", _by_filter),
]


@pytest.mark.parametrize(("name", "trigger"), TRIGGERS, ids=[t[0] for t in TRIGGERS])
async def test_ready_at_the_timeout_never_leaves_the_pod_bound_to_a_deallocated_claim(cluster: ApiCluster, name: str, trigger) -> None:
    api = cluster.api
    api.create(claim("c1"))
    pod = api.create(pod_with_claim("p1", "c1"))
    uid = pod["metadata"]["uid"]
    service = await cluster.start()
    await cluster.caught_up()
    clock = FakeClock(time.time())  # now: the claims carry the fake API server's real timestamps
    service.binder.binding.clock = clock.now

    pending = await cluster.bind(pod, "bc-a")
    assert "waiting for binding conditions" in pending, pending
    await cluster.caught_up()

    held = Held(_claim_status_write("c1"))
    api.add_reactor(held)
    clock.advance(TIMEOUT + 60)  # the binding timeout has passed: the deallocation is decided on a claim not ready
    await trigger(cluster, pod, uid)
    await held.arrived.wait()  # ... and its write of the claim is on its way

    ready_condition(api, "c1")  # the driver: ready, just now
    await cluster.caught_up()
    answer = await cluster.bind(pod, "bc-a")  # the scheduler's /bind sees the device ready

    held.release()
    await until(lambda: not service.binder.binding.background.running(f"dealloc/{uid}"), "the deallocation to end")
    await cluster.caught_up()
    if answer:
        assert "being deallocated" in answer, answer
        answer = await cluster.bind(pod, "bc-a")  # retried by the scheduler
    assert answer == "", answer

    bound = api.get("pods", "default", "p1")
    status = api.get("resourceclaims", "default", "c1", group="resource.k8s.io")["status"]
    assert bound["spec"].get("nodeName") == "bc-a"
    assert status.get("allocation"), f"{name}: the pod is bound, its claim was deallocated"
    assert [r["uid"] for r in status.get("reservedFor") or []] == [uid]


async def test_a_standby_replicas_filter_never_deallocates(cluster: ApiCluster) -> None:
    """A replica that is not leader answers /filter as the leader would, but never writes a claim."""
    lease = FakeLease()
    cluster.service_args["leadership"] = LeadershipGate(lease)
    api = cluster.api
    api.create(claim("c1"))
    pod = api.create(pod_with_claim("p1", "c1"))
    service = await cluster.start()
    await cluster.caught_up()
    clock = FakeClock(time.time())  # now: the claims carry the fake API server's real timestamps
    service.binder.binding.clock = clock.now
    pending = await cluster.bind(pod, "bc-a")
    assert "waiting for binding conditions" in pending, pending
    await cluster.caught_up()

    lease.held = False  # leadership moved on; this replica's /filter still sees the timed-out claim
    clock.advance(TIMEOUT + 60)
    passed, failed = await cluster.filter(pod, ["bc-a"])
    assert passed == [] and "device binding timeout" in failed["bc-a"], failed
    assert not service.binder.binding.background.running(f"dealloc/{pod['metadata']['uid']}")
    status = api.get("resourceclaims", "default", "c1", group="resource.k8s.io")["status"]
    assert status.get("allocation"), "a standby replica deallocated the leader's claim"
