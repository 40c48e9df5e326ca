"""Nodes withheld from a /filter while pods placed before it are being bound (docs/design.md, the placement gate)."""

from __future__ import annotations

from collections.abc import Mapping

from allocator.cel.lib.budget import DeadlineExceeded as CelDeadlineExceeded
from allocator.cel.lib.budget import set_deadline as set_cel_deadline
from allocator.failures import REASON_WITHHELD, Failure, plain
from allocator.types import ResourceClaim
from extender.filter.node_fit import out_of_budget
from extender.filter.outcomes import OutcomeCache
from extender.filter.request_nodes import RequestNodes
from extender.placements import Placement
from tracker.state import ClusterState

MAX_JOINT_PLACEMENTS = 4  # placed pods a /filter judges jointly with its own; beyond, it waits for their binds


class ContestedNodes:
    def __init__(self, state: ClusterState, outcomes: OutcomeCache, memory_claims: Mapping[str, ResourceClaim]) -> None:
        self.state = state
        self.outcomes = outcomes
        self.memory_claims = memory_claims  # extended-resource claims of placed pods, not created yet

    def withhold(
        self,
        placed: list[Placement],
        claims: list[ResourceClaim],
        passed: list[str],
        nodes: RequestNodes,
        deadline: float | None,
        budget: float | None,
    ) -> dict[str, Failure] | None:
        """Of `passed`, the nodes a pod being bound might take this pod's devices on, and why; None: all of them.

        A placed pod will take its devices on one of the nodes /filter
        offered it; which one, the extender learns at its /bind. A node is
        safe when this pod's claims and those of every placed pod that may
        land there fit on it together (one joint allocation, its verdict
        cached like any other). Safe nodes are offered at once; the others
        are withheld, so kube-scheduler never picks a node whose devices an
        earlier pod may still take. None means no node is safe (or the pods
        share a claim, or too many are in flight to judge cheaply): the
        caller waits for their binds instead.
        """
        if len(placed) > MAX_JOINT_PLACEMENTS:
            return None
        theirs = self._pending_claims(placed, {c.key for c in claims})
        if theirs is None:
            return None
        groups: dict[tuple[int, ...], list[str]] = {}
        for name in passed:
            reach = tuple(i for i, p in enumerate(placed) if theirs[i] and name in p.nodes)
            groups.setdefault(reach, []).append(name)
        withheld: dict[str, Failure] = {}
        for reach, group in groups.items():
            if not reach:
                continue
            joint = [c for i in reach for c in theirs[i]] + claims
            previous = set_cel_deadline(deadline)
            try:
                verdicts = self.outcomes.verdicts(self.outcomes.signature(joint), joint, nodes.resolve(group), deadline)
            except CelDeadlineExceeded as e:
                raise out_of_budget(e, claims, group, budget) from None
            finally:
                set_cel_deadline(previous)
            for name, outcome in zip(group, verdicts, strict=True):
                if outcome.failure is not None:
                    withheld[name] = plain(
                        REASON_WITHHELD,
                        f"withheld while {len(reach)} pod(s) placed before this one are being bound: their devices may come "
                        "from this node; it is offered again once their binds are decided",
                    )
        return None if len(withheld) == len(passed) else withheld

    def _pending_claims(self, placed: list[Placement], own: set[str]) -> list[list[ResourceClaim]] | None:
        """Per placed pod, its claims still to be allocated; None when one of them is this pod's too."""
        claims_by_key = self.state.claims
        theirs: list[list[ResourceClaim]] = []
        for placement in placed:
            pending = []
            for key in placement.claims:
                if key in own:
                    return None  # a shared claim is allocated once, by whichever bind comes first
                claim = claims_by_key.get(key) or self.memory_claims.get(key)
                if claim is not None and claim.allocation is None:
                    pending.append(claim)
            theirs.append(pending)
        return theirs
