"""Pod (core/v1): claim references, claim statuses and the extended resources containers request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_quantity
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.types import (
    ContainerResources,
    Pod,
    PodResourceClaim,
)


def parse_pod(raw: Mapping[str, Any]) -> Pod:
    r = _Reader(_object_ref("Pod", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=True)
    spec = r.mapping(raw.get("spec"), "spec")
    claims = []
    for i, c in enumerate(r.seq(spec.get("resourceClaims"), "spec.resourceClaims")):
        cp = f"spec.resourceClaims[{i}]"
        c = r.mapping(c, cp)
        claim_name = r.string(c.get("resourceClaimName"), f"{cp}.resourceClaimName") or None
        template = r.string(c.get("resourceClaimTemplateName"), f"{cp}.resourceClaimTemplateName") or None
        if (claim_name is None) == (template is None):
            raise r.fail(cp, "exactly one of resourceClaimName, resourceClaimTemplateName must be set")
        claims.append(PodResourceClaim(r.string(c.get("name"), f"{cp}.name", required=True), claim_name, template))
    status = r.mapping(raw.get("status"), "status")
    statuses: dict[str, str | None] = {}
    for i, s in enumerate(r.seq(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")):
        sp = f"status.resourceClaimStatuses[{i}]"
        s = r.mapping(s, sp)
        statuses[r.string(s.get("name"), f"{sp}.name", required=True)] = (
            r.string(s.get("resourceClaimName"), f"{sp}.resourceClaimName") or None
        )
    containers = [
        _parse_container(r, c, f"spec.initContainers[{i}]", init=True)
        for i, c in enumerate(r.seq(spec.get("initContainers"), "spec.initContainers"))
    ]
    containers += [
        _parse_container(r, c, f"spec.containers[{i}]", init=False) for i, c in enumerate(r.seq(spec.get("containers"), "spec.containers"))
    ]
    extended = r.mapping(status.get("extendedResourceClaimStatus"), "status.extendedResourceClaimStatus")
    return Pod(
        meta,
        tuple(claims),
        statuses,
        r.string(spec.get("nodeName"), "spec.nodeName"),
        r.string(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        r.string(status.get("phase"), "status.phase"),
        tuple(containers) if any(c.extended for c in containers) else (),
        r.string(extended.get("resourceClaimName"), "status.extendedResourceClaimStatus.resourceClaimName") or None,
    )


def _parse_container(r: _Reader, raw: Any, path: str, *, init: bool) -> ContainerResources:
    """Requests as the API server defaults them (a limit without a request is the request)."""
    c = r.mapping(raw, path)
    resources = r.mapping(c.get("resources"), f"{path}.resources")
    requests = dict(r.mapping(resources.get("requests"), f"{path}.resources.requests"))
    for name, value in r.mapping(resources.get("limits"), f"{path}.resources.limits").items():
        requests.setdefault(name, value)
    extended: dict[str, int] = {}
    for name, value in requests.items():
        if "/" not in name:
            continue
        q = _parse_quantity(r, value, f"{path}.resources.requests.{name}").value
        if q.denominator == 1 and q > 0:
            extended[name] = int(q)  # upstream skips a request that is not a whole number (AsInt64)
    return ContainerResources(
        r.string(c.get("name"), f"{path}.name"),
        init,
        init and r.string(c.get("restartPolicy"), f"{path}.restartPolicy") == "Always",
        tuple(sorted(requests)),
        extended,
    )
