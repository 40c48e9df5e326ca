"""dra-extender behind the kube-scheduler model (kubesim/scheduler/), in cluster mode against the fake API server.

Why: a driver that waits for each bind hides the bind race a real
kube-scheduler hits (docs/kube-scheduler.md#asynchronous-binding-and-a-single-writer).
These runs use the model's asynchronous binds, backoff queue and
claim-controller stand-in, and assert the model's targets on a
cluster small enough for CI: every pod that fits is bound, no failed bind, no
rejection of a pod that fits somewhere, no device allocated twice (every claim
read back from the API server), no bind longer than httpTimeout.
Throughput is measured in bench/, never asserted here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kubesim.objects import PAUSE, device_class, gpu_slice, node, pod
from kubesim.scheduler import ClaimControllerConfig, SchedulerConfig, Workload, default_extender_cmd, run_workload

HTTP_TIMEOUT = 5.0


def missed_targets(r: dict[str, Any], expected_bound: int) -> list[str]:
    """Every target the run missed, with its numbers (one assertion shows them all)."""
    rb = r["readback"]
    bind = r["latency_ms"]["bind"]
    checks = [
        (
            r["pods_bound"] == expected_bound and rb["pods_bound"] == expected_bound,
            f"bound {r['pods_bound']} (API: {rb['pods_bound']}) of {expected_bound}; unbound pods' last rejection: {r['unbound_last_rejections']}",
        ),
        (r["failed_binds"] == 0, f"{r['failed_binds']} failed binds: {r['bind_errors']}"),
        (
            r["rejections_of_pods_that_fit"] == 0,
            f"{r['rejections_of_pods_that_fit']} rejections of pods that fit somewhere: {r['fit_rejection_reasons']}",
        ),
        (rb["devices_allocated_twice"] == 0, f"{rb['devices_allocated_twice']} devices allocated twice"),
        (
            rb["bound_pods_without_allocated_claim"] == 0,
            f"{rb['bound_pods_without_allocated_claim']} bound pods without an allocated claim",
        ),
        (
            r["bind_timeouts"] == 0 and bind["max"] < HTTP_TIMEOUT * 1000,
            f"{r['bind_timeouts']} binds timed out (httpTimeout {HTTP_TIMEOUT} s), longest {bind['max']} ms",
        ),
        (not r["scheduling_errors"], f"scheduling errors: {r['scheduling_errors']}"),
    ]
    return [message for ok, message in checks if not ok]


def test_pods_from_one_template_created_at_once_all_bind_without_a_failed_bind() -> None:
    """20 nodes x 5 devices, 100 pods of one template at once; claims appear 0.5 s after their pod."""
    w = Workload("e2e-template", nodes=20, devices_per_node=5, pods=100, timeout=20, settle=1)
    r = run_workload(w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=1), claims=ClaimControllerConfig(delay=0.5), progress=0)
    assert r["readback"]["claims"] == 100  # the stand-in made one claim per pod
    missed = missed_targets(r, expected_bound=100)
    assert not missed, "\n".join(missed)


def test_forty_pods_competing_for_ten_devices_bind_exactly_ten() -> None:
    """10 devices (2 nodes x 5), 40 pods: exactly 10 bind, the rest are rejected because every device is allocated."""
    w = Workload("e2e-competition", nodes=2, devices_per_node=5, pods=40, timeout=15, settle=3)
    r = run_workload(w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=2), claims=ClaimControllerConfig(delay=0.2), progress=0)
    missed = missed_targets(r, expected_bound=10)
    assert r["readback"]["devices_allocated"] <= 10
    if r["unbound_not_rejected_with_claims"]:
        missed.append(f"{r['unbound_not_rejected_with_claims']} unbound pods were never rejected once their claim existed")
    wrong = {reason: n for reason, n in r["unbound_last_rejections"].items() if "allocated" not in reason}
    if wrong:
        missed.append(f"unbound pods rejected for another reason than allocated devices: {wrong}")
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize(
    "kind",
    [
        # 3 nodes x 2 GPUs, each GPU with partitions 10, 10, 10, 10, 20, 20, 40 Gi of 40Gi shared counters:
        # exactly 4 partitions per GPU fit, whatever pod gets there first.
        "partitions",
        # 3 nodes x 2 devices of 40Gi that allow multiple allocations; every claim asks 10Gi: 4 shares each.
        "shares",
    ],
)
def test_pods_racing_for_partitions_and_shares_never_over_commit(kind: str) -> None:
    w = Workload(f"e2e-{kind}", nodes=3, devices_per_node=2, pods=40, timeout=30, settle=2, kind=kind)
    r = run_workload(w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=3), claims=ClaimControllerConfig(delay=0.2), progress=0)
    rb = r["readback"]
    missed = missed_targets(r, expected_bound=24)
    if rb["counter_sets_over_committed"] or rb["shared_devices_over_committed"]:
        missed.append(
            f"over-committed: {rb['counter_sets_over_committed']} counter sets, {rb['shared_devices_over_committed']} shared devices"
        )
    if kind == "shares" and rb["shares"] != 24:
        missed.append(f"{rb['shares']} shares allocated, want 24")
    assert not missed, "\n".join(missed)


def test_extended_resource_pods_racing_for_ten_devices_bind_exactly_ten_each_with_a_claim() -> None:
    """40 pods asking for `example.com/device: 1` (a DeviceClass's extendedResourceName), 10 devices, no allocatable on the nodes.

    As in-tree 1.36: each bound pod has an allocated claim made at /bind; none
    is bound without one; no device is allocated twice.
    """
    w = Workload("e2e-extended", nodes=2, devices_per_node=5, pods=40, timeout=20, settle=3, extended_resources=True)
    r = run_workload(w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=3), claims=ClaimControllerConfig(delay=0.2), progress=0)
    rb = r["readback"]
    assert rb["pods_bound"] == 10 and r["pods_bound"] == 10, (rb, r["unbound_last_rejections"])
    assert rb["bound_pods_without_allocated_claim"] == 0, rb
    assert rb["devices_allocated_twice"] == 0 and rb["devices_allocated"] == 10, rb
    assert rb["claims"] == 10, rb  # a failed bind's claim is deleted: only the bound pods' claims remain
    assert not r["scheduling_errors"], r["scheduling_errors"]


def test_binding_conditions_pods_bound_only_after_ready_failed_ones_rescheduled() -> None:
    """12 devices with binding conditions, 10 pods; the fake driver reports `ready` 1 s after allocation, `failed` every 4th time.

    Targets: no pod bound before its devices are ready; every pod bound in
    the end (failed allocations deallocated and retried); bound at most 5 s
    after ready, p50 at most 2 s; no device allocated twice.
    """
    w = Workload("e2e-binding", nodes=4, devices_per_node=3, pods=10, timeout=60, settle=2, binding_delay=1.0, binding_failure_every=4)
    r = run_workload(w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=4), claims=ClaimControllerConfig(delay=0.2), progress=0)
    bc = r["binding_conditions"]
    rb = r["readback"]
    assert bc["pods_bound_before_ready"] == 0, bc
    assert bc["failures_reported"] >= 1, bc
    assert r["pods_bound"] == 10 and rb["pods_bound"] == 10, (r["unbound_last_rejections"], bc)
    assert rb["devices_allocated_twice"] == 0 and rb["bound_pods_without_allocated_claim"] == 0, rb
    assert bc["ready_to_bound_ms"]["max"] <= 5000 and bc["ready_to_bound_ms"]["p50"] <= 2000, bc


def test_devices_ready_at_the_binding_timeout_never_leave_a_pod_bound_to_a_deallocated_claim() -> None:
    """The driver reports ready around the extender's binding timeout (2 s), and claim status writes take 500 ms.

    A deallocation decided just before the ready report is still on its way
    when the scheduler's /bind sees the device ready: the extender must
    either keep the now-ready claim or refuse the bind, never both bind the
    pod and deallocate its claim (before the fix: 7 of these 60 pods ended
    bound with a deallocated claim). Every pod is bound in the end, each with its claim.
    """
    w = Workload(
        "e2e-binding-timeout",
        nodes=10,
        devices_per_node=10,
        pods=60,
        timeout=60,
        settle=2,
        binding_delay=0.45,
        api_faults={"latency_ms": 500, "verbs": ["patch"], "paths": [r"/resourceclaims/[^/]+/status$"]},
    )
    cmd = [*default_extender_cmd(), "--binding-timeout", "2"]
    r = run_workload(w, cmd, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=4), claims=ClaimControllerConfig(delay=0.2), progress=0)
    rb = r["readback"]
    assert rb["bound_pods_without_allocated_claim"] == 0, rb
    assert rb["devices_allocated_twice"] == 0, rb
    assert r["pods_bound"] == 60 and rb["pods_bound"] == 60, (r["unbound_last_rejections"], r["bind_errors"])
    assert r["binding_conditions"]["pods_bound_before_ready"] == 0, r["binding_conditions"]


def test_a_shared_claim_being_deleted_is_never_reserved_for_another_pod() -> None:
    """Four shared claims, each in use by a bound pod, are deleted (their finalizer keeps them, allocated); then a second pod per claim.

    As in-tree 1.36.2: the second pods stay unbound, rejected with
    `resourceclaim "..." is being deleted`, and no claim gets a second reservation.
    """
    asyncio.run(_shared_claims_being_deleted())


async def _shared_claims_being_deleted() -> None:
    from kubesim.scheduler import KubeSchedulerModel
    from kubesim.scheduler.api import Api
    from tests.e2e.cluster import FakeApi, cluster_extender, wait_converged

    api = FakeApi()
    api.create(device_class("gpu", "gpu.example.com"))
    for name in ("sh-a", "sh-b"):
        api.create(node(name, hostname=True))
        api.create(gpu_slice(name, 2, name=f"{name}-slice"))
    ext = cluster_extender(api, "--placement-wait", "0")

    async def until(done: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    try:
        ext.wait_ready()
        for i in range(4):
            api.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"shared-{i}", "namespace": "default"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
                }
            )
            api.create(pod(f"first-{i}", claims={"gpu": f"shared-{i}"}, use_claims=True, scheduler="dra-scheduler", image=PAUSE))
        async with Api(api.url) as client:
            model = KubeSchedulerModel(client, ext.url, SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=5))
            await model.start()
            try:
                await until(lambda: len(model.bound_at) == 4, "the first pods bound")
                for i in range(4):
                    api.delete("ResourceClaim", "default", f"shared-{i}")  # kept by the delete-protection finalizer
                deleting = [api.get("ResourceClaim", "default", f"shared-{i}") for i in range(4)]
                assert all(c and c["metadata"].get("deletionTimestamp") and c["status"].get("allocation") for c in deleting), deleting
                wait_converged(api, ext)
                for i in range(4):
                    api.create(pod(f"second-{i}", claims={"gpu": f"shared-{i}"}, use_claims=True, scheduler="dra-scheduler", image=PAUSE))
                second = {f"default/second-{i}" for i in range(4)}
                await until(lambda: second <= set(model.last_rejection) | set(model.bound_at), "every second pod rejected (or bound)")
                await asyncio.sleep(3)  # what a wrong bind needs to show: retries after backoff and requeues
            finally:
                await model.stop()
        bound = [p["metadata"]["name"] for p in api.list("Pod") if p["spec"].get("nodeName")]
        assert sorted(bound) == [f"first-{i}" for i in range(4)], bound
        for i in range(4):
            claim = api.get("ResourceClaim", "default", f"shared-{i}")
            assert claim is not None
            assert [r["name"] for r in claim["status"]["reservedFor"]] == [f"first-{i}"], claim["status"]
            reason = model.last_rejection[f"default/second-{i}"]
            assert f'resourceclaim "shared-{i}" is being deleted' in reason, reason
    finally:
        ext.stop()
        api.stop()


def test_fit_yardstick_holds_a_bound_pods_device_until_the_claim_watch_shows_its_allocation() -> None:
    """The model's Pod and ResourceClaim watches are separate streams, so a binding can arrive before the
    allocation the extender wrote ahead of it; until the allocation arrives, that pod's device is not free
    (else a correct rejection of a competing pod counts as a rejection of a pod that fits)."""
    from kubesim.scheduler import KubeSchedulerModel
    from kubesim.scheduler.api import Api

    model = KubeSchedulerModel(Api("http://unused"), "http://unused", SchedulerConfig(seed=1))
    pods, claims = model.informers["Pod"].cache, model.informers["ResourceClaim"].cache
    pending = pod("a", claims={"gpu": "claim-a"}, scheduler="dra-scheduler")
    bound = pod("a", claims={"gpu": "claim-a"}, scheduler="dra-scheduler", node_name="n1")
    claim: dict[str, Any] = {"metadata": {"name": "claim-a", "namespace": "default"}, "status": {}}
    claims["default/claim-a"] = claim
    pods["default/a"] = pending
    model.assumed["default/a"] = "n1"
    assert model._devices_not_yet_allocated() == 1, "assumed, not yet bound"
    pods["default/a"] = bound
    model._on_pod("MODIFIED", pending, bound)
    assert "default/a" not in model.assumed
    assert model._devices_not_yet_allocated() == 1, "bound, the allocation not yet seen"
    claim["status"] = {"allocation": {"devices": {"results": [{"driver": "d", "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}
    assert model._devices_not_yet_allocated() == 0, "the allocation seen: counted by the oracle's allocated devices instead"
    assert not model.allocation_unseen


# name, run_workload's reference flags, claims the run leaves, what `extender` says in the result
REFERENCES: list[tuple[str, dict[str, bool], int, str]] = [
    ("the no-op extender: claims made, none allocated by it", {"noop": True}, 30, "noop"),
    ("no DRA at all: no extender, pods without claims, the model binds them", {"nodra": True}, 0, "nodra"),
]


@pytest.mark.parametrize(("flags", "claims", "name"), [pytest.param(f, c, n, id=i) for i, f, c, n in REFERENCES])
def test_the_references_bind_every_pod_the_model_creates(flags: dict[str, bool], claims: int, name: str) -> None:
    """The bench's two references (bench/kube_scheduler_model.py): every pod bound by the model's own Binding or the no-op's."""
    w = Workload("e2e-reference", nodes=3, devices_per_node=5, pods=30, timeout=20, settle=0.5)
    r = run_workload(
        w, cfg=SchedulerConfig(http_timeout=HTTP_TIMEOUT, seed=3), claims=ClaimControllerConfig(delay=0.1), progress=0, **flags
    )
    assert (r["extender"], r["label"]) == (name, f"e2e-reference/{name}")
    assert (r["pods_bound"], r["readback"]["pods_bound"], r["failed_binds"]) == (30, 30, 0)
    assert r["readback"]["claims"] == claims
    assert r["readback"]["devices_allocated"] == 0
