"""Device health end to end: alerts through the receiver, rules through the API, evictions by the eviction controller (fake clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from controllers.health.policy import GROUP
from controllers.health.rules import PIN, POLICY_LABEL
from kubesim.objects import node
from tests.eviction.harness import CRD, T0, claim_and_pod, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule

pytestmark = pytest.mark.slow  # in process, but ~25 s of ladders on the fake clock: the full tier


def health_rules(cluster: HealthCluster) -> dict[str, dict[str, Any]]:
    """device name -> our rule object."""
    return {
        r["spec"]["deviceSelector"]["pool"] + "/" + r["spec"]["deviceSelector"]["device"]: r
        for r in cluster.api.list("devicetaintrules", group=CRD, label_selector=POLICY_LABEL)
    }


def effects(cluster: HealthCluster) -> dict[str, str]:
    return {k: r["spec"]["taint"]["effect"] for k, r in health_rules(cluster).items()}


async def eight_gpu_node(cluster: HealthCluster, *extra: dict[str, Any]) -> None:
    pods = [o for i in range(8) for o in claim_and_pod(f"job-{i}", i)]
    seed(cluster.api, node("node-a"), uuid_slice(8), *pods, *extra)


async def test_firing_taints_at_once_escalates_after_5m_and_evicts_only_that_gpus_pods(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    status, answer = await cluster.post(delivery(alert("GPU-node-a-3")))
    assert (status, answer) == (200, {"alerts": {"firing": 1}})
    assert effects(cluster) == {"node-a/gpu-3": "NoSchedule"}
    await cluster.advance(299)
    assert effects(cluster) == {"node-a/gpu-3": "NoSchedule"}
    assert cluster.recorder.deleted() == []
    await cluster.advance(2)
    assert effects(cluster) == {"node-a/gpu-3": "NoExecute"}
    await cluster.run_until(lambda: cluster.recorder.deleted() == ["job-3"], within=60)
    await cluster.advance(60)
    assert cluster.recorder.deleted() == ["job-3"]  # the seven others keep running
    escalated = [w for w in cluster.recorder.writes if w.resource == "devicetaintrules" and w.verb == "patch" and "effect" in str(w.body)]
    assert [w.at - T0 for w in escalated if w.body["spec"]["taint"]["effect"] == "NoExecute"] == [300.0]
    reasons = [w.body["reason"] for w in cluster.recorder.events() if w.body["involvedObject"]["kind"] == "DeviceHealthPolicy"]
    assert reasons == ["DeviceTainted", "DeviceEscalated"]
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    status_obj = obj["status"]
    assert status_obj["rules"][0]["devices"] == {"None": 0, "NoSchedule": 0, "NoExecute": 1}


async def test_resolved_clears_after_the_hold_down(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-1")))
    await cluster.advance(60)
    await cluster.post(delivery(alert("GPU-node-a-1", status="resolved")))
    await cluster.advance(15 * 60 - 1)
    assert effects(cluster) == {"node-a/gpu-1": "NoSchedule"}  # resolved: no escalation during the hold-down either
    await cluster.advance(2)
    assert effects(cluster) == {}
    assert cluster.recorder.deleted() == []


async def test_flapping_within_the_hold_down_resumes_where_it_was(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    fired = delivery(alert("GPU-node-a-2"))
    resolved = delivery(alert("GPU-node-a-2", status="resolved"))
    await cluster.post(fired)
    await cluster.advance(200)
    await cluster.post(resolved)
    await cluster.advance(300)  # within the 15 m hold-down, and no escalation while resolved
    assert effects(cluster) == {"node-a/gpu-2": "NoSchedule"}
    await cluster.post(fired)  # fires again: 500 s into the episode, past the 5 m rung
    assert effects(cluster) == {"node-a/gpu-2": "NoExecute"}
    await cluster.run_until(lambda: cluster.recorder.deleted() == ["job-2"], within=60)
    reasons = [w.body["reason"] for w in cluster.recorder.events() if w.body["involvedObject"]["kind"] == "DeviceHealthPolicy"]
    assert reasons.count("DeviceTainted") == 1 and "DeviceCleared" not in reasons


async def test_three_occurrences_within_the_hour_escalate_before_5_minutes(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    for i in range(3):
        await cluster.post(delivery(alert("GPU-node-a-4", fingerprint=f"fp-{i}")))
        await cluster.post(delivery(alert("GPU-node-a-4", fingerprint=f"fp-{i}", status="resolved")))
        await cluster.advance(10)
    assert effects(cluster) == {"node-a/gpu-4": "NoExecute"}


async def test_the_guard_holds_the_third_device_of_a_two_device_guard_at_noschedule(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy("gpu-health", xid_rule(guard={"maxNoExecute": 2})))
    await cluster.start()
    await cluster.post(delivery(*(alert(f"GPU-node-a-{i}") for i in (5, 6, 7))))
    await cluster.advance(301)
    assert effects(cluster) == {"node-a/gpu-5": "NoExecute", "node-a/gpu-6": "NoExecute", "node-a/gpu-7": "NoSchedule"}
    await cluster.run_until(lambda: sorted(cluster.recorder.deleted()) == ["job-5", "job-6"], within=60)
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    guard = next(c for c in obj["status"]["conditions"] if c["type"] == "GuardTripped")
    assert guard["status"] == "True" and "gpu.example.com/node-a/gpu-7" in guard["message"]
    assert obj["status"]["rules"][0]["waiting"] == ["gpu.example.com/node-a/gpu-7"]
    trips = [w.body["message"] for w in cluster.recorder.events() if w.body["reason"] == "GuardTripped"]
    assert len(trips) == 1 and "gpu-7" in trips[0]
    assert 'dra_extender_health_guard_waiting_devices{policy="gpu-health",rule="xid-79"} 1.0' in cluster.metrics.render().decode()
    # One of the two resolves and clears: the waiting device takes its place.
    await cluster.post(delivery(alert("GPU-node-a-5", status="resolved")))
    await cluster.advance(15 * 60 + 1)
    assert effects(cluster) == {"node-a/gpu-6": "NoExecute", "node-a/gpu-7": "NoExecute"}


async def test_a_restart_mid_ladder_resumes_at_the_same_step_and_never_escalates_twice(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-0")))
    await cluster.advance(120)
    await cluster.stop()
    cluster.clock.advance(60)  # down for a minute
    await cluster.start()
    assert effects(cluster) == {"node-a/gpu-0": "NoSchedule"}
    await cluster.advance(119)
    assert effects(cluster) == {"node-a/gpu-0": "NoSchedule"}
    await cluster.advance(2)  # 5 minutes after the first firing, not after the restart
    assert effects(cluster) == {"node-a/gpu-0": "NoExecute"}
    await cluster.stop()
    await cluster.start()
    await cluster.advance(30)
    reasons = [w.body["reason"] for w in cluster.recorder.events() if w.body["involvedObject"]["kind"] == "DeviceHealthPolicy"]
    assert reasons == ["DeviceTainted", "DeviceEscalated"]
    assert await cluster.post(delivery(alert("GPU-node-a-0"))) == (200, {"alerts": {"repeat": 1}})


async def test_a_leader_failover_reads_the_ladder_back(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-1")))
    await cluster.advance(100)
    cluster.leading = False  # the lease moves away: this replica forgets, and writes nothing
    await cluster.advance(400)
    assert effects(cluster) == {"node-a/gpu-1": "NoSchedule"}
    assert cluster.health is not None and cluster.health.states == {}
    writes = len(cluster.recorder.writes)
    cluster.leading = True  # and back (a new leader is this same code over the same API)
    await cluster.advance(2)
    assert effects(cluster) == {"node-a/gpu-1": "NoExecute"}
    assert len([w for w in cluster.recorder.writes[writes:] if w.resource == "devicetaintrules" and w.verb == "create"]) == 0


async def test_an_alert_that_names_no_device_is_counted_and_reported(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    status, answer = await cluster.post(delivery(alert("GPU-unknown"), alert("GPU-node-a-0", node="node-zz")))
    assert (status, answer) == (200, {"alerts": {"unmatched": 2}})
    assert effects(cluster) == {}
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    rule_status = obj["status"]["rules"][0]
    assert rule_status["unmatchedAlerts"] == 2
    assert rule_status["lastUnmatched"]["reason"] == "no gpu.example.com device with gpu.example.com/uuid=GPU-node-a-0 on node 'node-zz'"
    assert 'dra_extender_health_signals_total{outcome="unmatched",policy="gpu-health"} 2.0' in cluster.metrics.render().decode()


async def test_a_driver_none_taint_is_escalated_by_policy(cluster: HealthCluster) -> None:
    taint_rule = {
        "name": "xid-taint",
        "signal": {"driverTaint": {"key": "gpu.example.com/xid", "values": ["79", "48"], "effect": "None"}},
        "devices": {"driver": "gpu.example.com"},
        "taint": {"key": "health.example.com/xid"},
        "steps": [{"effect": "NoSchedule"}, {"effect": "NoExecute", "after": "5m"}],
        "clearAfter": "10m",
    }
    slice_ = uuid_slice(8)
    slice_["spec"]["devices"][6]["taints"] = [{"key": "gpu.example.com/xid", "value": "79", "effect": "None"}]
    slice_["spec"]["devices"][5]["taints"] = [{"key": "gpu.example.com/xid", "value": "13", "effect": "None"}]  # not in the set
    pods = [o for i in range(8) for o in claim_and_pod(f"job-{i}", i)]
    seed(cluster.api, node("node-a"), slice_, *pods, policy("gpu-health", taint_rule))
    await cluster.start()
    assert effects(cluster) == {"node-a/gpu-6": "NoSchedule"}
    await cluster.advance(301)
    assert effects(cluster) == {"node-a/gpu-6": "NoExecute"}
    await cluster.run_until(lambda: cluster.recorder.deleted() == ["job-6"], within=60)
    # The driver takes its taint away: cleared after the hold-down.
    stored = cluster.api.get("resourceslices", None, "node-a-gpus")
    assert stored is not None
    del stored["spec"]["devices"][6]["taints"]
    cluster.api.update(stored)
    await cluster.advance(599)
    assert effects(cluster) == {"node-a/gpu-6": "NoExecute"}
    await cluster.advance(2)
    assert effects(cluster) == {}


async def test_dry_run_writes_effect_none_and_evicts_nothing(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy(mode="DryRun"))
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-3")))
    await cluster.advance(400)
    assert effects(cluster) == {"node-a/gpu-3": "None"}
    assert cluster.recorder.deleted() == []
    (name,) = [r["metadata"]["name"] for r in health_rules(cluster).values()]

    def eviction_condition() -> dict[str, Any] | None:
        """The rule's EvictionInProgress condition (its Ready condition is written beside it)."""
        stored = cluster.api.get("devicetaintrules", None, name, group=CRD) or {}
        conditions = (stored.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "EvictionInProgress"), None)

    await cluster.run_until(lambda: eviction_condition() is not None, within=30)
    cond = eviction_condition()
    assert cond is not None
    assert cond["reason"] == "NoEffect" and "1 pod" in cond["message"]
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    assert obj["status"]["rules"][0]["devices"]["NoExecute"] == 1  # the ladder's rung, reported; the rule's effect is None


async def test_a_pinned_device_is_not_cleared_and_deleting_the_policy_removes_its_rules(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-3")))
    (name,) = [r["metadata"]["name"] for r in health_rules(cluster).values()]
    cluster.api.patch("devicetaintrules", None, name, {"metadata": {"annotations": {PIN: "true"}}}, group=CRD)
    await cluster.post(delivery(alert("GPU-node-a-3", status="resolved")))
    await cluster.advance(3600)
    assert effects(cluster) == {"node-a/gpu-3": "NoSchedule"}
    cluster.api.delete("devicehealthpolicies", None, "gpu-health", group=GROUP)
    await cluster.advance(2)
    assert effects(cluster) == {}


async def test_a_node_condition_marks_the_nodes_selected_devices(cluster: HealthCluster) -> None:
    condition_rule = {
        "name": "gpu-fallen-off",
        "signal": {"nodeCondition": {"type": "GpuFallenOffBus"}},
        "devices": {"driver": "gpu.example.com", "selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].index < 2"}}]},
        "taint": {"key": "health.example.com/node-problem"},
        "steps": [{"effect": "NoSchedule"}],
        "clearAfter": "1m",
    }
    bad = node("node-a")
    bad["status"] = {"conditions": [{"type": "GpuFallenOffBus", "status": "True", "reason": "NPD"}]}
    seed(cluster.api, bad, uuid_slice(4), node("node-b"), uuid_slice(4, node_name="node-b"), policy("gpu-health", condition_rule))
    await cluster.start()
    assert effects(cluster) == {"node-a/gpu-0": "NoSchedule", "node-a/gpu-1": "NoSchedule"}
    stored = cluster.api.get("nodes", None, "node-a")
    assert stored is not None
    stored["status"]["conditions"][0]["status"] = "False"
    cluster.api.update_status(stored)
    await cluster.advance(59)
    assert len(effects(cluster)) == 2
    await cluster.advance(2)
    assert effects(cluster) == {}


async def test_a_faulty_policy_gets_a_warning_event_and_ready_false_and_takes_no_alerts(cluster: HealthCluster) -> None:
    faulty = policy("gpu-health", xid_rule(steps=[{"effect": "NoSchedule"}, {"effect": "NoExecute"}]))
    await eight_gpu_node(cluster, faulty)
    await cluster.start()
    [event] = [w.body for w in cluster.recorder.events() if w.body["reason"] == "InvalidPolicy"]
    assert event["type"] == "Warning" and event["message"] == "spec.rules[0].steps[1]: a later step needs `after` or `occurrences`"
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    [ready] = obj["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "Invalid")
    assert await cluster.post(delivery(alert("GPU-node-a-0"))) == (200, {"alerts": {"no_rule": 1}})
    assert effects(cluster) == {}


async def test_the_worked_example_runs_against_the_demo_cluster(cluster: HealthCluster) -> None:
    """examples/health/ (docs/health.md): the policy over the demo cluster, the alert payloads as curl posts them."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    cluster.api.load(examples / "demo-cluster", examples / "health" / "policy.yaml")
    token = (examples / "health" / "token").read_text().strip()
    cluster.token_file.write_text(token)
    await cluster.start()
    firing = orjson.loads((examples / "health" / "alert-firing.json").read_bytes())
    assert await cluster.post(firing, token=token) == (200, {"alerts": {"firing": 1}})
    assert effects(cluster)["node-a/gpu-0"] == "NoSchedule"
    assert effects(cluster)["node-a/gpu-1"] == "None"  # the driver's unmonitored taint, NoSchedule after 1 m
    await cluster.advance(61)
    assert effects(cluster) == {"node-a/gpu-0": "NoSchedule", "node-a/gpu-1": "NoSchedule"}
    resolved = orjson.loads((examples / "health" / "alert-resolved.json").read_bytes())
    assert await cluster.post(resolved, token=token) == (200, {"alerts": {"resolved": 1}})
    await cluster.advance(15 * 60 + 1)
    assert effects(cluster) == {"node-a/gpu-1": "NoSchedule"}


async def test_toleration_seconds_count_from_when_noexecute_was_applied(cluster: HealthCluster) -> None:
    waits = [{"key": "health.example.com/xid", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]
    seed(cluster.api, node("node-a"), uuid_slice(2), *claim_and_pod("tolerates-a-minute", 0, tolerations=waits), policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-0")))
    await cluster.run_until(lambda: cluster.recorder.deleted() == ["tolerates-a-minute"], within=600)
    [deletion] = cluster.recorder.deletions()
    assert deletion.at - T0 == 360.0  # NoExecute at 5 m, plus the toleration's 60 s (not 60 s after NoSchedule)


async def test_a_failover_to_another_replica_resumes_the_ladder_without_escalating_twice(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    standby = await cluster.start_standby()
    assert await cluster.post(delivery(alert("GPU-node-a-1")), to=standby) == (503, {"error": "not the leader: retry"})
    assert await cluster.post(delivery(alert("GPU-node-a-1"))) == (200, {"alerts": {"firing": 1}})
    await cluster.advance(100)
    cluster.leading = False  # the lease moves to the other replica
    assert await cluster.post(delivery(alert("GPU-node-a-1"))) == (503, {"error": "not the leader: retry"})
    assert await cluster.post(delivery(alert("GPU-node-a-1")), to=standby) == (200, {"alerts": {"repeat": 1}})
    await cluster.advance(199)
    assert effects(cluster) == {"node-a/gpu-1": "NoSchedule"}
    await cluster.advance(2)
    assert effects(cluster) == {"node-a/gpu-1": "NoExecute"}  # 5 minutes after the first firing, on the old leader
    # (This harness's eviction controller runs on the first replica, which no longer leads: no eviction here.)
    creates = [w for w in cluster.recorder.writes if w.resource == "devicetaintrules" and w.verb == "create"]
    assert len(creates) == 1
    reasons = [w.body["reason"] for w in cluster.recorder.events() if w.body["involvedObject"]["kind"] == "DeviceHealthPolicy"]
    assert reasons == ["DeviceTainted", "DeviceEscalated"]
    await cluster.post(delivery(alert("GPU-node-a-1", status="resolved")), to=standby)
    await cluster.advance(15 * 60 + 1)
    assert effects(cluster) == {}


async def test_a_policy_edited_to_fewer_steps_holds_its_devices_at_the_strongest_step_left(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-5")))
    await cluster.advance(301)
    assert effects(cluster) == {"node-a/gpu-5": "NoExecute"}
    cluster.api.patch(
        "devicehealthpolicies", None, "gpu-health", {"spec": {"rules": [xid_rule(steps=[{"effect": "NoSchedule"}])]}}, group=GROUP
    )
    await cluster.advance(2)
    assert effects(cluster) == {"node-a/gpu-5": "NoSchedule"}


async def test_a_policy_edited_to_another_taint_key_moves_its_rules_to_it(cluster: HealthCluster) -> None:
    await eight_gpu_node(cluster, policy())
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-5")))
    rule = xid_rule(taint={"key": "health.example.com/gpu-lost"})
    cluster.api.patch("devicehealthpolicies", None, "gpu-health", {"spec": {"rules": [rule]}}, group=GROUP)
    await cluster.advance(2)
    [obj] = health_rules(cluster).values()
    assert obj["spec"]["taint"] == {
        "key": "health.example.com/gpu-lost",
        "effect": "NoSchedule",
        "timeAdded": obj["spec"]["taint"]["timeAdded"],
    }
