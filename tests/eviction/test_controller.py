"""The eviction controller against the fake API server over real HTTP, on a fake clock (docs/design.md#eviction)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from kubesim.fakeapi import FakeApiError, FakeApiServer, RequestInfo
from kubesim.objects import node
from tests.eviction.harness import CRD, DRIVER, T0, Cluster, claim_and_pod, gpu_slice, rule, seed
from tracker.clock import format_time, parse_time

FOREVER = {"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"}


def seconds(n: int, **kw: str) -> dict:
    return {"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": n, **kw}


def condition(api: FakeApiServer, name: str, group: str = CRD) -> dict | None:
    obj = api.get("devicetaintrules", None, name, group=group)
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == "EvictionInProgress":
            return c
    return None


async def test_a_noexecute_rule_evicts_exactly_the_pods_that_do_not_tolerate_it(cluster: Cluster) -> None:
    api = cluster.api
    pods = {
        "plain": claim_and_pod("plain", 0),
        "other-key": claim_and_pod("other-key", 1, tolerations=[{"key": "example.com/other", "operator": "Exists"}]),
        "no-schedule-only": claim_and_pod("no-schedule-only", 2, tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
        "forever": claim_and_pod("forever", 3, tolerations=[FOREVER]),
        "any-effect": claim_and_pod("any-effect", 4, tolerations=[{"key": "example.com/broken", "operator": "Exists"}]),
        "by-annotation": claim_and_pod("by-annotation", 5, annotation_tolerations=[FOREVER]),
    }
    seed(api, node("node-a"), gpu_slice(8), *(o for pair in pods.values() for o in pair))
    _, _stranger = claim_and_pod("untainted-node", 0, node_name="node-b")  # same device name, other pool: untouched
    seed(api, node("node-b"), gpu_slice(1, node_name="node-b"), *claim_and_pod("untainted-node", 0, node_name="node-b"))
    await cluster.start()
    api.create(rule("gpu-broken"))
    await cluster.run_until(
        lambda: condition(api, "gpu-broken") is not None and condition(api, "gpu-broken")["reason"] == "Completed", within=60
    )

    assert sorted(cluster.recorder.deleted()) == ["no-schedule-only", "other-key", "plain"]
    for name in ("plain", "other-key", "no-schedule-only"):
        assert cluster.recorder.for_pod(name) == ["event:Marking for deletion", "condition:DeletionByDeviceTaintManager", "delete"]
        assert api.get("pods", "default", name) is None
    for name in ("forever", "any-effect", "by-annotation", "untainted-node"):
        assert api.get("pods", "default", name) is not None
        assert cluster.recorder.for_pod(name) == []
    status = condition(api, "gpu-broken")
    assert status["status"] == "False" and status["message"] == "3 pods evicted since starting the controller."
    # The controller stamped timeAdded on our CRD rule, as the API server does for upstream's.
    stamped = api.get("devicetaintrules", None, "gpu-broken", group=CRD)["spec"]["taint"]["timeAdded"]
    assert abs(parse_time(stamped) - T0) < 2
    metrics = cluster.controller.metrics.render().decode()
    assert f'dra_extender_eviction_pod_deletions_total{{result="ok",rule="DeviceTaintRule/{CRD}/gpu-broken"}} 3.0' in metrics


async def test_toleration_seconds_delay_to_the_instant_and_the_smallest_wins(cluster: Cluster) -> None:
    api = cluster.api
    seed(
        api,
        node("node-a"),
        gpu_slice(2),
        *claim_and_pod("waits-30", 0, tolerations=[seconds(300), seconds(30), seconds(120, value="ignored", operator="Equal")]),
        *claim_and_pod("waits-90", 1, tolerations=[seconds(90)]),
    )
    await cluster.start()
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) == 2, within=200)
    at = {w.name: w.at - T0 for w in cluster.recorder.deletions()}
    assert at == {"waits-30": 30.0, "waits-90": 90.0}
    # Pending while they wait: the rule says so, in upstream's words.
    pending = [
        w.body["status"]["conditions"][-1]["message"]
        for w in cluster.recorder.writes
        if w.resource == "devicetaintrules/status" and "conditions" in w.body["status"]
    ]
    assert "2 pods need to be evicted in 1 namespace." in pending


async def test_deleting_the_rule_before_the_deadline_cancels(cluster: Cluster) -> None:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("waits", 0, tolerations=[seconds(60)]))
    await cluster.start()
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.advance(30)
    assert "default/waits" in cluster.controller.plan
    api.delete("devicetaintrules", None, "gpu-broken", group=CRD)
    await cluster.advance(120)
    assert cluster.recorder.deleted() == []
    assert [w.name for w in cluster.recorder.events("Cancelling deletion")] == ["waits"]
    assert api.get("pods", "default", "waits") is not None


@pytest.mark.parametrize("evict_upstream", [True, False], ids=["with-evict-upstream", "without"])
async def test_a_driver_noexecute_taint_is_ours_only_with_evict_upstream(cluster: Cluster, evict_upstream: bool) -> None:
    api = cluster.api
    taint = {"key": "gpu.example.com/xid", "value": "79", "effect": "NoExecute", "timeAdded": format_time(T0)}
    seed(api, node("node-a"), gpu_slice(2, taints={0: [taint]}), *claim_and_pod("on-bad-gpu", 0), *claim_and_pod("on-good-gpu", 1))
    # An upstream rule is the same: left to kube-controller-manager unless --evict-upstream.
    seed(api, rule("upstream", group="resource.k8s.io", selector={"driver": DRIVER, "device": "gpu-1"}, timeAdded=format_time(T0)))
    await cluster.start(evict_upstream=evict_upstream)
    await cluster.advance(30)
    if evict_upstream:
        assert sorted(cluster.recorder.deleted()) == ["on-bad-gpu", "on-good-gpu"]
        assert cluster.recorder.for_pod("on-bad-gpu") == ["event:Marking for deletion", "condition:DeletionByDeviceTaintManager", "delete"]
        assert condition(api, "upstream", group="resource.k8s.io")["reason"] in ("Completed", "PodsPendingEviction")
    else:
        assert cluster.recorder.deleted() == []
        assert cluster.recorder.writes == []  # no Events, no conditions, no rule status
        assert condition(api, "upstream", group="resource.k8s.io") is None


async def test_effect_none_reports_what_noexecute_would_do_and_evicts_nothing(cluster: Cluster) -> None:
    api = cluster.api
    seed(
        api,
        node("node-a"),
        gpu_slice(4),
        *claim_and_pod("a", 0),
        *claim_and_pod("b", 1, namespace="team-b", tolerations=[seconds(600)]),  # would go, later
        *claim_and_pod("c", 2, tolerations=[FOREVER]),  # would stay
    )
    await cluster.start()
    api.create(rule("drain", "None"))
    await cluster.run_until(lambda: condition(api, "drain") is not None, within=30)
    await cluster.advance(120)
    assert condition(api, "drain")["reason"] == "NoEffect"
    assert condition(api, "drain")["message"] == (
        "4 published devices selected. 3 allocated devices selected. 2 pods would be evicted in 2 different namespaces "
        "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update."
    )
    assert cluster.recorder.deleted() == [] and cluster.recorder.events() == []
    statuses = [w for w in cluster.recorder.writes if w.resource == "devicetaintrules/status" and "conditions" in w.body["status"]]
    assert len(statuses) == 1  # set once per spec change

    # The walkthrough's second step: NoExecute. timeAdded restarts at the change, so b gets its full 600 s.
    switched = cluster.clock.now()
    api.patch("devicetaintrules", None, "drain", {"spec": {"taint": {"effect": "NoExecute"}}}, group=CRD)
    await cluster.run_until(lambda: "a" in cluster.recorder.deleted(), within=30)
    time_added = api.get("devicetaintrules", None, "drain", group=CRD)["spec"]["taint"]["timeAdded"]
    assert parse_time(time_added) == int(switched)
    assert condition(api, "drain")["message"] == "1 pod needs to be evicted in 1 namespace. 1 pod evicted since starting the controller."
    await cluster.run_until(lambda: "b" in cluster.recorder.deleted(), within=700)
    assert [w.at - int(switched) for w in cluster.recorder.deletions() if w.name == "b"] == [600.0]
    await cluster.advance(15)
    assert condition(api, "drain")["reason"] == "Completed"
    assert api.get("pods", "default", "c") is not None


async def test_other_effects_are_reported_as_such(cluster: Cluster) -> None:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0))
    await cluster.start()
    api.create(rule("no-new-work", "NoSchedule"))
    await cluster.run_until(lambda: condition(api, "no-new-work") is not None, within=30)
    c = condition(api, "no-new-work")
    assert (c["status"], c["reason"], c["message"]) == ("False", "OtherEffect", "Eviction only happens for the NoExecute effect.")
    assert cluster.recorder.deleted() == []


async def deletion_span(cluster: Cluster, pods: int, **taint: object) -> tuple[list[float], float]:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(pods), *(o for i in range(pods) for o in claim_and_pod(f"p{i:03d}", i)))
    await cluster.start()
    api.create(rule("everything", timeAdded=format_time(T0), **taint))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) == pods, within=60)
    times = sorted(w.at for w in cluster.recorder.deletions())
    return times, times[-1] - times[0]


async def test_default_rate_is_ten_per_second_after_a_burst_of_ten(cluster: Cluster) -> None:
    times, span = await deletion_span(cluster, 100)
    assert times[:10] == [times[0]] * 10  # the burst
    assert 8.99 <= span <= 10.0  # float time: 9 s within a few microseconds
    assert sorted(set(cluster.recorder.deleted())) == [f"p{i:03d}" for i in range(100)]


async def test_evictions_per_second_100_is_ten_times_faster(cluster: Cluster) -> None:
    _, span = await deletion_span(cluster, 100, evictionsPerSecond=100)
    assert 0.89 <= span <= 1.0


def pdb(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}}, **spec},
    }


async def test_evict_mode_respects_a_pod_disruption_budget(cluster: Cluster) -> None:
    api = cluster.api
    seed(
        api,
        node("node-a"),
        gpu_slice(3),
        *(o for i in range(3) for o in claim_and_pod(f"t{i}", i, labels={"app": "trainer"})),
        pdb("trainers", minAvailable=2),
    )
    await cluster.start(mode="evict")
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.advance(60)
    evictions = [w for w in cluster.recorder.writes if w.resource == "pods/eviction"]
    gone = [f"t{i}" for i in range(3) if api.get("pods", "default", f"t{i}") is None]
    assert len(gone) == 1  # the budget allows one disruption; the rest are refused (429) and retried with backoff
    assert 4 <= len(evictions) <= 20, len(evictions)
    assert all(w.verb == "create" for w in evictions) and cluster.recorder.deleted() == []
    assert cluster.recorder.for_pod(gone[0])[0] == "event:Marking for eviction"
    status = condition(api, "gpu-broken")
    assert status["reason"] == "PodsPendingEviction" and status["message"].startswith(
        "2 pods need to be evicted in 1 namespace. 1 pod evicted since starting the controller."
    )
    assert "evictions refused by a PodDisruptionBudget (retrying)." in status["message"]
    refused = [w for w in cluster.recorder.events() if w.body["message"].startswith("Eviction refused by a PodDisruptionBudget")]
    assert refused and all(w.body["type"] == "Warning" and w.name != gone[0] for w in refused), "the refusal shows on the pod"
    # The budget goes away: the retries get through.
    api.delete("poddisruptionbudgets", "default", "trainers")
    await cluster.run_until(lambda: all(api.get("pods", "default", f"t{i}") is None for i in range(3)), within=120)
    assert all(cluster.recorder.for_pod(f"t{i}").count("event:Marking for eviction") == 1 for i in range(3))


async def test_restarting_mid_eviction_neither_loses_nor_duplicates_work(cluster: Cluster) -> None:
    api = cluster.api
    pods = 30
    seed(api, node("node-a"), gpu_slice(pods), *(o for i in range(pods) for o in claim_and_pod(f"p{i:03d}", i)))
    await cluster.start()
    api.create(rule("everything", timeAdded=format_time(T0)))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) >= 12, within=60)
    # The next deletion fails after its Event and condition were written; the process dies then.
    failed: list[str] = []

    def fail_one_delete(info):
        if info.verb == "delete" and info.resource == "pods" and not failed:
            failed.append(info.name)
            return FakeApiError(500, "injected: the process dies before the delete lands")
        return None

    api.add_reactor(fail_one_delete)  # after the recorder: the attempt is recorded, then fails
    await cluster.run_until(lambda: bool(failed), within=60)
    await cluster.stop()
    assert api.get("pods", "default", failed[0]) is not None
    assert cluster.recorder.for_pod(failed[0]) == ["event:Marking for deletion", "condition:DeletionByDeviceTaintManager", "delete"]

    await cluster.start()  # a new process: new tracker, new controller, same cluster and clock
    await cluster.run_until(lambda: all(api.get("pods", "default", f"p{i:03d}") is None for i in range(pods)), within=60)
    for i in range(pods):
        writes = cluster.recorder.for_pod(f"p{i:03d}")
        assert writes.count("event:Marking for deletion") == 1 and writes.count("condition:DeletionByDeviceTaintManager") == 1, writes
    deleted = [n for n in cluster.recorder.deleted()]
    assert sorted(set(deleted)) == [f"p{i:03d}" for i in range(pods)]
    assert len(deleted) == pods + 1  # every pod once, plus the one attempt that failed


async def test_a_follower_evicts_nothing(cluster: Cluster) -> None:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(2), *claim_and_pod("a", 0), *claim_and_pod("b", 1))
    cluster.leading = False
    await cluster.start()
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.advance(60)
    assert cluster.recorder.writes == []  # no Event, condition, deletion, timeAdded or rule status
    assert api.get("pods", "default", "a") is not None
    cluster.leading = True  # it takes over: the pods still there are evicted
    await cluster.run_until(lambda: sorted(cluster.recorder.deleted()) == ["a", "b"], within=10)


async def test_an_upstream_rule_also_handled_by_the_in_tree_controller_is_warned_about_once(cluster: Cluster) -> None:
    api = cluster.api
    upstream = rule("shared", group="resource.k8s.io", timeAdded=format_time(T0))
    upstream["metadata"]["managedFields"] = [
        {
            "manager": "device-taint-eviction-controller",
            "operation": "Apply",
            "subresource": "status",
            "apiVersion": "resource.k8s.io/v1beta2",
        }
    ]
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0), upstream)
    await cluster.start(evict_upstream=True)
    await cluster.advance(30)
    warnings = [w for w in cluster.recorder.events() if w.body.get("reason") == "TwoEvictionControllers"]
    assert [(w.name, w.body["type"], w.body["involvedObject"]["kind"]) for w in warnings] == [("shared", "Warning", "DeviceTaintRule")]
    assert cluster.recorder.deleted() == ["a"]  # it still acts: the operator asked for --evict-upstream


async def test_a_noexecute_taint_on_a_shared_device_evicts_every_pod_sharing_it(cluster: Cluster) -> None:
    """Consumable capacity: each pod's claim holds a share (shareID) of gpu-0; the taint reaches all of them."""
    api = cluster.api
    shared = gpu_slice(2)
    shared["spec"]["devices"][0].update({"allowMultipleAllocations": True, "capacity": {"memory": {"value": "40Gi"}}})
    pairs = []
    for i, name in enumerate(("share-a", "share-b", "share-tolerates")):
        claim, pod = claim_and_pod(name, 0, tolerations=[FOREVER] if name == "share-tolerates" else None)
        result = claim["status"]["allocation"]["devices"]["results"][0]
        result["shareID"] = f"00000000-0000-4000-8000-00000000000{i}"
        result["consumedCapacity"] = {"memory": "10Gi"}
        pairs += [claim, pod]
    seed(api, node("node-a"), shared, *pairs, *claim_and_pod("whole-gpu-1", 1))
    await cluster.start()
    api.create(rule("gpu-0-broken", selector={"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}))
    await cluster.run_until(
        lambda: condition(api, "gpu-0-broken") is not None and condition(api, "gpu-0-broken")["reason"] == "Completed", within=60
    )
    assert sorted(cluster.recorder.deleted()) == ["share-a", "share-b"]
    assert api.get("pods", "default", "share-tolerates") is not None
    assert api.get("pods", "default", "whole-gpu-1") is not None


@dataclass(frozen=True)
class UnknownEffectCase:
    name: str
    stamped: bool  # the rule comes with spec.taint.timeAdded (else the controller writes it: a new generation)
    edits: tuple[dict[str, Any], ...]  # spec patches applied one after the other once the first warning is out
    warnings: tuple[str, ...]  # the effects warned about, in order


UNKNOWN_EFFECT_CASES = [
    UnknownEffectCase("stamped-by-its-author", True, (), ("Evict-Everything",)),
    UnknownEffectCase("stamped-by-the-controller-warned-once", False, (), ("Evict-Everything",)),
    UnknownEffectCase(
        "selector-edited-same-effect-warned-once",
        True,
        ({"deviceSelector": {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}},),
        ("Evict-Everything",),
    ),
    UnknownEffectCase(
        "another-unknown-effect-warned-again", True, ({"taint": {"effect": "Evict-All"}},), ("Evict-Everything", "Evict-All")
    ),
    UnknownEffectCase(
        "fixed-then-broken-again-warned-again",
        True,
        ({"taint": {"effect": "NoSchedule"}}, {"taint": {"effect": "Evict-Everything"}}),
        ("Evict-Everything", "Evict-Everything"),
    ),
]


@pytest.mark.parametrize("case", UNKNOWN_EFFECT_CASES, ids=lambda c: c.name)
async def test_unknown_effect_is_a_warning_event_on_the_rule_once_per_effect_written(cluster: Cluster, case: UnknownEffectCase) -> None:
    """Unknown effects act like None (as upstream's), but a typo must not be silent: one Warning
    Event on the rule naming the field, once per effect as written. A write that leaves the effect
    alone (the controller's own timeAdded stamp, a selector edit) bumps the generation but is not
    news about the effect."""
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0))
    await cluster.start()
    api.create(rule("typo", "Evict-Everything", **({"timeAdded": format_time(T0)} if case.stamped else {})))
    await cluster.advance(30)
    for edit in case.edits:
        api.patch("devicetaintrules", None, "typo", {"spec": edit}, group=CRD)
        await cluster.advance(30)
    warned = [w for w in cluster.recorder.events() if w.body.get("reason") == "UnknownTaintEffect"]
    assert tuple(w.body["message"].split("'")[1] for w in warned) == case.warnings, warned
    assert warned[0].name == "typo" and warned[0].body["type"] == "Warning"
    assert warned[0].body["message"].startswith("spec.taint.effect: unknown effect 'Evict-Everything': nothing is evicted or blocked")
    assert cluster.recorder.deleted() == [], "acts like None"
    if not case.edits:
        assert condition(api, "typo")["reason"] == "OtherEffect"
        assert "unknown effect 'Evict-Everything': nothing is evicted or blocked" in condition(api, "typo")["message"]


async def test_a_leader_that_loses_its_lease_mid_eviction_writes_no_more_of_it(cluster: Cluster) -> None:
    """The Lease moves away between the pod's Event and its deletion: the deletion is the new leader's."""
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0))
    lost: list[bool] = []

    def lose_the_lease_at_the_first_event(info: RequestInfo) -> None:
        if info.method == "POST" and info.resource == "events" and not lost:
            lost.append(True)
            cluster.leading = False

    api.add_reactor(lose_the_lease_at_the_first_event)
    await cluster.start()
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.advance(30)
    assert lost, "the eviction began"
    assert cluster.recorder.for_pod("a") == ["event:Marking for deletion"], "no condition and no deletion after the Lease moved"
    assert api.get("pods", "default", "a") is not None
    cluster.leading = True  # leading again: it finishes the eviction
    await cluster.run_until(lambda: cluster.recorder.deleted() == ["a"], within=10)
