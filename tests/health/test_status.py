"""What a DeviceHealthPolicy's status says across restarts and hand-overs (fake clock, fake API server)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from extender.health.policy import GROUP
from kubesim.objects import node
from tests.eviction.harness import seed
from tests.health.harness import HealthCluster, policy, uuid_slice


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
