"""What a DeviceHealthPolicy's status says across restarts and hand-overs (fake clock, fake API server)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from controllers.health.policy import GROUP
from kubectl_dra.cli import build_parser, run
from kubesim import objects
from kubesim.objects import node
from tests.eviction.harness import DRIVER, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule


def conditions(cluster: HealthCluster, name: str = "gpu-health") -> dict[str, dict[str, Any]]:
    obj = cluster.api.get("devicehealthpolicies", None, name, group=GROUP)
    assert obj is not None
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def kill_and_restart(cluster: HealthCluster) -> None:
    await cluster.stop()  # kill -9: nothing is written on the way out
    cluster.clock.advance(600)
    await cluster.start()


async def hand_over_to_another_replica(cluster: HealthCluster) -> None:
    await cluster.start_standby()  # its own process memory: it knows only what the API server has
    cluster.clock.advance(600)
    cluster.leading = False
    await cluster.advance(2)


async def lose_and_regain_the_lease(cluster: HealthCluster) -> None:
    cluster.leading = False
    await cluster.advance(600)
    cluster.leading = True
    await cluster.advance(2)


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    happen: Callable[[HealthCluster], Awaitable[None]]


CHANGES = [
    Change("kill -9 and restart", kill_and_restart),
    Change("failover to another replica", hand_over_to_another_replica),
    Change("the lease lost and won back", lose_and_regain_the_lease),
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.name)
async def test_a_condition_keeps_its_transition_time_when_its_status_does_not_change(cluster: HealthCluster, change: Change) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    before = conditions(cluster)
    assert before["Ready"]["status"] == "True" and before["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    await change.happen(cluster)
    await cluster.advance(5)
    after = conditions(cluster)
    assert {t: (c["status"], c["lastTransitionTime"]) for t, c in after.items()} == {
        t: (c["status"], c["lastTransitionTime"]) for t, c in before.items()
    }


async def dra(cluster: HealthCluster, *argv: str) -> tuple[int, str]:
    lines: list[str] = []
    code = await run(build_parser().parse_args(["--kubeconfig", str(cluster.kubeconfig), *argv]), lines.append)
    return code, "\n".join(lines)


@dataclass(frozen=True, slots=True)
class BadSelector:
    name: str
    expression: str
    error: str  # in the Event's message, besides the expression
    node_b_has_index: bool = True


BAD_SELECTORS = [
    BadSelector(
        "fails on every device (.uid for .uuid)", "device.attributes['gpu.example.com'].uid == 'GPU-node-a-0'", "fails at run time"
    ),
    BadSelector(
        "fails on the devices that lack the attribute", "device.attributes['gpu.example.com'].index >= 0", "fails at run time", False
    ),
    BadSelector("does not compile", "device.attributes['gpu.example.com'].index >=", "spec.rules[0].devices.selectors[0].cel.expression"),
]


@pytest.mark.parametrize("bad", BAD_SELECTORS, ids=lambda b: b.name)
async def test_a_selector_that_fails_makes_the_policy_invalid_and_kubectl_says_so(cluster: HealthCluster, bad: BadSelector) -> None:
    rule = xid_rule(devices={"driver": DRIVER, "selectors": [{"cel": {"expression": bad.expression}}]})
    node_b = objects.uuid_slice("node-b", DRIVER, 4, index=bad.node_b_has_index)
    seed(cluster.api, node("node-a"), node("node-b"), uuid_slice(4), node_b, policy("gpu-health", rule))
    await cluster.start()
    ready = conditions(cluster)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "Invalid")
    [event] = [w.body for w in cluster.recorder.events() if w.body["reason"] == "InvalidPolicy"]
    assert event["type"] == "Warning" and bad.expression in event["message"] and bad.error in event["message"], event
    assert 'dra_extender_health_invalid_policy{policy="gpu-health"} 1.0' in cluster.metrics.render().decode()
    assert await cluster.post(delivery(alert("GPU-node-a-0"))) == (200, {"alerts": {"no_rule": 1}})
    code, text = await dra(cluster, "health", "--policy", "gpu-health")
    assert code == 1 and "DeviceHealthPolicy 'gpu-health' is invalid: spec.rules[0].devices.selectors[0]" in text, text
    code, text = await dra(cluster, "health")
    assert code == 0 and text.splitlines()[-1].split()[:3] == ["gpu-health", "INVALID", "-"], text


def node_with(name: str, condition: str) -> dict[str, Any]:
    n = node(name)
    n["status"] = {"conditions": [{"type": condition, "status": "True", "reason": "NPD"}]}
    return n


@dataclass(frozen=True, slots=True)
class GuardRow:
    name: str
    guard: dict[str, Any] | None  # None: the policy sets none
    held: int  # devices at the NoExecute rung 10 minutes after 6 nodes failed (24 GPUs)
    guarded: tuple[str, str]  # the Guarded condition's status and reason
    shown: str  # kubectl dra health's GUARD column


GUARD_ROWS = [
    GuardRow("no guard: the default", None, 2, ("True", "DefaultGuard"), "default: 10% of the rule's devices (at least 1), 1 per node"),
    GuardRow("guard: {} is a deliberate no limit", {}, 24, ("False", "GuardUnlimited"), "unlimited: no limit at NoExecute"),
    GuardRow("a guard of its own", {"maxNoExecute": 3}, 3, ("True", "PolicyGuard"), "policy: at most 3 at NoExecute"),
]


@pytest.mark.parametrize("row", GUARD_ROWS, ids=lambda r: r.name)
async def test_a_policy_that_can_reach_noexecute_always_has_a_guard(cluster: HealthCluster, row: GuardRow) -> None:
    rule: dict[str, Any] = {
        "name": "gpu-fallen-off",
        "signal": {"nodeCondition": {"type": "GpuFallenOffBus"}},
        "devices": {"driver": DRIVER},
        "taint": {"key": "health.example.com/node-problem"},
        "steps": [{"effect": "NoSchedule"}, {"effect": "NoExecute", "after": "1m"}],
    }
    if row.guard is not None:
        rule["guard"] = row.guard
    nodes = [f"node-{i}" for i in range(6)]
    seed(
        cluster.api,
        *(node_with(n, "GpuFallenOffBus") for n in nodes),
        *(uuid_slice(4, node_name=n) for n in nodes),
        policy("gpu-health", rule, mode="DryRun"),  # as a new user tries it first
    )
    await cluster.start()
    await cluster.advance(600)
    obj = cluster.api.get("devicehealthpolicies", None, "gpu-health", group=GROUP)
    assert obj is not None
    [status] = obj["status"]["rules"]
    assert status["devices"]["NoExecute"] == row.held
    assert status["guard"]["origin"] == row.shown.split(":")[0]
    guarded = conditions(cluster)["Guarded"]
    assert (guarded["status"], guarded["reason"]) == row.guarded
    warned = [w.body for w in cluster.recorder.events() if w.body["reason"] == "GuardUnlimited"]
    assert len(warned) == (1 if row.guarded[0] == "False" else 0) and all(w["type"] == "Warning" for w in warned)
    code, text = await dra(cluster, "health", "--policy", "gpu-health")
    assert code == 0 and row.shown in text, text
