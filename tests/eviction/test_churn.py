"""Rules and taints that come and go leave nothing behind in the eviction controller (bounded memory under churn).

The health controller creates and deletes a DeviceTaintRule per (policy, rule,
device) as alerts fire and resolve, so in production rules churn without end.
Each row churns one kind of taint over a pod that tolerates it for good (the
controller still times each taint) and checks that what the controller keeps
per rule or per taint grew while they existed and is back to its size after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from controllers.eviction import EvictionController
from kubesim.objects import node
from tests.eviction.harness import CRD, DRIVER, Cluster, claim_and_pod, gpu_slice, rule, seed

ROUNDS = 3
PER_ROUND = 4
TOLERATES_ALL = {"operator": "Exists"}  # an empty effect matches NoExecute: never evicted, every taint still timed


def sizes(ctrl: EvictionController) -> dict[str, int]:
    """What the controller keeps per rule or per taint."""
    return {
        "first_seen": len(ctrl.rule_stamps._first_seen),
        "stamps": len(ctrl.rule_stamps._stamps),
        "rule_stats": len(ctrl.reports._stats),
        "unknown_effects": len(ctrl.planner.events._unknown_effects),
    }


Churn = Callable[[Cluster, int], Awaitable[None]]  # one round: put taints there, wait, take them away


def rules(effect: str, *, group: str = CRD) -> tuple[Churn, Churn]:
    names = [f"r{j}" for j in range(PER_ROUND)]
    selector = {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}

    async def add(cluster: Cluster, n: int) -> None:
        for name in names:
            cluster.api.create(rule(f"{name}-{n}", effect, group=group, selector=selector))

    async def remove(cluster: Cluster, n: int) -> None:
        for name in names:
            cluster.api.delete("devicetaintrules", None, f"{name}-{n}", group=group)

    return add, remove


def driver_taints() -> tuple[Churn, Churn]:
    async def add(cluster: Cluster, n: int) -> None:
        taints = [{"key": f"{DRIVER}/xid-{n}-{j}", "effect": "NoExecute"} for j in range(PER_ROUND)]
        cluster.api.apply(gpu_slice(1, taints={0: taints}))

    async def remove(cluster: Cluster, n: int) -> None:
        cluster.api.apply(gpu_slice(1))

    return add, remove


def effect_changes() -> tuple[Churn, Churn]:
    """Each rule's effect changes while it exists (a new taint text, a new generation), then it goes."""
    add_rules, remove_rules = rules("Evict-Everything")

    async def add(cluster: Cluster, n: int) -> None:
        await add_rules(cluster, n)
        await cluster.advance(30)
        for j in range(PER_ROUND):
            cluster.api.patch("devicetaintrules", None, f"r{j}-{n}", {"spec": {"taint": {"effect": "None"}}}, group=CRD)

    return add, remove_rules


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    churn: tuple[Churn, Churn]
    grows: tuple[str, ...]  # what must be bigger while the taints exist (the row exercises it)
    evict_upstream: bool = False


CASES = [
    Case("our-noexecute-rules", rules("NoExecute"), ("rule_stats",)),
    Case("our-rules-with-an-unknown-effect", rules("Evict-Everything"), ("rule_stats", "unknown_effects")),
    Case("our-rules-whose-effect-changes", effect_changes(), ("rule_stats",)),
    Case("upstream-rules", rules("NoExecute", group="resource.k8s.io"), ("rule_stats",), True),
    Case("driver-taints-without-timeAdded", driver_taints(), ("first_seen",), True),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
async def test_rule_and_taint_churn_leaves_every_map_at_its_size(cluster: Cluster, case: Case) -> None:
    seed(cluster.api, node("node-a"), gpu_slice(1), *claim_and_pod("stays", 0, tolerations=[TOLERATES_ALL]))
    ctrl = await cluster.start(evict_upstream=case.evict_upstream)
    await cluster.advance(30)
    baseline = sizes(ctrl)
    add, remove = case.churn
    for n in range(ROUNDS):
        await add(cluster, n)
        await cluster.advance(30)
        peak = sizes(ctrl)
        assert all(peak[name] > baseline[name] for name in case.grows), (peak, baseline)
        await remove(cluster, n)
        await cluster.advance(30)
        assert sizes(ctrl) == baseline, f"round {n}: {sizes(ctrl)} != {baseline}"
    assert cluster.recorder.deleted() == []


def series(ctrl: EvictionController) -> list[str]:
    """The rules with a dra_extender_eviction_pod_deletions_total series."""
    prefix = f'dra_extender_eviction_pod_deletions_total{{result="ok",rule="DeviceTaintRule/{CRD}/'
    return sorted(line[len(prefix) :].split('"')[0] for line in ctrl.metrics.render().decode().splitlines() if line.startswith(prefix))


async def test_deleted_rules_keep_their_eviction_series_only_while_among_the_most_recent(cluster: Cluster) -> None:
    """One series per rule that ever evicted would grow with the health controller's churn: a deleted
    rule's series stays for the `gone_rule_series` most recently deleted rules (so a scrape after the
    deletion still sees its last evictions), then goes; a rule of that name that evicts again is live."""
    seed(cluster.api, node("node-a"), gpu_slice(4), *(o for j in range(4) for o in claim_and_pod(f"p{j}", j)))
    ctrl = await cluster.start()
    ctrl.metrics.gone_rule_series = 2
    for j in range(4):
        cluster.api.create(rule(f"r{j}", selector={"driver": DRIVER, "pool": "node-a", "device": f"gpu-{j}"}))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) == 4, within=60)
    assert series(ctrl) == ["r0", "r1", "r2", "r3"]
    for j, kept in ((0, ["r0", "r1", "r2", "r3"]), (1, ["r0", "r1", "r2", "r3"]), (2, ["r1", "r2", "r3"])):
        cluster.api.delete("devicetaintrules", None, f"r{j}", group=CRD)
        await cluster.advance(30)
        assert series(ctrl) == kept, f"after deleting r{j}"
    # r1 comes back and evicts again: live, no longer among the deleted ones.
    seed(cluster.api, *claim_and_pod("p1-again", 1))
    cluster.api.create(rule("r1", selector={"driver": DRIVER, "pool": "node-a", "device": "gpu-1"}))
    await cluster.run_until(lambda: "p1-again" in cluster.recorder.deleted(), within=60)
    cluster.api.delete("devicetaintrules", None, "r3", group=CRD)
    await cluster.advance(30)
    assert series(ctrl) == ["r1", "r2", "r3"]
