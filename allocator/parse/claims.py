"""ResourceClaim and ResourceClaimTemplate: requests, constraints, config and the allocation in the status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_config, _parse_quantity, _parse_selectors, _strings, parse_node_selector, parse_tolerations
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.quantity import Quantity
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    MODE_EXACT_COUNT,
    TOLERATIONS_ANNOTATION,
    AllocatedConfig,
    AllocationResult,
    DeviceConfig,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceToleration,
    ExactRequest,
    ObjectMeta,
    OpaqueConfig,
    ReservedFor,
    ResourceClaim,
    ResourceClaimTemplate,
    qualify,
)


def _parse_exact(
    r: _Reader,
    raw: Mapping[str, Any],
    path: str,
    name: str,
    extra_tolerations: tuple[DeviceToleration, ...],
) -> ExactRequest:
    mode = r.string(raw.get("allocationMode"), f"{path}.allocationMode") or MODE_EXACT_COUNT
    if mode not in (MODE_EXACT_COUNT, MODE_ALL):
        raise r.fail(f"{path}.allocationMode", f"unsupported value {mode!r}: must be ExactCount or All")
    count = r.integer(raw.get("count"), f"{path}.count", default=1 if mode == MODE_EXACT_COUNT else 0)
    if mode == MODE_EXACT_COUNT and (count is None or count < 1):
        raise r.fail(f"{path}.count", "must be greater than zero")
    if mode == MODE_EXACT_COUNT and count is not None and count > ALLOCATION_RESULTS_MAX_SIZE:
        raise r.fail(f"{path}.count", f"must not exceed {ALLOCATION_RESULTS_MAX_SIZE}")
    return ExactRequest(
        name=name,
        device_class_name=r.string(raw.get("deviceClassName"), f"{path}.deviceClassName", required=True),
        selectors=_parse_selectors(r, raw.get("selectors"), f"{path}.selectors"),
        allocation_mode=mode,
        count=count or 0,
        admin_access=r.boolean(raw.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=parse_tolerations(r, raw.get("tolerations"), f"{path}.tolerations") + extra_tolerations,
        capacity_requests=_parse_capacity_requests(r, raw.get("capacity"), f"{path}.capacity"),
    )


def _parse_capacity_requests(r: _Reader, raw: Any, path: str) -> tuple[tuple[str, Quantity], ...]:
    """`capacity.requests`; names stay as written (qualified against each device's driver when compared)."""
    if raw is None:
        return ()
    c = r.mapping(raw, path)
    return tuple(
        sorted((str(k), _parse_quantity(r, v, f"{path}.requests.{k}")) for k, v in r.mapping(c.get("requests"), f"{path}.requests").items())
    )


def _annotation_tolerations(r: _Reader, meta: ObjectMeta) -> dict[str, tuple[DeviceToleration, ...]]:
    """Tolerations from the claim annotation, for API servers that drop `tolerations`."""
    raw = meta.annotations.get(TOLERATIONS_ANNOTATION)
    if raw is None:
        return {}
    path = f"metadata.annotations[{TOLERATIONS_ANNOTATION}]"
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise r.fail(path, f"not valid JSON: {e}") from None
    parsed = r.mapping(parsed, path)
    return {str(k): parse_tolerations(r, v, f"{path}.{k}") for k, v in parsed.items()}


def _parse_claim_spec(
    r: _Reader, spec: Mapping[str, Any], path: str, meta: ObjectMeta
) -> tuple[tuple[DeviceRequest, ...], tuple[DeviceConstraint, ...], tuple[DeviceConfig, ...]]:
    devices = r.mapping(spec.get("devices"), f"{path}.devices")
    extra = _annotation_tolerations(r, meta)
    requests = []
    names: set[str] = set()
    for i, q in enumerate(r.seq(devices.get("requests"), f"{path}.devices.requests")):
        qp = f"{path}.devices.requests[{i}]"
        q = r.mapping(q, qp)
        name = r.string(q.get("name"), f"{qp}.name", required=True)
        if name in names:
            raise r.fail(f"{qp}.name", f"duplicate request name {name!r}")
        names.add(name)
        if q.get("exactly") is not None:
            exact = _parse_exact(r, r.mapping(q.get("exactly"), f"{qp}.exactly"), f"{qp}.exactly", name, extra.get(name, ()))
            requests.append(DeviceRequest(name, exactly=exact))
        elif q.get("firstAvailable") is not None:
            subs = []
            sub_names: set[str] = set()
            for j, s in enumerate(r.seq(q.get("firstAvailable"), f"{qp}.firstAvailable")):
                sp = f"{qp}.firstAvailable[{j}]"
                s = r.mapping(s, sp)
                sub_name = r.string(s.get("name"), f"{sp}.name", required=True)
                if sub_name in sub_names:
                    raise r.fail(f"{sp}.name", f"duplicate subrequest name {sub_name!r}")
                sub_names.add(sub_name)
                subs.append(_parse_exact(r, s, sp, sub_name, extra.get(f"{name}/{sub_name}", ()) + extra.get(name, ())))
            if not subs:
                raise r.fail(f"{qp}.firstAvailable", "must have at least one subrequest")
            requests.append(DeviceRequest(name, first_available=tuple(subs)))
        elif q.get("deviceClassName") is not None:  # v1beta1: the request is its own `exactly`
            requests.append(DeviceRequest(name, exactly=_parse_exact(r, q, qp, name, extra.get(name, ()))))
        else:
            raise r.fail(qp, "exactly one of exactly, firstAvailable must be set")
    constraints = []
    for i, c in enumerate(r.seq(devices.get("constraints"), f"{path}.devices.constraints")):
        cp = f"{path}.devices.constraints[{i}]"
        c = r.mapping(c, cp)
        reqs = tuple(r.string(x, f"{cp}.requests[{j}]") for j, x in enumerate(r.seq(c.get("requests"), f"{cp}.requests")))
        match = r.string(c.get("matchAttribute"), f"{cp}.matchAttribute") or None
        distinct = r.string(c.get("distinctAttribute"), f"{cp}.distinctAttribute") or None
        if (match is None) == (distinct is None):
            raise r.fail(cp, "exactly one of matchAttribute, distinctAttribute must be set")
        for attr, fp in ((match, "matchAttribute"), (distinct, "distinctAttribute")):
            if attr is not None and "/" not in attr:
                raise r.fail(f"{cp}.{fp}", f"must be a fully qualified attribute name (domain/name), got {attr!r}")
        for j, req in enumerate(reqs):
            if req.split("/", 1)[0] not in names:
                raise r.fail(f"{cp}.requests[{j}]", f"unknown request {req!r}")
        constraints.append(DeviceConstraint(reqs, match, distinct))
    config = _parse_config(r, devices.get("config"), f"{path}.devices.config", with_requests=True)
    return tuple(requests), tuple(constraints), config


def _parse_allocation(r: _Reader, raw: Any, path: str) -> AllocationResult | None:
    if raw is None:
        return None
    a = r.mapping(raw, path)
    devices = r.mapping(a.get("devices"), f"{path}.devices")
    results = []
    for i, x in enumerate(r.seq(devices.get("results"), f"{path}.devices.results")):
        xp = f"{path}.devices.results[{i}]"
        x = r.mapping(x, xp)
        admin = x.get("adminAccess")
        results.append(
            DeviceRequestAllocationResult(
                request=r.string(x.get("request"), f"{xp}.request", required=True),
                driver=r.string(x.get("driver"), f"{xp}.driver", required=True),
                pool=r.string(x.get("pool"), f"{xp}.pool", required=True),
                device=r.string(x.get("device"), f"{xp}.device", required=True),
                admin_access=r.boolean(admin, f"{xp}.adminAccess") if admin is not None else None,
                tolerations=parse_tolerations(r, x.get("tolerations"), f"{xp}.tolerations"),
                share_id=r.string(x.get("shareID"), f"{xp}.shareID") or None,
                consumed_capacity=_parse_consumed_capacity(r, x, xp),
                binding_conditions=_strings(r, x.get("bindingConditions"), f"{xp}.bindingConditions"),
                binding_failure_conditions=_strings(r, x.get("bindingFailureConditions"), f"{xp}.bindingFailureConditions"),
            )
        )
    configs = []
    for i, c in enumerate(r.seq(devices.get("config"), f"{path}.devices.config")):
        cp = f"{path}.devices.config[{i}]"
        c = r.mapping(c, cp)
        opaque = None
        if c.get("opaque") is not None:
            o = r.mapping(c.get("opaque"), f"{cp}.opaque")
            opaque = OpaqueConfig(r.string(o.get("driver"), f"{cp}.opaque.driver"), o.get("parameters"))
        reqs = tuple(r.string(x, f"{cp}.requests[{j}]") for j, x in enumerate(r.seq(c.get("requests"), f"{cp}.requests")))
        configs.append(AllocatedConfig(r.string(c.get("source"), f"{cp}.source"), opaque, reqs))
    ns = a.get("nodeSelector")
    return AllocationResult(
        tuple(results),
        tuple(configs),
        parse_node_selector(r, ns, f"{path}.nodeSelector") if ns else None,
        r.string(a.get("allocationTimestamp"), f"{path}.allocationTimestamp"),
    )


def _parse_consumed_capacity(r: _Reader, result: Mapping[str, Any], path: str) -> dict[str, Quantity] | None:
    raw = result.get("consumedCapacity")
    if raw is None:
        return None
    driver = r.string(result.get("driver"), f"{path}.driver")
    return {
        qualify(str(k), driver): _parse_quantity(r, v, f"{path}.consumedCapacity.{k}")
        for k, v in r.mapping(raw, f"{path}.consumedCapacity").items()
    }


def parse_resource_claim(raw: Mapping[str, Any]) -> ResourceClaim:
    r = _Reader(_object_ref("ResourceClaim", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=True)
    spec = r.mapping(raw.get("spec"), "spec")
    requests, constraints, config = _parse_claim_spec(r, spec, "spec", meta)
    status = r.mapping(raw.get("status"), "status")
    reserved = []
    for i, x in enumerate(r.seq(status.get("reservedFor"), "status.reservedFor")):
        xp = f"status.reservedFor[{i}]"
        x = r.mapping(x, xp)
        reserved.append(
            ReservedFor(
                resource=r.string(x.get("resource"), f"{xp}.resource", required=True),
                name=r.string(x.get("name"), f"{xp}.name", required=True),
                uid=r.string(x.get("uid"), f"{xp}.uid"),
                api_group=r.string(x.get("apiGroup"), f"{xp}.apiGroup"),
            )
        )
    return ResourceClaim(
        meta,
        requests,
        constraints,
        config,
        _parse_allocation(r, status.get("allocation"), "status.allocation"),
        tuple(reserved),
    )


def parse_resource_claim_template(raw: Mapping[str, Any]) -> ResourceClaimTemplate:
    r = _Reader(_object_ref("ResourceClaimTemplate", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=True)
    spec = r.mapping(raw.get("spec"), "spec", required=True)
    claim_meta = r.mapping(spec.get("metadata"), "spec.metadata")
    claim_spec = r.mapping(spec.get("spec"), "spec.spec", required=True)
    # Validate the embedded claim now so a bad template is reported against itself.
    inner = ObjectMeta(
        name=meta.name,
        namespace=meta.namespace,
        annotations=dict(r.mapping(claim_meta.get("annotations"), "spec.metadata.annotations")),
    )
    _parse_claim_spec(r, claim_spec, "spec.spec", inner)
    return ResourceClaimTemplate(meta, dict(claim_meta), dict(claim_spec))
