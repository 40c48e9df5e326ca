"""/bind and leadership in-process: leadership is re-checked under the bind lock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from extender.bind.binder import DEFAULT_BIND_TIMEOUT
from extender.wire import BindingArgs
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.lease import FakeLease
from kubesim.objects import claim, node
from tests.e2e.harness import DEMO_UIDS
from tests.extender.api_cluster import ApiCluster, gpu_class, node_slice, pod_with_claim
from tracker.leadership_gate import LeadershipGate


async def test_bind_queued_behind_the_lock_when_leadership_ends_does_not_allocate(demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    async with svc.binder.lock:
        # The request passed the entry check and waits for the lock (another bind is writing)...
        waiting = asyncio.create_task(svc.bind(args))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        # ...when this process stops leading (a hand-over noticed at the next Lease poll).
        demo.lease.held = False
    refusal = await waiting
    assert refusal is not None and refusal.message == "not leader"
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
    assert not svc.state.inflight


async def test_bind_while_leading_allocates(demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    assert await svc.bind(args) is None
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    assert claim["status"]["allocation"]["devices"]["results"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": DEMO_UIDS["trainer"]}]


@pytest.mark.parametrize(
    ("case", "wait", "bound"),
    [
        # Our scheduler leads at once; the sidecar waits for the previous holder's to stop: a bind in that wait waits too.
        ("hand-over-ends-within-the-bind-timeout", 0.2, True),
        # Too long to wait within the bind's timeout (less the reserve for the bind itself): refused at once, as before.
        ("hand-over-ends-after-the-bind-timeout", DEFAULT_BIND_TIMEOUT, False),
    ],
)
async def test_a_bind_during_a_hand_over_wait(case: str, wait: float, bound: bool, demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    demo.lease.active_from = time.monotonic() + wait
    refusal = await svc.bind(BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a"))
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    if bound:
        assert refusal is None, case
        assert time.monotonic() >= demo.lease.active_from, "allocated only once leading"
        assert claim["status"]["allocation"]["devices"]["results"]
    else:
        assert refusal is not None and refusal.message == "not leader", case
        assert not (claim.get("status") or {}).get("allocation")


async def test_a_bind_that_waited_for_a_hand_over_refuses_if_the_lease_moved_on_meanwhile(demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    demo.lease.active_from = time.monotonic() + 0.2
    waiting = asyncio.create_task(svc.bind(BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")))
    await asyncio.sleep(0.05)
    demo.lease.held = False  # a poll saw another holder during the wait
    refusal = await waiting
    assert refusal is not None and refusal.message == "not leader"
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None and not (claim.get("status") or {}).get("allocation")


@pytest.mark.parametrize(
    ("case", "on_read", "bound"),
    [
        # Our scheduler created its Lease and bound before the sidecar's next periodic read: the bind reads it.
        ("fresh-lease-found-by-the-binds-read", (True, 0.2), True),
        ("still-no-lease", None, False),
        ("another-holder", (False, 0.0), False),
    ],
)
async def test_a_bind_while_not_leading_reads_the_lease_first(case: str, on_read, bound: bool, demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    demo.lease.held = False
    demo.lease.on_read = on_read
    refusal = await svc.bind(BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a"))
    assert demo.lease.reads >= 1, case
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    if bound:
        assert refusal is None, case
        assert claim["status"]["allocation"]["devices"]["results"]
    else:
        assert refusal is not None and refusal.message == "not leader", case
        assert not (claim.get("status") or {}).get("allocation")


def _binding_fails_as_leadership_ends(lease: FakeLease) -> Callable[[RequestInfo], Any]:
    def react(info: RequestInfo) -> Any:
        if info.resource == "pods" and info.subresource == "binding":
            lease.held = False  # the Lease was lost while the binding was on its way
            return 500, {"kind": "Status", "status": "Failure", "code": 500, "message": "injected"}
        return None

    return react


@contextlib.asynccontextmanager
async def _leading_cluster(tmp_path: Path, lease: FakeLease) -> AsyncIterator[tuple[FakeApiServer, ApiCluster, dict[str, Any]]]:
    """One GPU node and a pod whose claim wants it, with a cluster that leads while `lease.held`."""
    async with FakeApiServer() as api:
        api.create(gpu_class())
        api.create(node("n1", hostname=True))
        api.create(node_slice("n1", 1))
        api.create(claim("c1"))
        pod = api.create(pod_with_claim("p1", "c1"))
        cluster = ApiCluster(api, tmp_path, leadership=LeadershipGate(lease))
        try:
            await cluster.start()
            await cluster.caught_up()
            yield api, cluster, pod
        finally:
            await cluster.stop()


async def test_an_undo_after_leadership_ended_writes_nothing(tmp_path: Path) -> None:
    """The pod's binding fails as leadership moves on: the undo that follows leaves the claim to the new leader."""
    lease = FakeLease()
    async with _leading_cluster(tmp_path, lease) as (api, cluster, pod):
        reactor = api.add_reactor(_binding_fails_as_leadership_ends(lease))
        api.clear_requests()
        answer = await cluster.bind(pod, "n1")  # the undo runs within the bind's budget
        assert answer and not lease.held, answer
        requests = list(api.requests)
        binding = next(i for i, r in enumerate(requests) if r.resource == "pods/binding")
        claim_writes = [(r.method, r.path) for r in requests if r.method != "GET" and r.resource.startswith("resourceclaims")]
        after = [(r.method, r.path) for r in requests[binding + 1 :] if r.method != "GET" and r.resource.startswith("resourceclaims")]
        assert claim_writes and not after, f"an ex-leader wrote {after}"
        status = api.get("resourceclaims", "default", "c1", group="resource.k8s.io")["status"]
        assert status.get("allocation") and status.get("reservedFor"), status
        assert not cluster.state.inflight, "the in-flight devices are released all the same"

        # kube-scheduler retries the pod; the leader then (here this process again) binds it to the
        # claim's allocation as it was left, without writing the claim again.
        api.remove_reactor(reactor)
        lease.held = True
        await cluster.caught_up()
        api.clear_requests()
        assert await cluster.bind(pod, "n1") == ""
        writes = [(r.method, r.resource) for r in api.requests if r.method != "GET"]
        assert writes == [("POST", "pods/binding")], writes
        again = api.get("resourceclaims", "default", "c1", group="resource.k8s.io")["status"]
        assert again["allocation"] == status["allocation"] and again["reservedFor"] == status["reservedFor"], again
        assert api.get("pods", "default", "p1")["spec"]["nodeName"] == "n1"


def _leadership_ends_at(lease: FakeLease, subresource: str) -> Callable[[RequestInfo], Any]:
    """The Lease is lost while one claim write is on its way; the write itself lands."""

    def react(info: RequestInfo) -> Any:
        if info.method == "PATCH" and info.resource == "resourceclaims" and (info.subresource or "") == subresource:
            lease.held = False
        return None

    return react


@pytest.mark.parametrize(
    ("ends_at", "landed"),
    [
        pytest.param("", [("PATCH", "resourceclaims")], id="during the finalizer write: no allocation, no Binding"),
        pytest.param(
            "status", [("PATCH", "resourceclaims"), ("PATCH", "resourceclaims/status")], id="during the allocation write: no Binding"
        ),
    ],
)
async def test_a_bind_stops_writing_when_leadership_ends(tmp_path: Path, ends_at: str, landed: list[tuple[str, str]]) -> None:
    """Each of a bind's writes asks whether this process still leads: an ex-leader never writes after its lead ended."""
    lease = FakeLease()
    async with _leading_cluster(tmp_path, lease) as (api, cluster, pod):
        api.add_reactor(_leadership_ends_at(lease, ends_at))
        api.clear_requests()
        answer = await cluster.bind(pod, "n1")
        assert answer and "not leader" in str(answer) and not lease.held, answer
        writes = [(r.method, r.resource) for r in api.requests if r.method != "GET" and r.resource.startswith(("resourceclaims", "pods"))]
        assert writes == landed, f"an ex-leader wrote {writes[len(landed) :]}"
        assert not cluster.state.inflight, "the in-flight devices are released all the same"
