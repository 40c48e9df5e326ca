"""Device binding conditions (DRADeviceBindingConditions): when a pod with allocated devices may be bound.

A device may carry `bindingConditions` (and `bindingFailureConditions`); the
allocator copies them into the claim's allocation results, and the pod is
bound only once the driver reports every binding condition True for that
device in the claim's `status.devices` (upstream `isClaimReadyForBinding`).
A failure condition True, or the binding timeout counted from the
allocation's `allocationTimestamp`, ends the wait: the claim is deallocated
so the pod is scheduled again.

kube-scheduler gives /bind only its `httpTimeout`, so the wait cannot happen
inside /bind as in upstream's PreBind (docs/kube-scheduler.md, "Binding
conditions"): /bind writes the allocation and answers an error while the
conditions are pending, keeping the allocation; /filter rejects every node
until they are met, and offers only the allocated node after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from allocator.types import ResourceClaim
from tracker.claim_status import ClaimStatus
from tracker.timestamps import parse_rfc3339

READY: Final = "ready"
PENDING: Final = "pending"
FAILED: Final = "failed"
TIMED_OUT: Final = "timed_out"

PENDING_REASON: Final = "BindingConditionsPending"
FAILED_REASON: Final = "FailedScheduling"
TIMEOUT_MESSAGE: Final = "device binding timeout"


@dataclass(frozen=True, slots=True)
class Readiness:
    """Where one claim's binding conditions stand; `message` is upstream's wording."""

    state: str  # READY | PENDING | FAILED | TIMED_OUT
    claim: str
    message: str = ""


def has_binding_conditions(claim: ResourceClaim) -> bool:
    return claim.allocation is not None and any(r.binding_conditions for r in claim.allocation.results)


def readiness(claim: ResourceClaim, status: ClaimStatus | None, *, timeout: float, now: datetime | None = None) -> Readiness:
    """Upstream isClaimReadyForBinding, then isClaimTimeout, for one allocated claim.

    Devices are matched in `status.devices` by driver, pool and device (a
    shareID is ignored). A missing entry is not ready; a failure condition
    True fails at once; ready needs every binding condition True.
    """
    alloc = claim.allocation
    if alloc is None:
        return Readiness(READY, claim.key)
    statuses = status.device_conditions if status is not None else {}
    ready = True
    for result in alloc.results:
        if not result.binding_conditions:
            continue
        conditions = statuses.get((result.driver, result.pool, result.device))
        if conditions is None:
            ready = False
            continue
        by_type = {c.type: c for c in conditions}
        for failure in result.binding_failure_conditions:
            c = by_type.get(failure)
            if c is not None and c.true:
                return Readiness(
                    FAILED,
                    claim.key,
                    f"device binding failed: claim={claim.meta.name}, reason={c.reason}, message={c.message}",
                )
        if not all((found := by_type.get(t)) is not None and found.true for t in result.binding_conditions):
            ready = False
    if ready:
        return Readiness(READY, claim.key)
    started = parse_rfc3339(alloc.allocation_timestamp)
    if started is not None and (now or datetime.now(UTC)).timestamp() - started.timestamp() > timeout:
        return Readiness(TIMED_OUT, claim.key, TIMEOUT_MESSAGE)
    return Readiness(PENDING, claim.key)


def pending_for(claims: list[ResourceClaim], pod_uid: str) -> list[ResourceClaim]:
    """The pod's allocated claims with binding conditions it has reserved (its binding is waiting on them)."""
    return [c for c in claims if has_binding_conditions(c) and any(r.uid == pod_uid for r in c.reserved_for)]


def worst(states: list[Readiness]) -> Readiness | None:
    """The one to act on: a failure, then a timeout, then pending; None when all are ready."""
    for state in (FAILED, TIMED_OUT, PENDING):
        for r in states:
            if r.state == state:
                return r
    return None


def pending_message(node: str) -> str:
    return f"waiting for binding conditions for device on node {node}"


def allocated_node(claim: ResourceClaim) -> str:
    """The node an allocation is pinned to (`matchFields metadata.name In [node]`), or ''."""
    sel = claim.allocation.node_selector if claim.allocation is not None else None
    if sel is None:
        return ""
    for term in sel.terms:
        for f in term.match_fields:
            if f.key == "metadata.name" and f.operator == "In" and len(f.values) == 1:
                return f.values[0]
    return ""
