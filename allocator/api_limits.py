"""The API server's structural checks that the allocator's parsers leave out.

The parse functions in `allocator/parse/` check shapes and types; the API
server also checks names and formats, and our CRDs
(`charts/dra-extender/crds/`) add schema and CEL rules. In `--source` mode
nothing else enforces them, so the manifest loader calls these, and an
object that a real cluster would refuse is refused here too, with its field.
The CRD test evaluates the CRD YAMLs on the same table of objects, so the
two stay in step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from allocator.parse import ValidationError
from allocator.rfc3339 import parse_rfc3339
from allocator.types import KNOWN_EFFECTS

# apimachinery/pkg/util/validation.
DNS1123_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME_PART: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")  # <= 63
LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
C_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Limits written into the CRDs (and upstream's where the CRD copies a type).
TAINT_KEY_MAX: Final = 253
TAINT_VALUE_MAX: Final = 63
RULE_SELECTORS_MAX: Final = 10
PATCH_SELECTORS_MAX: Final = 32
CEL_EXPRESSION_MAX: Final = 10 * 1024
PATCH_ENTRIES_MAX: Final = 32  # attributes + capacity, as a slice device
ATTRIBUTE_STRING_MAX: Final = 64
FQ_DOMAIN_MAX: Final = 63
FQ_NAME_MAX: Final = 32


def is_qualified_name(value: str) -> bool:
    """A label key: optional DNS-subdomain prefix and `/`, then a 63-character name."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return bool(QUALIFIED_NAME_PART.fullmatch(name))


def is_rfc3339(value: str) -> bool:
    return parse_rfc3339(value) is not None


def fully_qualified_problem(name: str) -> str | None:
    """Why `name` is not a device attribute/capacity name `domain/identifier` (None if it is)."""
    domain, slash, ident = name.partition("/")
    if not slash:
        return "must be fully qualified (domain/name)"
    if not domain or len(domain) > FQ_DOMAIN_MAX or not DNS1123_SUBDOMAIN.fullmatch(domain):
        return f"domain must be a DNS subdomain of at most {FQ_DOMAIN_MAX} characters"
    if not ident or len(ident) > FQ_NAME_MAX or not C_IDENTIFIER.fullmatch(ident):
        return f"name must be a C identifier of at most {FQ_NAME_MAX} characters"
    return None


def check_object_name(obj: str, kind_namespaced: bool, meta: Mapping[str, Any]) -> None:
    """metadata.name (DNS subdomain) and metadata.namespace (DNS label), as the API server checks them.

    A `/` in a name would also break `namespace/name` keys downstream.
    """
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError(obj, "metadata.name", "required field is missing")
    if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        raise ValidationError(obj, "metadata.name", "must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'), at most 253 characters")
    if kind_namespaced:
        ns = meta.get("namespace")
        if ns is not None and (not isinstance(ns, str) or len(ns) > 63 or not DNS1123_LABEL.fullmatch(ns)):
            raise ValidationError(obj, "metadata.namespace", "must be a lowercase DNS label, at most 63 characters")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _check_taint(obj: str, taint: Mapping[str, Any], path: str) -> None:
    key = taint.get("key")
    if isinstance(key, str):
        if len(key) > TAINT_KEY_MAX:
            raise ValidationError(obj, f"{path}.key", f"must be at most {TAINT_KEY_MAX} characters")
        if not is_qualified_name(key):
            raise ValidationError(obj, f"{path}.key", "must be a qualified name ([prefix/]name, e.g. example.com/broken)")
    value = taint.get("value")
    if isinstance(value, str):
        if len(value) > TAINT_VALUE_MAX:
            raise ValidationError(obj, f"{path}.value", f"must be at most {TAINT_VALUE_MAX} characters")
        if not LABEL_VALUE.fullmatch(value):
            raise ValidationError(obj, f"{path}.value", "must be a label value (alphanumerics, '-', '_', '.')")
    added = taint.get("timeAdded")
    if isinstance(added, str) and added and not is_rfc3339(added):
        raise ValidationError(obj, f"{path}.timeAdded", "must be an RFC 3339 date-time")


# Selector field -> maxLength, as in both CRDs (upstream's limits for these names).
SELECTOR_FIELD_MAX: Final = {"driver": 63, "pool": 253, "device": 63, "deviceClassName": 253}


def _check_selector_fields(obj: str, selector: Mapping[str, Any], path: str) -> None:
    for name, limit in SELECTOR_FIELD_MAX.items():
        value = selector.get(name)
        if isinstance(value, str) and len(value) > limit:
            raise ValidationError(obj, f"{path}.{name}", f"must be at most {limit} characters")


def _check_selectors(obj: str, raw: Any, path: str, limit: int) -> None:
    if not isinstance(raw, list):
        return
    if len(raw) > limit:
        raise ValidationError(obj, path, f"must have at most {limit} items")
    for i, s in enumerate(raw):
        expr = _mapping(_mapping(s).get("cel")).get("expression")
        if isinstance(expr, str) and len(expr) > CEL_EXPRESSION_MAX:
            raise ValidationError(obj, f"{path}[{i}].cel.expression", f"must be at most {CEL_EXPRESSION_MAX} characters")


def check_device_taint_rule(obj: str, raw: Mapping[str, Any], *, own_crd: bool) -> None:
    """The taint's key/value/time formats (both groups), plus our CRD's effect enum and selector limits."""
    spec = _mapping(raw.get("spec"))
    taint = _mapping(spec.get("taint"))
    _check_taint(obj, taint, "spec.taint")
    if own_crd:
        # Our CRD's enum (it ships with the extender that reads it); upstream's rules may carry newer effects.
        effect = taint.get("effect")
        if isinstance(effect, str) and effect not in KNOWN_EFFECTS:
            raise ValidationError(
                obj, "spec.taint.effect", f'Unsupported value: "{effect}": supported values: ' + ", ".join(f'"{e}"' for e in KNOWN_EFFECTS)
            )
        selector = _mapping(spec.get("deviceSelector"))
        _check_selector_fields(obj, selector, "spec.deviceSelector")
        _check_selectors(obj, selector.get("selectors"), "spec.deviceSelector.selectors", RULE_SELECTORS_MAX)


# The API server's own limits (apimachinery, resource.k8s.io validation): what a cluster
# would refuse must not load from a directory either, however large the file.
ANNOTATIONS_TOTAL_MAX: Final = 256 * 1024  # TotalAnnotationSizeLimitB
LABEL_VALUE_MAX: Final = 63
SLICE_DEVICES_MAX: Final = 128  # ResourceSliceMaxDevices
SLICE_DEVICES_MAX_ADVANCED: Final = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures: with taints or counters
DEVICE_ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice


def check_metadata_limits(obj: str, meta: Mapping[str, Any]) -> None:
    """Annotations at most 256 KiB in total (keys and values); label values at most 63 characters."""
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        total = sum(len(str(k)) + (len(v) if isinstance(v, str) else 0) for k, v in annotations.items())
        if total > ANNOTATIONS_TOTAL_MAX:
            raise ValidationError(obj, "metadata.annotations", f"may not be more than {ANNOTATIONS_TOTAL_MAX} bytes in total, got {total}")
    labels = meta.get("labels")
    if isinstance(labels, Mapping):
        for k, v in labels.items():
            if isinstance(v, str) and len(v) > LABEL_VALUE_MAX:
                raise ValidationError(obj, f"metadata.labels.{k}", f"must be at most {LABEL_VALUE_MAX} characters")


def check_slice_limits(obj: str, raw: Mapping[str, Any]) -> None:
    """Devices per slice, attributes and capacities per device, attribute string and version lengths."""
    devices = _mapping(raw.get("spec")).get("devices")
    if not isinstance(devices, list):
        return
    if len(devices) > SLICE_DEVICES_MAX:
        raise ValidationError(obj, "spec.devices", f"must have at most {SLICE_DEVICES_MAX} items, got {len(devices)}")
    advanced = any(
        isinstance(d, Mapping) and (_mapping(d.get("basic") or d).get("taints") or _mapping(d.get("basic") or d).get("consumesCounters"))
        for d in devices
    )
    if advanced and len(devices) > SLICE_DEVICES_MAX_ADVANCED:
        raise ValidationError(
            obj,
            "spec.devices",
            f"must have at most {SLICE_DEVICES_MAX_ADVANCED} items when devices have taints or consume counters, got {len(devices)}",
        )
    for i, d in enumerate(devices):
        d = _mapping(d)
        body, path = (
            (_mapping(d["basic"]), f"spec.devices[{i}].basic") if isinstance(d.get("basic"), Mapping) else (d, f"spec.devices[{i}]")
        )
        attributes = body.get("attributes")
        capacity = body.get("capacity")
        entries = (len(attributes) if isinstance(attributes, Mapping) else 0) + (len(capacity) if isinstance(capacity, Mapping) else 0)
        if entries > DEVICE_ATTRIBUTES_AND_CAPACITIES_MAX:
            raise ValidationError(
                obj, path, f"at most {DEVICE_ATTRIBUTES_AND_CAPACITIES_MAX} attributes and capacities combined, got {entries}"
            )
        if not isinstance(attributes, Mapping):
            continue
        for name, value in attributes.items():
            value = _mapping(value)
            for k in ("string", "version"):
                v = value.get(k)
                if isinstance(v, str) and len(v) > ATTRIBUTE_STRING_MAX:
                    raise ValidationError(
                        obj, f"{path}.attributes.{name}.{k}", f"must be at most {ATTRIBUTE_STRING_MAX} characters, got {len(v)}"
                    )


def check_slice_taints(obj: str, raw: Mapping[str, Any]) -> None:
    """Driver taints in a slice follow the same key/value rules as rule taints."""
    devices = _mapping(raw.get("spec")).get("devices")
    if not isinstance(devices, list):
        return
    for i, d in enumerate(devices):
        d = _mapping(d)
        body, path = (
            (_mapping(d["basic"]), f"spec.devices[{i}].basic") if isinstance(d.get("basic"), Mapping) else (d, f"spec.devices[{i}]")
        )
        taints = body.get("taints")
        if isinstance(taints, list):
            for j, t in enumerate(taints):
                _check_taint(obj, _mapping(t), f"{path}.taints[{j}]")


def check_resource_slice_patch(obj: str, raw: Mapping[str, Any]) -> None:
    """The ResourceSlicePatch CRD's rules: names, one value per attribute, sizes."""
    devices = _mapping(_mapping(raw.get("spec")).get("devices"))
    patch_filter = _mapping(devices.get("filter"))
    _check_selector_fields(obj, patch_filter, "spec.devices.filter")
    _check_selectors(obj, patch_filter.get("selectors"), "spec.devices.filter.selectors", PATCH_SELECTORS_MAX)
    attributes = devices.get("attributes")
    capacity = devices.get("capacity")
    entries = 0
    if isinstance(attributes, Mapping):
        entries += len(attributes)
        for name, value in attributes.items():
            path = f"spec.devices.attributes.{name}"
            problem = fully_qualified_problem(str(name))
            if problem:
                raise ValidationError(obj, path, problem)
            value = _mapping(value)
            set_fields = [k for k in ("int", "bool", "string", "version", "null") if value.get(k) is not None]
            if len(set_fields) != 1:
                raise ValidationError(obj, path, "exactly one of int, bool, string, version, null must be set")
            for k in ("string", "version"):
                v = value.get(k)
                if isinstance(v, str) and len(v) > ATTRIBUTE_STRING_MAX:
                    raise ValidationError(obj, f"{path}.{k}", f"must be at most {ATTRIBUTE_STRING_MAX} characters")
            if "null" in value and (not isinstance(value["null"], Mapping) or value["null"]):
                raise ValidationError(obj, f"{path}.null", "must be an empty object ({})")
    if isinstance(capacity, Mapping):
        entries += len(capacity)
        for name, value in capacity.items():
            path = f"spec.devices.capacity.{name}"
            problem = fully_qualified_problem(str(name))
            if problem:
                raise ValidationError(obj, path, problem)
            if not isinstance(value, Mapping) or value.get("value") is None:
                raise ValidationError(obj, f"{path}.value", "required field is missing")
    if entries > PATCH_ENTRIES_MAX:
        raise ValidationError(obj, "spec.devices", f"at most {PATCH_ENTRIES_MAX} attributes and capacities combined")
