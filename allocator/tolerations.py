"""Device toleration matching, exactly as upstream's `resourceclaim.ToleratesTaint`,
and which tolerations an allocated claim's request has.

Kept in one module so the allocator (/filter, /bind), the eviction controller
and `kubectl dra` cannot drift apart on what "tolerated" means.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from allocator.types import (
    BLOCKING_EFFECTS,
    EFFECT_NO_EXECUTE,
    KNOWN_EFFECTS,
    DeviceRequestAllocationResult,
    DeviceTaint,
    DeviceToleration,
    ResourceClaim,
)


def tolerates_taint(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """Upstream's rule, in its order: effect, then key, then operator.

    An empty effect matches every effect and an empty key every key; `Exists`
    matches any value; `Equal` (or empty) needs equal values; any other
    operator matches nothing.
    """
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def taint_tolerated(taint: DeviceTaint, tolerations: Iterable[DeviceToleration]) -> bool:
    return any(tolerates_taint(t, taint) for t in tolerations)


NOW: Final = 0.0  # an eviction time: at once, whenever the plan is made


def eviction_time(taint: DeviceTaint, tolerations: Iterable[DeviceToleration], added: float) -> float | None:
    """When a pod using something under this evicting `taint` (added at `added`, epoch seconds) must go; None: never.

    Upstream's device-taint eviction rule (`claimEvictionTime` in
    pkg/controller/devicetainteviction): not tolerated, at once (`NOW`); a
    matching toleration without `tolerationSeconds` tolerates for good,
    whatever the others say; otherwise `added` plus the smallest of the
    matching tolerations' seconds, a value of 0 or less counting as 0. The
    one rule for NoExecute device taints and NoUse volume taints, whichever
    controller or view asks; matching is `tolerates_taint` (an empty
    toleration effect matches every effect, see docs/design.md#eviction).
    """
    seconds: int | None = None
    for toleration in tolerations:
        if not tolerates_taint(toleration, taint):
            continue
        if toleration.toleration_seconds is None:
            return None
        own = max(0, toleration.toleration_seconds)
        seconds = own if seconds is None else min(seconds, own)
    return NOW if seconds is None else added + seconds


def blocks_allocation(taint: DeviceTaint) -> bool:
    """Only NoSchedule and NoExecute keep a device from being allocated.

    `None` is informational, and unknown effects (from newer API versions)
    are treated like `None` as KEP-5055 asks of consumers.
    """
    return taint.effect in BLOCKING_EFFECTS


def unknown_effect(effect: str) -> str | None:
    """The plain words for an effect this version does not act on (None for a known one).

    Said the same way by the rule's Warning Event, its status and `kubectl dra`,
    so that a typo such as `NoExecuted` is never read as a drain.
    """
    if effect in KNOWN_EFFECTS:
        return None
    return f"unknown effect {effect!r}: nothing is evicted or blocked (known: {', '.join(KNOWN_EFFECTS)})"


def untolerated_blocking_taints(taints: Sequence[DeviceTaint], tolerations: Sequence[DeviceToleration]) -> list[DeviceTaint]:
    """The taints that forbid allocating this device for a request with these tolerations."""
    return [t for t in taints if blocks_allocation(t) and not taint_tolerated(t, tolerations)]


def untolerated_no_execute_taints(taints: Sequence[DeviceTaint], tolerations: Sequence[DeviceToleration]) -> list[DeviceTaint]:
    """NoExecute taints that would evict a pod using the device (no new pod may reserve it)."""
    return [t for t in taints if t.effect == EFFECT_NO_EXECUTE and not taint_tolerated(t, tolerations)]


def request_tolerations(claim: ResourceClaim, request: str) -> tuple[DeviceToleration, ...]:
    """The claim's own tolerations (spec + annotation, as parsed) of a request (`req` or `req/sub`)."""
    parent, _, sub = request.partition("/")
    for r in claim.requests:
        if r.name != parent:
            continue
        if not sub:
            return r.exactly.tolerations if r.exactly is not None else ()
        for s in r.first_available:
            if s.name == sub:
                return s.tolerations
    return ()


def allocated_tolerations(claim: ResourceClaim, result: DeviceRequestAllocationResult) -> tuple[DeviceToleration, ...]:
    """The tolerations an allocated claim's result has: the one rule for /filter, /bind, eviction and `kubectl dra`.

    Upstream judges an allocated claim by the tolerations copied into its
    results. Added to them: the request's own tolerations as the claim says
    now, because the annotation stands in for the spec on API servers that
    drop `tolerations` (results included) and stays mutable, so a toleration
    added after allocation spares running pods and admits new ones alike
    (docs/design.md, "Claim-annotation tolerations").
    """
    own = request_tolerations(claim, result.request)
    if not own:
        return result.tolerations
    return result.tolerations + tuple(t for t in own if t not in result.tolerations)
