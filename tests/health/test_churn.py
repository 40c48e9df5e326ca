"""Alerts that fire and resolve on ever other devices leave nothing behind (bounded memory under rule churn).

Each firing alert makes the health controller create a DeviceTaintRule for
its device, and the hold-down after it resolves deletes the rule again; the
eviction controller sees every one of these rules. Each row churns devices
one way and checks that what either controller keeps per rule or per device
grew while the rules existed and is back to its size after they went.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from controllers.health.policy import GROUP
from kubesim.objects import node
from tests.eviction.harness import CRD, seed
from tests.eviction.test_churn import sizes as eviction_sizes
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice
from tests.health.test_e2e import effects

ROUNDS = 3
PER_ROUND = 3
HOLD_DOWN = 15 * 60  # xid_rule's clearAfter


def sizes(cluster: HealthCluster) -> dict[str, int]:
    """What the health controller keeps per rule or per device, and the eviction controller per rule or taint."""
    health = cluster.health
    assert health is not None and cluster.controller is not None
    return {
        "states": sum(len(s) for s in health.states.values()),
        "where": len(health.where),
        "written": len(health.written),
        "same": len(health._same),
        "names": len(health._names),
        **{f"eviction.{k}": n for k, n in eviction_sizes(cluster.controller).items()},
    }


async def resolved_after_the_hold_down(cluster: HealthCluster, uuids: list[str]) -> None:
    await cluster.post(delivery(*(alert(u, status="resolved") for u in uuids)))
    await cluster.advance(HOLD_DOWN + 2)


async def policy_deleted(cluster: HealthCluster, uuids: list[str]) -> None:
    """The policy goes with its rules still there: the controller removes them as orphans."""
    cluster.api.delete("devicehealthpolicies", None, "gpu-health", group=GROUP)
    await cluster.advance(30)
    cluster.api.create(policy())
    await cluster.advance(30)


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    go: Callable[[HealthCluster, list[str]], object]  # takes the round's rules away


CASES = [
    Case("alerts-resolve-and-the-hold-down-clears", resolved_after_the_hold_down),
    Case("the-policy-is-deleted-and-created-again", policy_deleted),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
async def test_rules_created_and_deleted_for_ever_other_devices_leave_every_map_at_its_size(cluster: HealthCluster, case: Case) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(ROUNDS * PER_ROUND), policy())
    await cluster.start()
    await cluster.advance(30)
    baseline = sizes(cluster)
    for n in range(ROUNDS):
        uuids = [f"GPU-node-a-{n * PER_ROUND + j}" for j in range(PER_ROUND)]
        await cluster.post(delivery(*(alert(u) for u in uuids)))
        await cluster.advance(60)
        assert len(effects(cluster)) == PER_ROUND
        peak = sizes(cluster)
        assert all(peak[k] > baseline[k] for k in ("states", "where", "written", "same", "names", "eviction.rule_stats")), (peak, baseline)
        await case.go(cluster, uuids)  # type: ignore[misc]  # a coroutine
        assert effects(cluster) == {}
        assert sizes(cluster) == baseline, f"round {n}"
    assert cluster.api.list("devicetaintrules", group=CRD) == []
