"""API JSON -> the value types of allocator.types.

Parsing accepts `resource.k8s.io` v1 and v1beta2 (same shape) and converts
v1beta1 (devices wrapped in `basic`, requests without `exactly`). Errors
(`ValidationError`) name the object and the field path, so a bad manifest or
API object can be reported precisely. Attribute and capacity names are
normalised to fully qualified names, as upstream does.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from allocator.pod_volumes import volume_claims, volume_tolerations
from allocator.quantity import Quantity, QuantityError, parse_quantity
from allocator.semver import SemverError, parse_semver
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    CAPACITY_VALID_VALUES_MAX,
    DEVICE_MAX_COUNTER_CONSUMPTIONS,
    DEVICE_MAX_COUNTERS_PER_CONSUMPTION,
    DEVICE_TAINTS_MAX,
    MODE_ALL,
    MODE_EXACT_COUNT,
    REMOVE,
    RESOURCE_SLICE_MAX_COUNTERS_PER_SET,
    RESOURCE_SLICE_MAX_SHARED_COUNTERS,
    TOLERATIONS_ANNOTATION,
    AllocatedConfig,
    AllocationResult,
    AttributeValue,
    CapacityRequestPolicy,
    ContainerResources,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceConfig,
    DeviceConstraint,
    DevicePatchFilter,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceTaint,
    DeviceTaintRule,
    DeviceTaintSelector,
    DeviceToleration,
    ExactRequest,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    OpaqueConfig,
    Pod,
    PodResourceClaim,
    ReservedFor,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    ResourceSlicePatch,
    qualify,
)


class ValidationError(ValueError):
    """An API object that does not have the shape the API defines.

    `obj` is `Kind namespace/name` (or `Kind name`), `field` a JSON path such
    as `spec.devices[2].attributes.model`.
    """

    def __init__(self, obj: str, field_path: str, message: str) -> None:
        self.obj = obj
        self.field = field_path
        self.reason = message
        super().__init__(f"{obj}: {field_path}: {message}" if field_path else f"{obj}: {message}")


class _Reader:
    """Walks one object's JSON, remembering the path for error messages."""

    __slots__ = ("obj",)

    def __init__(self, obj: str) -> None:
        self.obj = obj

    def fail(self, path: str, message: str) -> ValidationError:
        return ValidationError(self.obj, path, message)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {_json_type(value)}")
        return value

    def seq(self, value: Any, path: str, *, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {_json_type(value)}")
        return value

    def string(self, value: Any, path: str, *, required: bool = False, default: str = "") -> str:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return default
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, not {_json_type(value)}")
        if required and not value:
            raise self.fail(path, "must not be empty")
        return value

    @overload
    def integer(self, value: Any, path: str, *, default: int) -> int: ...

    @overload
    def integer(self, value: Any, path: str, *, default: None = None) -> int | None: ...

    def integer(self, value: Any, path: str, *, default: int | None = None) -> int | None:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {_json_type(value)}")
        return value

    def boolean(self, value: Any, path: str, *, default: bool = False) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(path, f"must be a boolean, not {_json_type(value)}")
        return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


# --------------------------------------------------------------------------- metadata


def _object_ref(kind: str, raw: Any) -> str:
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"{kind} <unnamed>"
    name = meta.get("name") if isinstance(meta.get("name"), str) else "<unnamed>"
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if isinstance(ns, str) and ns else f"{kind} {name}"


def parse_meta(r: _Reader, raw: Mapping[str, Any], *, namespaced: bool) -> ObjectMeta:
    meta = r.mapping(raw.get("metadata"), "metadata", required=True)
    labels = r.mapping(meta.get("labels"), "metadata.labels")
    annotations = r.mapping(meta.get("annotations"), "metadata.annotations")
    for k, v in labels.items():
        if not isinstance(v, str):
            raise r.fail(f"metadata.labels.{k}", "must be a string")
    for k, v in annotations.items():
        if not isinstance(v, str):
            raise r.fail(f"metadata.annotations.{k}", "must be a string")
    finalizers = tuple(r.string(f, f"metadata.finalizers[{i}]") for i, f in enumerate(r.seq(meta.get("finalizers"), "metadata.finalizers")))
    rv = meta.get("resourceVersion")
    return ObjectMeta(
        name=r.string(meta.get("name"), "metadata.name", required=True),
        namespace=r.string(meta.get("namespace"), "metadata.namespace", default="default" if namespaced else "") if namespaced else "",
        uid=r.string(meta.get("uid"), "metadata.uid"),
        resource_version=str(rv) if rv is not None else "",
        generation=r.integer(meta.get("generation"), "metadata.generation", default=0) or 0,
        creation_timestamp=r.string(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        labels=dict(labels),
        annotations=dict(annotations),
        finalizers=finalizers,
        deletion_timestamp=r.string(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
    )


# --------------------------------------------------------------------------- node selection


_NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def parse_node_selector(r: _Reader, raw: Any, path: str) -> NodeSelector:
    sel = r.mapping(raw, path)
    terms = []
    for i, t in enumerate(r.seq(sel.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")):
        tp = f"{path}.nodeSelectorTerms[{i}]"
        term = r.mapping(t, tp)

        def reqs(kind: str, term: Mapping[str, Any] = term, tp: str = tp) -> tuple[NodeSelectorRequirement, ...]:
            out = []
            for j, q in enumerate(r.seq(term.get(kind), f"{tp}.{kind}")):
                qp = f"{tp}.{kind}[{j}]"
                q = r.mapping(q, qp)
                op = r.string(q.get("operator"), f"{qp}.operator", required=True)
                if op not in _NODE_SELECTOR_OPERATORS:
                    raise r.fail(f"{qp}.operator", f"unsupported operator {op!r}")
                values = tuple(r.string(v, f"{qp}.values[{k}]") for k, v in enumerate(r.seq(q.get("values"), f"{qp}.values")))
                out.append(NodeSelectorRequirement(r.string(q.get("key"), f"{qp}.key", required=True), op, values))
            return tuple(out)

        terms.append(NodeSelectorTerm(reqs("matchExpressions"), reqs("matchFields")))
    return NodeSelector(tuple(terms))


def parse_node(raw: Mapping[str, Any]) -> Node:
    r = _Reader(_object_ref("Node", raw))
    meta = parse_meta(r, r.mapping(raw, "", required=True), namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec")
    status = r.mapping(raw.get("status"), "status")
    allocatable = {
        name: _parse_quantity(r, value, f"status.allocatable.{name}")
        for name, value in r.mapping(status.get("allocatable"), "status.allocatable").items()
        if "/" in name  # only extended resources matter here
    }
    return Node(meta.name, meta.labels, meta.uid, r.boolean(spec.get("unschedulable"), "spec.unschedulable"), allocatable)


# --------------------------------------------------------------------------- taints and tolerations


def parse_taint(r: _Reader, raw: Any, path: str, *, default_time: str = "") -> DeviceTaint:
    t = r.mapping(raw, path, required=True)
    return DeviceTaint(
        key=r.string(t.get("key"), f"{path}.key", required=True),
        # Unknown effects load (newer API versions may add some) and act like None.
        effect=r.string(t.get("effect"), f"{path}.effect", required=True),
        value=r.string(t.get("value"), f"{path}.value"),
        time_added=r.string(t.get("timeAdded"), f"{path}.timeAdded") or default_time,
    )


def parse_toleration(r: _Reader, raw: Any, path: str) -> DeviceToleration:
    t = r.mapping(raw, path, required=True)
    return DeviceToleration(
        key=r.string(t.get("key"), f"{path}.key"),
        # The API server defaults an empty operator to Equal.
        operator=r.string(t.get("operator"), f"{path}.operator") or "Equal",
        value=r.string(t.get("value"), f"{path}.value"),
        effect=r.string(t.get("effect"), f"{path}.effect"),
        toleration_seconds=r.integer(t.get("tolerationSeconds"), f"{path}.tolerationSeconds"),
    )


def parse_tolerations(r: _Reader, raw: Any, path: str) -> tuple[DeviceToleration, ...]:
    return tuple(parse_toleration(r, t, f"{path}[{i}]") for i, t in enumerate(r.seq(raw, path)))


# --------------------------------------------------------------------------- ResourceSlice


def _parse_attribute(r: _Reader, raw: Any, path: str) -> AttributeValue:
    a = r.mapping(raw, path, required=True)
    kinds = [k for k in ("int", "bool", "string", "version") if a.get(k) is not None]
    if len(kinds) != 1:
        raise r.fail(path, "exactly one of int, bool, string, version must be set")
    kind = kinds[0]
    value = a[kind]
    if kind == "int":
        return r.integer(value, f"{path}.int", default=0)  # value is set: the default is never used
    if kind == "bool":
        return r.boolean(value, f"{path}.bool")
    if kind == "string":
        text = r.string(value, f"{path}.string")
        # Devices repeat their string values (a model, a firmware revision) across the cluster: one copy each.
        return sys.intern(text) if len(text) <= _INTERN_MAX else text
    try:
        return parse_semver(r.string(value, f"{path}.version"))
    except SemverError as e:
        raise r.fail(f"{path}.version", str(e)) from None


_INTERN_MAX = 64  # longer strings are rarely shared (descriptions, serials)


@functools.lru_cache(maxsize=4096)
def _cached_quantity(raw: str) -> Quantity:
    return parse_quantity(raw)


def _parse_quantity(r: _Reader, raw: Any, path: str) -> Quantity:
    try:
        # Slices repeat the same few quantities thousands of times ("10Gi"): parse each string once.
        return _cached_quantity(raw) if type(raw) is str else parse_quantity(raw)
    except QuantityError as e:
        raise r.fail(path, str(e)) from None


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


def _strings(r: _Reader, raw: Any, path: str) -> tuple[str, ...]:
    return tuple(r.string(x, f"{path}[{i}]", required=True) for i, x in enumerate(r.seq(raw, path)))


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
        raise r.fail("spec", "only one of sharedCounters or devices is allowed")
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


# --------------------------------------------------------------------------- DeviceClass


def _parse_selectors(r: _Reader, raw: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(r.seq(raw, path)):
        s = r.mapping(s, f"{path}[{i}]")
        cel = r.mapping(s.get("cel"), f"{path}[{i}].cel", required=True)
        out.append(r.string(cel.get("expression"), f"{path}[{i}].cel.expression", required=True))
    return tuple(out)


def _parse_config(r: _Reader, raw: Any, path: str, *, with_requests: bool) -> tuple[DeviceConfig, ...]:
    out = []
    for i, c in enumerate(r.seq(raw, path)):
        cp = f"{path}[{i}]"
        c = r.mapping(c, cp)
        opaque = None
        if c.get("opaque") is not None:
            o = r.mapping(c.get("opaque"), f"{cp}.opaque")
            opaque = OpaqueConfig(r.string(o.get("driver"), f"{cp}.opaque.driver", required=True), o.get("parameters"))
        requests: tuple[str, ...] = ()
        if with_requests:
            requests = tuple(r.string(x, f"{cp}.requests[{j}]") for j, x in enumerate(r.seq(c.get("requests"), f"{cp}.requests")))
        out.append(DeviceConfig(opaque, requests))
    return tuple(out)


def parse_device_class(raw: Mapping[str, Any]) -> DeviceClass:
    r = _Reader(_object_ref("DeviceClass", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec")
    return DeviceClass(
        meta,
        _parse_selectors(r, spec.get("selectors"), "spec.selectors"),
        _parse_config(r, spec.get("config"), "spec.config", with_requests=False),
        r.string(spec.get("extendedResourceName"), "spec.extendedResourceName"),
    )


# --------------------------------------------------------------------------- ResourceClaim


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


# --------------------------------------------------------------------------- Pod


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
    tolerations, tolerations_problem = volume_tolerations(meta.annotations)
    return Pod(
        meta,
        tuple(claims),
        statuses,
        r.string(spec.get("nodeName"), "spec.nodeName"),
        r.string(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        r.string(status.get("phase"), "status.phase"),
        tuple(containers) if any(c.extended for c in containers) else (),
        r.string(extended.get("resourceClaimName"), "status.extendedResourceClaimStatus.resourceClaimName") or None,
        volume_claims(spec.get("volumes"), meta.name),
        tolerations,
        tolerations_problem,
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


# --------------------------------------------------------------------------- DeviceTaintRule


def parse_device_taint_rule(raw: Mapping[str, Any], *, group: str, default_time: str = "") -> DeviceTaintRule:
    r = _Reader(_object_ref("DeviceTaintRule", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec", required=True)
    selector = None
    if spec.get("deviceSelector") is not None:
        s = r.mapping(spec.get("deviceSelector"), "spec.deviceSelector")
        selector = DeviceTaintSelector(
            driver=r.string(s.get("driver"), "spec.deviceSelector.driver") or None,
            pool=r.string(s.get("pool"), "spec.deviceSelector.pool") or None,
            device=r.string(s.get("device"), "spec.deviceSelector.device") or None,
            device_class_name=r.string(s.get("deviceClassName"), "spec.deviceSelector.deviceClassName") or None,
            selectors=_parse_selectors(r, s.get("selectors"), "spec.deviceSelector.selectors"),
        )
    taint_raw = r.mapping(spec.get("taint"), "spec.taint", required=True)
    taint = parse_taint(r, taint_raw, "spec.taint", default_time=default_time or meta.creation_timestamp)
    eps = taint_raw.get("evictionsPerSecond")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, int | float) or eps <= 0):
        raise r.fail("spec.taint.evictionsPerSecond", "must be a positive number")
    return DeviceTaintRule(meta, group, selector, taint, float(eps) if eps is not None else None)


# --------------------------------------------------------------------------- ResourceSlicePatch


def parse_resource_slice_patch(raw: Mapping[str, Any]) -> ResourceSlicePatch:
    r = _Reader(_object_ref("ResourceSlicePatch", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec", required=True)
    devices = r.mapping(spec.get("devices"), "spec.devices", required=True)
    f = r.mapping(devices.get("filter"), "spec.devices.filter")
    patch_filter = DevicePatchFilter(
        device_class_name=r.string(f.get("deviceClassName"), "spec.devices.filter.deviceClassName") or None,
        driver=r.string(f.get("driver"), "spec.devices.filter.driver") or None,
        pool=r.string(f.get("pool"), "spec.devices.filter.pool") or None,
        device=r.string(f.get("device"), "spec.devices.filter.device") or None,
        selectors=_parse_selectors(r, f.get("selectors"), "spec.devices.filter.selectors"),
    )
    attributes: dict[str, AttributeValue | object] = {}
    for name, value in r.mapping(devices.get("attributes"), "spec.devices.attributes").items():
        ap = f"spec.devices.attributes.{name}"
        if "/" not in name:
            raise r.fail(ap, "attribute names must be fully qualified (domain/name)")
        v = r.mapping(value, ap, required=True)
        if "null" in v:
            if len(v) != 1:
                raise r.fail(ap, "null must not be combined with a value")
            attributes[name] = REMOVE
        else:
            attributes[name] = _parse_attribute(r, v, ap)
    capacity: dict[str, Quantity] = {}
    for name, value in r.mapping(devices.get("capacity"), "spec.devices.capacity").items():
        cp = f"spec.devices.capacity.{name}"
        if "/" not in name:
            raise r.fail(cp, "capacity names must be fully qualified (domain/name)")
        capacity[name] = _parse_quantity(r, r.mapping(value, cp, required=True).get("value"), f"{cp}.value")
        if capacity[name].value < 0:
            raise r.fail(f"{cp}.value", "must not be negative (it would make room on a shared device)")
    return ResourceSlicePatch(
        meta,
        patch_filter,
        r.integer(devices.get("priority"), "spec.devices.priority", default=0) or 0,
        attributes,
        capacity,
    )
