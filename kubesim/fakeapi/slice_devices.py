"""A ResourceSlice device as a 1.36 API server validates it (resource.k8s.io v1 limits and validation rules).

Written from the API's published rules, not from the extender's parser, so
the fake can accept what the extender refuses (and the reverse) exactly
where a real cluster would. Field paths are the API server's: map entries
as `capacity[memory]`, list items as `taints[0]`. The per-device rules are
here; the slice as a whole is `kubesim/fakeapi/resource_slices.py`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kubesim.fakeapi import field_errors as fe
from kubesim.fakeapi import names
from kubesim.fakeapi.quantity import QuantityError, quantity, show

# Limits of resource.k8s.io/v1 (the API's type definitions).
ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32
ATTRIBUTE_VALUE_MAX: Final = 64
DOMAIN_MAX: Final = 63
IDENTIFIER_MAX: Final = 32
TAINTS_MAX: Final = 16
CONSUMPTIONS_MAX: Final = 2
COUNTERS_PER_CONSUMPTION_MAX: Final = 32
VALID_VALUES_MAX: Final = 10
BINDING_CONDITIONS_MAX: Final = 4
TAINT_EFFECTS: Final = ("NoExecute", "NoSchedule", "None")
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# Fields of alpha features, off by default in 1.36: the server drops them before validating.
DROPPED_DEVICE_FIELDS: Final = ("nodeAllocatableResourceMappings",)
DROPPED_ATTRIBUTE_FIELDS: Final = ("bools", "ints", "strings", "versions")

Errors = list[fe.FieldError]


class DecodeError(ValueError):
    """The body does not decode into the API's types: the server answers 400, before any validation."""


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DecodeError(f"{path}: expected an object")
    return value


def items(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(f"{path}: expected a list")
    return value


def amount(value: Any, path: str) -> Fraction:
    try:
        return quantity(value)
    except QuantityError as e:
        raise DecodeError(f"{path}: {e}") from None


def whole(value: Any, path: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(f"{path}: expected an integer")
    return value


def integer_value(q: Fraction) -> int:
    """A quantity as the API server's integer view of it: rounded up, away from zero."""
    return math.ceil(q) if q >= 0 else math.floor(q)


def qualified_name(name: str, path: str) -> Errors:
    """An attribute or capacity name: a C identifier, optionally after a driver-like domain and `/`."""
    domain, slash, ident = name.partition("/")
    if not slash:
        domain, ident = "", name
    out: Errors = []
    if slash and not domain:
        out.append(fe.invalid(path, "", "the domain must not be empty"))
    elif slash:
        out += driver_name(domain, path)
    if slash and not ident:
        out.append(fe.invalid(path, "", "the name must not be empty"))
        return out
    if len(ident) > IDENTIFIER_MAX:
        out.append(fe.too_long(path, IDENTIFIER_MAX))
    out += [fe.invalid(path, ident, m) for m in names.c_identifier(ident)]
    return out


def driver_name(name: str, path: str) -> Errors:
    """A driver (or attribute domain) name: at most 63 characters, a DNS subdomain ignoring case."""
    if not name:
        return [fe.required(path)]
    out = [fe.too_long(path, DOMAIN_MAX)] if len(name) > DOMAIN_MAX else []
    return out + [fe.invalid(path, name, m) for m in names.dns_subdomain(name.lower())]


def attribute(raw: Any, path: str) -> Errors:
    value = mapping(raw, path)
    for dropped in DROPPED_ATTRIBUTE_FIELDS:
        if dropped in value and isinstance(raw, dict):
            raw.pop(dropped)
    kinds = [k for k in ("bool", "int", "string", "version") if value.get(k) is not None]
    out: Errors = []
    for k in ("string", "version"):
        text = value.get(k)
        if text is None:
            continue
        if not isinstance(text, str):
            raise DecodeError(f"{path}.{k}: expected a string")
        if k == "version" and not names.SEMVER.match(text):
            out.append(fe.invalid(f"{path}.version", text, "must be a string compatible with semver.org spec 2.0.0"))
        if len(text) > ATTRIBUTE_VALUE_MAX:
            out.append(fe.too_long(f"{path}.{k}", ATTRIBUTE_VALUE_MAX))
    if len(kinds) != 1:
        out.append(fe.invalid(path, "" if not kinds else dict(value), "exactly one value must be specified"))
    return out


def capacity(raw: Any, path: str, multiple: bool) -> Errors:
    entry = mapping(raw, path)
    value = amount(entry.get("value"), f"{path}.value")
    policy = entry.get("requestPolicy")
    if policy is None:
        return []
    if not multiple:
        return [fe.forbidden(f"{path}.requestPolicy", "allowMultipleAllocations must be true")]
    return request_policy(mapping(policy, f"{path}.requestPolicy"), value, f"{path}.requestPolicy")


def request_policy(policy: Mapping[str, Any], cap: Fraction, path: str) -> Errors:
    valid_values = items(policy.get("validValues"), f"{path}.validValues")
    valid_range = policy.get("validRange")
    default = amount(policy["default"], f"{path}.default") if policy.get("default") is not None else None
    if valid_values and valid_range is not None:
        return [fe.forbidden(path, 'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time')]
    if not valid_values and valid_range is None:
        return []
    if default is None:
        which = "validValues" if valid_values else "validRange"
        return [fe.required(f"{path}.default", f"required when {which} is defined")]
    if valid_values:
        return valid_value_list([amount(v, f"{path}.validValues[{i}]") for i, v in enumerate(valid_values)], default, cap, path)
    return value_range(mapping(valid_range, f"{path}.validRange"), default, cap, f"{path}.validRange")


def valid_value_list(values: list[Fraction], default: Fraction, cap: Fraction, path: str) -> Errors:
    vpath = f"{path}.validValues"
    out = [
        fe.invalid(f"{vpath}[{i + 1}]", show(b), "values must be sorted in ascending order")
        for i, (a, b) in enumerate(itertools.pairwise(values))
        if a > b
    ]
    if len(values) > VALID_VALUES_MAX:
        return [*out, fe.too_many(vpath, len(values), VALID_VALUES_MAX)]
    seen: set[int] = set()
    for i, v in enumerate(values):
        if v > cap:
            out.append(fe.invalid(f"{vpath}[{i}]", show(v), f"option is larger than capacity value: {show(cap)}"))
        if integer_value(v) in seen:
            out.append(fe.duplicate(f"{vpath}[{i}]", show(v)))
        seen.add(integer_value(v))
    if default not in values:
        out.append(fe.invalid(vpath, show(default), "default value is not valid according to the requestPolicy"))
    return out


def value_range(r: Mapping[str, Any], default: Fraction, cap: Fraction, path: str) -> Errors:
    if r.get("min") is None:
        return [fe.required(f"{path}.min", "required when validRange is defined")]
    low = amount(r["min"], f"{path}.min")
    high = amount(r["max"], f"{path}.max") if r.get("max") is not None else None
    out: Errors = []
    if low > cap:
        out.append(fe.invalid(f"{path}.min", show(low), f"min is larger than capacity value: {show(cap)}"))
    if default < low:
        out.append(fe.invalid(f"{path}.min", show(default), f"default is less than min: {show(low)}"))
    if high is not None:
        if low > high:
            out.append(fe.invalid(f"{path}.max", show(low), f"min is larger than max: {show(high)}"))
        if high > cap:
            out.append(fe.invalid(f"{path}.max", show(high), f"max is larger than capacity value: {show(cap)}"))
        if default > high:
            out.append(fe.invalid(f"{path}.max", show(default), f"default is more than max: {show(high)}"))
    if r.get("step") is not None:
        out += range_step(amount(r["step"], f"{path}.step"), low, high, default, cap, f"{path}.step")
    return out


def range_step(step: Fraction, low: Fraction, high: Fraction | None, default: Fraction, cap: Fraction, path: str) -> Errors:
    """One step from min stays within the capacity; default and max are whole steps from min (integer views)."""
    out: Errors = []
    if low + step > cap:
        out.append(fe.invalid(path, show(step), f"one step {show(low + step)} is larger than capacity value: {show(cap)}"))
    stride = integer_value(step)
    if stride == 0:
        # The 1.36 server divides by the step here and fails the request; the fake names the field instead.
        return [*out, fe.invalid(path, show(step), "must not be zero")]
    for v in (default, high):
        if v is not None and _go_remainder(integer_value(v) - integer_value(low), stride) != 0:
            out.append(fe.invalid(path, show(v), f"value is not a multiple of a given step ({show(step)}) from ({show(low)})"))
    return out


def _go_remainder(a: int, b: int) -> int:
    """Truncated remainder (the sign of `a`), as Go's `%`."""
    return int(math.fmod(a, b)) if abs(a) < 2**52 else a - b * int(a / b)


def counters(raw: Any, path: str, limit: int) -> Errors:
    entries = mapping(raw, path)
    if not entries:
        return [fe.required(path)]
    if len(entries) > limit:
        return [fe.too_many(path, len(entries), limit)]
    out: Errors = []
    for name, counter in entries.items():
        out += [fe.invalid(path, name, m) for m in names.dns_label(str(name))]
        amount(mapping(counter, f"{path}[{name}]").get("value"), f"{path}[{name}].value")
    return out


def counter_consumptions(raw: Any, path: str) -> Errors:
    uses = items(raw, path)
    if len(uses) > CONSUMPTIONS_MAX:
        return [fe.too_many(path, len(uses), CONSUMPTIONS_MAX)]
    out: Errors = []
    seen: set[str] = set()
    for i, use in enumerate(uses):
        upath = f"{path}[{i}]"
        entry = mapping(use, upath)
        counter_set = str(entry.get("counterSet") or "")
        if not counter_set:
            out.append(fe.required(f"{upath}.counterSet"))
        out += [fe.invalid(f"{upath}.counterSet", counter_set, m) for m in (names.dns_label(counter_set) if counter_set else [])]
        out += counters(entry.get("counters"), f"{upath}.counters", COUNTERS_PER_CONSUMPTION_MAX)
        if counter_set in seen:
            out.append(fe.duplicate(upath, counter_set))
        seen.add(counter_set)
    return out


def taint(raw: Any, path: str) -> Errors:
    entry = mapping(raw, path)
    key = str(entry.get("key") or "")
    out = [fe.invalid(f"{path}.key", key, m) for m in names.label_key(key)] if key else [fe.required(f"{path}.key")]
    value = str(entry.get("value") or "")
    out += [fe.invalid(f"{path}.value", value, m) for m in names.label_value(value)]
    added = entry.get("timeAdded")
    if added is not None and not (isinstance(added, str) and names.RFC3339.match(added)):
        raise DecodeError(f"{path}.timeAdded: expected an RFC 3339 time")
    effect = str(entry.get("effect") or "")
    if not effect:
        out.append(fe.required(f"{path}.effect"))
    elif effect not in TAINT_EFFECTS:
        out.append(fe.not_supported(f"{path}.effect", effect, list(TAINT_EFFECTS)))
    return out


def binding_conditions(device: Mapping[str, Any], path: str) -> Errors:
    ready = [str(c) for c in items(device.get("bindingConditions"), f"{path}.bindingConditions")]
    failed = [str(c) for c in items(device.get("bindingFailureConditions"), f"{path}.bindingFailureConditions")]
    out: Errors = []
    for field, conditions in (("bindingConditions", ready), ("bindingFailureConditions", failed)):
        if len(conditions) > BINDING_CONDITIONS_MAX:
            out.append(fe.too_many(f"{path}.{field}", len(conditions), BINDING_CONDITIONS_MAX))
            continue
        for i, c in enumerate(conditions):
            out += [fe.invalid(f"{path}.{field}[{i}]", c, m) for m in names.label_key(c)]
            if c in conditions[:i]:
                out.append(fe.duplicate(f"{path}.{field}[{i}]", c))
            if field == "bindingFailureConditions" and c in ready:
                out.append(fe.invalid(f"{path}.{field}[{i}]", c, "bindingFailureConditions must not overlap with bindingConditions"))
    if ready and not failed:
        out.append(fe.invalid(f"{path}.bindingFailureConditions", [], "bindingFailureConditions are required to use bindingConditions"))
    if failed and not ready:
        out.append(fe.invalid(f"{path}.bindingConditions", [], "bindingConditions are required to use bindingFailureConditions"))
    return out


def node_selector(raw: Any, path: str) -> Errors:
    terms = items(mapping(raw, path).get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    if not terms:
        return [fe.required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")]
    out: Errors = []
    for i, term in enumerate(terms):
        tpath = f"{path}.nodeSelectorTerms[{i}]"
        for j, req in enumerate(items(mapping(term, tpath).get("matchExpressions"), f"{tpath}.matchExpressions")):
            out += selector_requirement(mapping(req, f"{tpath}.matchExpressions[{j}]"), f"{tpath}.matchExpressions[{j}]")
        for j, req in enumerate(items(mapping(term, tpath).get("matchFields"), f"{tpath}.matchFields")):
            out += field_requirement(mapping(req, f"{tpath}.matchFields[{j}]"), f"{tpath}.matchFields[{j}]")
    return out


def selector_requirement(req: Mapping[str, Any], path: str) -> Errors:
    op, values = str(req.get("operator") or ""), [str(v) for v in items(req.get("values"), f"{path}.values")]
    out: Errors = []
    if op in ("In", "NotIn") and not values:
        out.append(fe.required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        out.append(fe.forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt") and len(values) != 1:
        out.append(fe.required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    elif op not in SELECTOR_OPERATORS:
        out.append(fe.invalid(f"{path}.operator", op, "not a valid selector operator"))
    key = str(req.get("key") or "")
    out += [fe.invalid(f"{path}.key", key, m) for m in names.label_key(key)]
    for i, v in enumerate(values):
        out += [fe.invalid(f"{path}.values[{i}]", v, m) for m in names.label_value(v)]
    return out


def field_requirement(req: Mapping[str, Any], path: str) -> Errors:
    op, values = str(req.get("operator") or ""), [str(v) for v in items(req.get("values"), f"{path}.values")]
    out: Errors = []
    if op not in ("In", "NotIn"):
        out.append(fe.invalid(f"{path}.operator", op, "not a valid selector operator"))
    elif len(values) != 1:
        out.append(fe.required(f"{path}.values", "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
    if req.get("key") != "metadata.name":
        out.append(fe.invalid(f"{path}.key", str(req.get("key") or ""), "not a valid field selector key"))
    return out
