"""Which ResourceClaims a pod has: the one answer the binder, the filter and the tracker share.

A pod's claims are, in this order: each `spec.resourceClaims` entry (named, or
generated from a template and recorded in `status.resourceClaimStatuses`, or
not yet recorded), then the claim for its DRA-backed extended resources
(recorded in `status.extendedResourceClaimStatus`), which upstream allocates
last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from allocator.extended_resources import is_extended_claim
from allocator.types import Pod, ResourceClaim

NAMED: Final = "named"
TEMPLATE: Final = "template"
EXTENDED: Final = "extended"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One claim of a pod; `name` is None while a template's claim is not recorded in the pod's status."""

    source: str  # NAMED | TEMPLATE | EXTENDED
    pod_claim: str  # the spec.resourceClaims entry ("" for the extended-resource claim)
    name: str | None
    template: str | None = None

    @property
    def may_come(self) -> bool:
        """Not known by name yet: the resourceclaim controller creates it and records it later."""
        return self.name is None


def claim_refs(pod: Pod) -> list[ClaimRef]:
    """The pod's claims in allocation order; entries whose status says no claim is needed are left out."""
    refs: list[ClaimRef] = []
    for pc in pod.resource_claims:
        if pc.resource_claim_name is not None:
            refs.append(ClaimRef(NAMED, pc.name, pc.resource_claim_name))
        elif pc.name not in pod.claim_statuses:
            refs.append(ClaimRef(TEMPLATE, pc.name, None, pc.resource_claim_template_name))
        elif pod.claim_statuses[pc.name] is not None:
            refs.append(ClaimRef(TEMPLATE, pc.name, pod.claim_statuses[pc.name], pc.resource_claim_template_name))
    if pod.extended_claim_name:
        refs.append(ClaimRef(EXTENDED, "", pod.extended_claim_name))
    return refs


def claim_names(pod: Pod) -> list[str]:
    """Names of the pod's claims known from its spec and status."""
    return [r.name for r in claim_refs(pod) if r.name is not None]


def being_deleted(claims: Sequence[ResourceClaim]) -> str | None:
    """Why the pod cannot use its claims when one of them is being deleted (upstream's PreFilter), else None.

    Upstream refuses the pod, unschedulable on every node, for any claim with
    a deletionTimestamp, allocated or not: reserving it for another pod would
    hand out devices that are about to be released. The pod's own
    extended-resource claim is refused only while allocated: an unallocated
    one is stale and replaced at /bind anyway.
    """
    for claim in claims:
        if not claim.meta.deletion_timestamp:
            continue
        if is_extended_claim(claim) and claim.allocation is None:
            continue
        return f'resourceclaim "{claim.meta.name}" is being deleted'
    return None
