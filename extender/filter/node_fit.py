"""Which nodes a pod's claims fit on, within /filter's time budget and its `offer_nodes` limit."""

from __future__ import annotations

from allocator.allocation import Outcome
from allocator.cel.lib.budget import DeadlineExceeded as CelDeadlineExceeded
from allocator.cel.lib.budget import set_deadline as set_cel_deadline
from allocator.failures import Failure
from allocator.tolerations import blocks_allocation
from allocator.types import ResourceClaim
from extender.filter.outcomes import OutcomeCache
from extender.filter.prefetch import VerdictPrefetch
from extender.filter.request_nodes import RequestNodes

DEFAULT_OFFER_NODES = 100  # fully healthy fitting nodes after which /filter stops looking (0: offer every fitting node)


class BudgetExceeded(Exception):
    """A /filter call ran out of its time budget; str() names the claim and the step."""


class NodeFit:
    def __init__(self, outcomes: OutcomeCache, offer_nodes: int = DEFAULT_OFFER_NODES, *, prefetch: bool = True) -> None:
        self.outcomes = outcomes
        self.offer_nodes = offer_nodes
        # A repeating shape's remaining verdicts computed between verbs (prefetch.py); None: off.
        self.prefetch = VerdictPrefetch(outcomes) if prefetch else None
        self._scan_start = 0  # where the next limited /filter starts looking (it rotates, as kube-scheduler's sampling does)

    def fit(
        self, claims: list[ResourceClaim], names: list[str], nodes: RequestNodes, deadline: float | None, budget: float | None
    ) -> tuple[list[str], dict[str, Failure], dict[str, Outcome]]:
        """(nodes where the claims fit, why not elsewhere, the fitting nodes' verdicts) against allocated and in-flight devices.

        With `offer_nodes` set and more names than that, the names are looked
        at in chunks from a rotating start, and the look stops at the node
        where `offer_nodes` fitting nodes have the best health (no device with a
        taint that does not block allocation, see extender/prioritize/scores.py): the
        nodes not looked at are neither offered nor failed (kube-scheduler
        drops them). A pod that fits anywhere is never refused: only a look
        over every name ends with no fitting node. See
        docs/kube-scheduler.md#how-many-nodes-filter-offers.
        """
        limit = self.offer_nodes
        total = len(names)
        limited = 0 < limit < total
        start = self._scan_start % total if limited else 0
        order = names[start:] + names[:start] if start else names
        chunk = limit if limited else total
        passed: list[str] = []
        failed: dict[str, Failure] = {}
        fits: dict[str, Outcome] = {}
        signature = self.outcomes.signature(claims)
        healthy = 0
        examined = 0
        previous = set_cel_deadline(deadline)  # CEL checks it between steps and devices
        try:
            while examined < total:
                part = order[examined : examined + chunk]
                try:
                    verdicts = self.outcomes.verdicts(signature, claims, nodes.resolve(part), deadline)
                except CelDeadlineExceeded as e:
                    e.nodes_done = examined + (e.nodes_done or 0)
                    raise out_of_budget(e, claims, order, budget) from None
                looked = len(part)
                for i, (name, outcome) in enumerate(zip(part, verdicts, strict=True)):
                    if outcome.failure is None:
                        passed.append(name)
                        fits[name] = outcome
                        if limited and fully_healthy(outcome):
                            healthy += 1
                            if healthy >= limit:
                                # The look stops at the limit's node: the rest of the chunk is neither offered nor
                                # failed (its verdicts stay cached), and the next look starts right after it.
                                looked = i + 1
                                break
                    else:
                        failed[name] = outcome.failure
                examined += looked
                if limited and healthy >= limit:
                    break
        finally:
            set_cel_deadline(previous)
        if limited:
            self._scan_start = (start + examined) % total
            if examined < total and self.prefetch is not None:
                nxt = self._scan_start
                self.prefetch.limited_look(signature, claims, names[nxt:] + names[:nxt], nodes)
        return passed, failed, fits


def out_of_budget(e: CelDeadlineExceeded, claims: list[ResourceClaim], names: list[str], budget: float | None) -> BudgetExceeded:
    done = e.nodes_done
    step = f"evaluating CEL expression {_short(e.expression)!r}" if e.expression else "allocating devices"
    return BudgetExceeded(
        f"claim {', '.join(_claims_with(claims, e.expression))}: /filter ran out of its time budget of "
        f"{budget:g} s {step} on node {names[min(done, len(names) - 1)]} ({done} of {len(names)} nodes done); "
        "the pod is retried with backoff"
    )


def fully_healthy(outcome: Outcome) -> bool:
    """A fit with the best /prioritize health: no device with a taint that does not block allocation (None, unknown effects).

    A tolerated NoSchedule or NoExecute taint does not lower the score (see extender/prioritize/scores.py).
    """
    return not any(not blocks_allocation(t) for d in outcome.devices if d.taints for t in d.taints)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."


def _claims_with(claims: list[ResourceClaim], expression: str) -> list[str]:
    """The claims whose requests use `expression`; all of them when none does (a class selector)."""
    using = []
    for claim in claims:
        for request in claim.requests:
            if expression and any(expression in sub.selectors for sub in request.subrequests):
                using.append(claim.key)
                break
    return using or [c.key for c in claims]
