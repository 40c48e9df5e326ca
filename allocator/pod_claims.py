"""Whether a pod uses DRA, and which ResourceClaims it has: the one answer every part shares.

Whether a pod needs the extender is asked at three depths, each implied by
the one before it (a test holds the order, tests/extender/test_pod_predicate.py):

- `dra_use(pod, served)`: with the DeviceClasses known, why the pod uses DRA
  (the webhook, the foreign-scheduler check, `kubectl dra why`);
- `may_use_dra(pod)`: the same with every domain-qualified resource counted,
  since a class may serve it later or on some nodes only (the binder, the
  tracker, /filter: the node decides);
- `raw_may_use_dra(raw)`: the same on the request body, before it is parsed
  (the HTTP edge's fast path for the many pods without DRA); with
  `has_pvc_volumes`, `raw_needs_extender`.

A pod's claims are, in this order: each `spec.resourceClaims` entry (named, or
generated from a template and recorded in `status.resourceClaimStatuses`, or
not yet recorded), then the claim for its DRA-backed extended resources
(recorded in `status.extendedResourceClaimStatus`), which upstream allocates
last.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from allocator.extended_resources import IMPLICIT_PREFIX, is_extended_claim
from allocator.failures import REASON_CLAIMS_UNRESOLVED, Failure, plain
from allocator.pod_volumes import has_pvc_volumes
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


def dra_use(pod: Pod, served: Container[str]) -> str | None:
    """Why a DRA allocator must schedule this pod (for a log or an Event), or None when it needs no DRA device.

    Resource claims, a recorded extended-resource claim, or a requested
    resource a DeviceClass serves: one in `served` (class_mapping's keys, or
    every class's extendedResourceName) or any `deviceclass.resource.kubernetes.io/`
    name, whose class may be created after the pod. Requests are read as
    parse_pod defaults them (a limit without a request counts, init containers too).
    """
    if pod.resource_claims:
        return "resourceClaims"
    if pod.extended_claim_name:
        return f"extended-resource claim {pod.extended_claim_name}"
    for c in pod.containers_if_extended:
        for name in sorted(c.extended):
            if name in served or name.startswith(IMPLICIT_PREFIX):
                return f"extended resource {name}"
    return None


def may_use_dra(pod: Pod, *, extended_resources: bool = True) -> bool:
    """Whether DRA may have to allocate devices for the pod, whatever DeviceClasses exist: `dra_use` for a class serving every resource.

    With `extended_resources` off (the DRAExtendedResource gate), a pod's
    domain-qualified resources are a device plugin's and only its claims count.
    """
    if pod.resource_claims:
        return True
    return extended_resources and bool(pod.extended_claim_name or pod.containers_if_extended)


def raw_may_use_dra(raw_pod: Mapping[str, Any]) -> bool:
    """`may_use_dra` on the request body, cheaply: never False for a pod `may_use_dra` takes (it may be True for more).

    Claims, a recorded extended-resource claim, or any domain-qualified name in
    a container's requests or limits (parse_pod counts only positive whole amounts).
    """
    spec = raw_pod.get("spec")
    if not isinstance(spec, dict):
        return False
    if spec.get("resourceClaims"):
        return True
    status = raw_pod.get("status")
    if isinstance(status, dict) and status.get("extendedResourceClaimStatus"):
        return True
    return _requests_domain_qualified(spec.get("containers")) or _requests_domain_qualified(spec.get("initContainers"))


def raw_needs_extender(raw_pod: Mapping[str, Any]) -> bool:
    """Whether the extender must look at the pod at all: it may use DRA, or it mounts a PVC (volume taints)."""
    return raw_may_use_dra(raw_pod) or has_pvc_volumes(raw_pod)


def _requests_domain_qualified(containers: Any) -> bool:
    if not isinstance(containers, list):
        return False
    for c in containers:
        resources = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            values = resources.get(part)
            if isinstance(values, dict) and any("/" in name for name in values):
                return True
    return False


def claim_names(pod: Pod) -> list[str]:
    """Names of the pod's claims known from its spec and status."""
    return [r.name for r in claim_refs(pod) if r.name is not None]


def being_deleted(claims: Sequence[ResourceClaim]) -> Failure | None:
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
        return plain(REASON_CLAIMS_UNRESOLVED, f'resourceclaim "{claim.meta.name}" is being deleted')
    return None
