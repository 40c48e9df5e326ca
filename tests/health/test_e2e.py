"""Device health end to end: alerts through the receiver, rules through the API, evictions by the eviction controller (fake clock)."""

from __future__ import annotations

from typing import Any

from extender.health.policy import GROUP
from extender.health.rules import POLICY_LABEL
from tests.eviction.harness import CRD, T0, claim_and_pod, node, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice


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
    seed(cluster.api, node(), uuid_slice(8), *pods, *extra)


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
