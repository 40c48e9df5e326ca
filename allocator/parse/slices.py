"""ResourceSlice: devices, counters and capacity request policies, re-parsing only what an update changed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.parse.fields import _parse_attribute, _parse_quantity, _strings, parse_node_selector, parse_taint
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.quantity import Quantity
from allocator.types import (
    CAPACITY_VALID_VALUES_MAX,
    DEVICE_MAX_COUNTER_CONSUMPTIONS,
    DEVICE_MAX_COUNTERS_PER_CONSUMPTION,
    DEVICE_TAINTS_MAX,
    RESOURCE_SLICE_MAX_COUNTERS_PER_SET,
    RESOURCE_SLICE_MAX_SHARED_COUNTERS,
    AttributeValue,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    ResourceSlice,
    qualify,
)


@dataclass(frozen=True, slots=True)
class DeviceDigest:
    """A device's raw JSON as an update compares with it, in canonical bytes (see parse_resource_slice).

    `whole`: the device; `contents`: its attributes and capacity. Kept in
    place of the raw dicts, which cost ~1 KB a device.
    """

    whole: bytes
    contents: bytes


def device_digest(raw: Mapping[str, Any], encode: Callable[[Any], bytes]) -> DeviceDigest:
    body = _device_body(raw)
    contents = [body.get("attributes"), body.get("capacity")] if isinstance(body, Mapping) else None
    return DeviceDigest(encode(raw), encode(contents))


def _device_body(d: Mapping[str, Any]) -> Any:
    return d.get("basic") if "basic" in d and d.get("basic") is not None else d  # v1beta1 wraps it in `basic`


def _parse_attributes_and_capacity(
    r: _Reader, body: Mapping[str, Any], bpath: str, driver: str
) -> tuple[dict[str, AttributeValue], dict[str, Quantity], dict[str, CapacityRequestPolicy]]:
    """A device's attributes and capacity (with request policies), names qualified by the driver."""
    attributes: dict[str, AttributeValue] = {}
    for name, value in r.mapping(body.get("attributes"), f"{bpath}.attributes").items():
        attributes[qualify(name, driver)] = _parse_attribute(r, value, f"{bpath}.attributes.{name}")
    capacity: dict[str, Quantity] = {}
    policies: dict[str, CapacityRequestPolicy] = {}
    for name, value in r.mapping(body.get("capacity"), f"{bpath}.capacity").items():
        cp = f"{bpath}.capacity.{name}"
        qualified = qualify(name, driver)
        if isinstance(value, Mapping):
            capacity[qualified] = _parse_quantity(r, value.get("value"), f"{cp}.value")
            if value.get("requestPolicy") is not None:
                policies[qualified] = _parse_request_policy(r, value.get("requestPolicy"), f"{cp}.requestPolicy", capacity[qualified])
        else:  # very old alpha shape: a bare quantity
            capacity[qualified] = _parse_quantity(r, value, cp)
    return attributes, capacity, policies


def _parse_device(
    r: _Reader,
    raw: Any,
    path: str,
    driver: str,
    default_time: str,
    previous: tuple[Any, Device] | None = None,
    encode: Callable[[Any], bytes] | None = None,
) -> Device:
    d = r.mapping(raw, path, required=True)
    digest = previous[0] if previous is not None and isinstance(previous[0], DeviceDigest) and encode is not None else None
    new_digest: DeviceDigest | None = None
    if digest is not None and encode is not None:
        try:
            new_digest = device_digest(d, encode)
        except TypeError:  # not JSON (cannot happen for an API object): parse it whole
            new_digest = None
        if new_digest is not None and new_digest.whole == digest.whole:
            return previous[1]  # type: ignore[index]  # the same device as last time: parsed once
    elif previous is not None and previous[0] == d:
        return previous[1]  # the same device as last time: parsed once
    if "basic" in d and d.get("basic") is not None:  # v1beta1
        body = r.mapping(d.get("basic"), f"{path}.basic")
        bpath = f"{path}.basic"
    else:
        body, bpath = d, path
    old_body = _device_body(previous[0]) if previous is not None and isinstance(previous[0], Mapping) else None
    if previous is not None and (
        (digest is not None and new_digest is not None and new_digest.contents == digest.contents)
        or (
            isinstance(old_body, Mapping)
            and old_body.get("attributes") == body.get("attributes")
            and old_body.get("capacity") == body.get("capacity")
        )
    ):
        # Only taints or node fields changed (the common driver update): keep the parsed
        # attributes and capacity, and with them the device's CEL identity.
        attributes, capacity = previous[1].attributes, previous[1].capacity
        policies = previous[1].capacity_policies
    else:
        attributes, capacity, policies = _parse_attributes_and_capacity(r, body, bpath, driver)
    taints_raw = r.seq(body.get("taints"), f"{bpath}.taints")
    if len(taints_raw) > DEVICE_TAINTS_MAX:
        raise r.fail(f"{bpath}.taints", f"must have at most {DEVICE_TAINTS_MAX} items")
    taints = tuple(parse_taint(r, t, f"{bpath}.taints[{i}]", default_time=default_time) for i, t in enumerate(taints_raw))
    node_selector = body.get("nodeSelector")
    allow_multiple = r.boolean(body.get("allowMultipleAllocations"), f"{bpath}.allowMultipleAllocations")
    if policies and not allow_multiple:
        raise r.fail(f"{bpath}.capacity.{next(iter(policies)).rpartition('/')[2]}.requestPolicy", "allowMultipleAllocations must be true")
    consumes = _parse_consumptions(r, body.get("consumesCounters"), f"{bpath}.consumesCounters")
    return Device(
        name=r.string(d.get("name"), f"{path}.name", required=True),
        attributes=attributes,
        capacity=capacity,
        taints=taints,
        node_name=r.string(body.get("nodeName"), f"{bpath}.nodeName") or None,
        node_selector=parse_node_selector(r, node_selector, f"{bpath}.nodeSelector") if node_selector else None,
        all_nodes=r.boolean(body.get("allNodes"), f"{bpath}.allNodes"),
        consumes_counters=consumes,
        allow_multiple_allocations=allow_multiple,
        capacity_policies=policies,
        binds_to_node=r.boolean(body.get("bindsToNode"), f"{bpath}.bindsToNode"),
        binding_conditions=_strings(r, body.get("bindingConditions"), f"{bpath}.bindingConditions"),
        binding_failure_conditions=_strings(r, body.get("bindingFailureConditions"), f"{bpath}.bindingFailureConditions"),
        refused=device_refusal(bpath, capacity, policies, consumes),
    )


def device_refusal(
    path: str, capacity: Mapping[str, Quantity], policies: Mapping[str, CapacityRequestPolicy], consumes: Sequence[CounterConsumption]
) -> str:
    """Why a device must never be allocated, naming the field; "" if it may be.

    A negative capacity, policy amount or counter consumption would make room
    for other allocations (the 1.36 API server accepts them and the in-tree
    allocator over-commits); a validRange.step not above zero has no rounding.
    Only the device is refused: the rest of its slice stays usable.
    """
    for name, q in capacity.items():
        short = name.rpartition("/")[2]
        if q.value < 0:
            return f"{path}.capacity.{short}.value: {q} is negative"
        policy = policies.get(name)
        if policy is None:
            continue
        ppath = f"{path}.capacity.{short}.requestPolicy"
        step = policy.valid_range_step
        if step is not None and step.value <= 0:
            return f"{ppath}.validRange.step: {step} must be greater than zero"
        named = [("default", policy.default), ("validRange.min", policy.valid_range_min), ("validRange.max", policy.valid_range_max)]
        named += [(f"validValues[{i}]", v) for i, v in enumerate(policy.valid_values)]
        for field_name, v in named:
            if v is not None and v.value < 0:
                return f"{ppath}.{field_name}: {v} is negative"
    for i, use in enumerate(consumes):
        for name, q in use.counters.items():
            if q.value < 0:
                return f"{path}.consumesCounters[{i}].counters.{name}.value: {q} is negative"
    return ""


def _parse_counters(r: _Reader, raw: Any, path: str, limit: int) -> dict[str, Quantity]:
    counters = r.mapping(raw, path)
    if len(counters) > limit:
        raise r.fail(path, f"must have at most {limit} counters")
    out: dict[str, Quantity] = {}
    for name, value in counters.items():
        c = r.mapping(value, f"{path}.{name}", required=True)
        out[str(name)] = _parse_quantity(r, c.get("value"), f"{path}.{name}.value")
    return out


def _parse_consumptions(r: _Reader, raw: Any, path: str) -> tuple[CounterConsumption, ...]:
    items = r.seq(raw, path)
    if len(items) > DEVICE_MAX_COUNTER_CONSUMPTIONS:
        raise r.fail(path, f"must have at most {DEVICE_MAX_COUNTER_CONSUMPTIONS} items")
    out = []
    for i, item in enumerate(items):
        ip = f"{path}[{i}]"
        m = r.mapping(item, ip, required=True)
        out.append(
            CounterConsumption(
                r.string(m.get("counterSet"), f"{ip}.counterSet", required=True),
                _parse_counters(r, m.get("counters"), f"{ip}.counters", DEVICE_MAX_COUNTERS_PER_CONSUMPTION),
            )
        )
    return tuple(out)


def _parse_shared_counters(r: _Reader, raw: Any, path: str) -> tuple[CounterSet, ...]:
    items = r.seq(raw, path)
    if len(items) > RESOURCE_SLICE_MAX_SHARED_COUNTERS:
        raise r.fail(path, f"must have at most {RESOURCE_SLICE_MAX_SHARED_COUNTERS} items")
    out = []
    for i, item in enumerate(items):
        ip = f"{path}[{i}]"
        m = r.mapping(item, ip, required=True)
        counters = _parse_counters(r, m.get("counters"), f"{ip}.counters", RESOURCE_SLICE_MAX_COUNTERS_PER_SET)
        if not counters:
            raise r.fail(f"{ip}.counters", "must have at least one counter")
        out.append(CounterSet(r.string(m.get("name"), f"{ip}.name", required=True), counters))
    return tuple(out)


def _parse_request_policy(r: _Reader, raw: Any, path: str, value: Quantity) -> CapacityRequestPolicy:
    """A capacity's requestPolicy, with the API server's checks (at most one of validValues, validRange)."""
    p = r.mapping(raw, path)
    default = _parse_quantity(r, p.get("default"), f"{path}.default") if p.get("default") is not None else None
    values_raw = r.seq(p.get("validValues"), f"{path}.validValues")
    range_raw = p.get("validRange")
    if values_raw and range_raw is not None:
        raise r.fail(path, "at most one of validValues, validRange may be set")
    if default is not None and default > value:
        raise r.fail(f"{path}.default", f"must not exceed the capacity's value {value}")
    if (values_raw or range_raw is not None) and default is None:
        raise r.fail(f"{path}.default", "required when validValues or validRange is defined")
    if values_raw:
        if len(values_raw) > CAPACITY_VALID_VALUES_MAX:
            raise r.fail(f"{path}.validValues", f"must have at most {CAPACITY_VALID_VALUES_MAX} items")
        values = tuple(_parse_quantity(r, v, f"{path}.validValues[{i}]") for i, v in enumerate(values_raw))
        if any(b <= a for a, b in itertools.pairwise(values)):
            raise r.fail(f"{path}.validValues", "must be sorted in ascending order without duplicates")
        if default is not None and default not in values:
            raise r.fail(f"{path}.default", "must be one of validValues")
        return CapacityRequestPolicy(default=default, valid_values=values)
    if range_raw is not None:
        vr = r.mapping(range_raw, f"{path}.validRange")
        if vr.get("min") is None:
            raise r.fail(f"{path}.validRange.min", "required")
        low = _parse_quantity(r, vr.get("min"), f"{path}.validRange.min")
        high = _parse_quantity(r, vr.get("max"), f"{path}.validRange.max") if vr.get("max") is not None else None
        # A step not above zero refuses the device only (device_refusal), not the whole slice.
        step = _parse_quantity(r, vr.get("step"), f"{path}.validRange.step") if vr.get("step") is not None else None
        if high is not None and high < low:
            raise r.fail(f"{path}.validRange.max", "must not be less than min")
        if default is not None and (default < low or (high is not None and default > high)):
            raise r.fail(f"{path}.default", "must lie within validRange")
        return CapacityRequestPolicy(default=default, valid_range_min=low, valid_range_max=high, valid_range_step=step)
    return CapacityRequestPolicy(default=default)


def _check_own_counter_sets(r: _Reader, shared_counters: Sequence[CounterSet], devices: Sequence[Device]) -> None:
    """Kubernetes 1.34's alpha shape: `sharedCounters` beside the devices, which consume only those sets.

    From 1.35 a slice holds one or the other and a device may consume any counter set of its pool; a
    slice with both is valid only as 1.34 validated it (a device naming a set of another slice there is
    neither version's shape).
    """
    sets = {cs.name: cs.counters for cs in shared_counters}
    for i, device in enumerate(devices):
        for j, use in enumerate(device.consumes_counters):
            path = f"spec.devices[{i}].consumesCounters[{j}]"
            counters = sets.get(use.counter_set)
            if counters is None:
                raise r.fail(
                    f"{path}.counterSet",
                    f"{use.counter_set}: must reference a counterSet defined in the ResourceSlice sharedCounters "
                    "(a slice with both sharedCounters and devices has Kubernetes 1.34's shape)",
                )
            for name in use.counters:
                if name not in counters:
                    raise r.fail(f"{path}.counters", f"{name}: must reference a counter defined in the ResourceSlice sharedCounters")


def _check_unique(r: _Reader, names: Sequence[str], path: str, what: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise r.fail(f"{path}[{i}].name", f"duplicate {what} {name!r}")
        seen.add(name)


def _check_node_choice(r: _Reader, choice: tuple[object, ...], per_device: Sequence[Device]) -> None:
    """Exactly one way to say which nodes reach the slice; with perDeviceNodeSelection, one per device."""
    if sum(bool(x) for x in choice) != 1:
        raise r.fail("spec", "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set")
    for i, d in enumerate(per_device):
        if sum(bool(x) for x in (d.node_name, d.node_selector, d.all_nodes)) != 1:
            raise r.fail(f"spec.devices[{i}]", "with perDeviceNodeSelection exactly one of nodeName, nodeSelector, allNodes must be set")


def parse_resource_slice(
    raw: Mapping[str, Any],
    *,
    default_time: str = "",
    previous: Mapping[str, tuple[Any, Device]] | None = None,
    encode: Callable[[Any], bytes] | None = None,
) -> ResourceSlice:
    """Parse a ResourceSlice (v1, v1beta2 or v1beta1); `default_time` fills missing taint timeAdded.

    `previous` (device name -> (raw device or its DeviceDigest, parsed device)
    of the slice's last version) lets an update re-parse only what changed;
    digests are compared with the new raw devices encoded by `encode`
    (canonical JSON: sorted keys).
    """
    r = _Reader(_object_ref("ResourceSlice", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec", required=True)
    driver = r.string(spec.get("driver"), "spec.driver", required=True)
    pool = r.mapping(spec.get("pool"), "spec.pool", required=True)
    prev = previous or {}
    devices = tuple(
        _parse_device(
            r, d, f"spec.devices[{i}]", driver, default_time, prev.get(d.get("name", "")) if isinstance(d, Mapping) else None, encode
        )
        for i, d in enumerate(r.seq(spec.get("devices"), "spec.devices"))
    )
    shared_counters = _parse_shared_counters(r, spec.get("sharedCounters"), "spec.sharedCounters")
    if shared_counters and devices:
        _check_own_counter_sets(r, shared_counters, devices)
    _check_unique(r, [cs.name for cs in shared_counters], "spec.sharedCounters", "counter set name")
    node_name = r.string(spec.get("nodeName"), "spec.nodeName") or None
    node_selector = spec.get("nodeSelector")
    all_nodes = r.boolean(spec.get("allNodes"), "spec.allNodes")
    per_device = r.boolean(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection")
    _check_node_choice(r, (node_name, node_selector, all_nodes, per_device), devices if per_device else ())
    _check_unique(r, [d.name for d in devices], "spec.devices", "device name")
    return ResourceSlice(
        meta=meta,
        driver=driver,
        pool=r.string(pool.get("name"), "spec.pool.name", required=True),
        generation=r.integer(pool.get("generation"), "spec.pool.generation", default=0) or 0,
        resource_slice_count=r.integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", default=1) or 1,
        devices=devices,
        node_name=node_name,
        node_selector=parse_node_selector(r, node_selector, "spec.nodeSelector") if node_selector else None,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        shared_counters=shared_counters,
    )
