"""ResourceSlice validation as a Kubernetes 1.36 API server applies it, independent of the extender's parser.

The fake once validated slices with the extender's own parser, so no test
could see the two disagree. These rules are written from the API (the
resource.k8s.io/v1 type limits and the API server's validation of slices),
with 1.36's default feature gates: the fields of alpha features (list-typed
attributes, node-allocatable resource mappings) are dropped before
validation as the real server drops them. A body that does not decode (a
quantity that is not one, a string where a list belongs) answers 400; a
rule that fails answers 422 with every failing field, named as the real
server names it. One deliberate difference: a `validRange.step` of zero,
which makes the 1.36 server fail the request while dividing by it, is
refused as an invalid field. The device rules are in `slice_devices.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubesim.fakeapi import field_errors as fe
from kubesim.fakeapi import names
from kubesim.fakeapi import slice_devices as dev
from kubesim.fakeapi.slice_devices import DecodeError, Errors, items, mapping
from kubesim.fakeapi.store import ApiError

DEVICES_MAX: Final = 128
DEVICES_MAX_ADVANCED: Final = 64  # when a device has taints or consumes counters
COUNTER_SETS_MAX: Final = 8
COUNTERS_PER_SET_MAX: Final = 32
POOL_NAME_MAX: Final = 253
NODE_FIELDS: Final = ("nodeName", "nodeSelector", "allNodes")
ONE_OF_SLICE: Final = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
ONE_OF_DEVICE: Final = "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"


def validate_resource_slice(old: dict[str, Any] | None, new: dict[str, Any]) -> Errors | None:
    """The registry's hook: field errors for a 422, None if valid; raises ApiError(400) for a body that does not decode."""
    try:
        errors = slice_errors(old, new)
    except DecodeError as e:
        version = str(new.get("apiVersion") or "resource.k8s.io/v1").rpartition("/")[2]
        raise ApiError(400, f'ResourceSlice in version "{version}" cannot be handled as a ResourceSlice: {e}', "BadRequest") from None
    return errors or None


def slice_errors(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Errors:
    spec = mapping(new.get("spec"), "spec")
    old_spec = mapping(old.get("spec"), "spec") if old is not None else None
    out = dev.driver_name(str(spec.get("driver") or ""), "spec.driver")
    out += pool(mapping(spec.get("pool"), "spec.pool"))
    if old_spec is not None:
        out += immutable(spec, old_spec)
    out += node_choice(spec)
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        out.append(fe.invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    out += devices(spec, old_spec)
    out += counter_sets(spec.get("sharedCounters"))
    return out


def pool(p: Mapping[str, Any]) -> Errors:
    name = str(p.get("name") or "")
    out: Errors = []
    if not name:
        out.append(fe.required("spec.pool.name"))
    elif len(name) > POOL_NAME_MAX:
        out.append(fe.too_long("spec.pool.name", POOL_NAME_MAX))
    for part in name.split("/") if name else ():
        out += [fe.invalid("spec.pool.name", part, m) for m in names.dns_subdomain(part)]
    count = dev.whole(p.get("resourceSliceCount"), "spec.pool.resourceSliceCount")
    if count <= 0:
        out.append(fe.invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    generation = dev.whole(p.get("generation"), "spec.pool.generation")
    if generation < 0:
        out.append(fe.invalid("spec.pool.generation", generation, "must be greater than or equal to zero"))
    return out


def immutable(spec: Mapping[str, Any], old_spec: Mapping[str, Any]) -> Errors:
    out: Errors = []
    for path, now, before in (
        ("spec.pool.name", mapping(spec.get("pool"), "spec.pool").get("name"), mapping(old_spec.get("pool"), "spec.pool").get("name")),
        ("spec.driver", spec.get("driver"), old_spec.get("driver")),
        ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
    ):
        if now != before:
            out.append(fe.invalid(path, now, "field is immutable"))
    return out


def node_choice(spec: Mapping[str, Any]) -> Errors:
    """Exactly one of nodeName, nodeSelector (one term), allNodes, perDeviceNodeSelection; set flags must be true."""
    chosen: list[str] = []
    out: Errors = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name == "":
            out.append(fe.invalid("spec.nodeName", "", "must be either unset or set to a non-empty string"))
        else:
            chosen.append("`nodeName`")
            out += [fe.invalid("spec.nodeName", node_name, m) for m in names.dns_subdomain(str(node_name))]
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        out += dev.node_selector(spec["nodeSelector"], "spec.nodeSelector")
        terms = items(mapping(spec["nodeSelector"], "spec.nodeSelector").get("nodeSelectorTerms"), "spec.nodeSelector.nodeSelectorTerms")
        if len(terms) != 1:
            out.append(fe.invalid("spec.nodeSelector.nodeSelectorTerms", terms, "must have exactly one node selector term"))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is True:
            chosen.append(f"`{flag}`")
        elif spec.get(flag) is not None:
            out.append(fe.invalid(f"spec.{flag}", spec[flag], "must be either unset or set to true"))
    if not chosen:
        out.append(fe.required("spec", ONE_OF_SLICE))
    elif len(chosen) > 1:
        out.append(fe.invalid("spec", "{" + ", ".join(chosen) + "}", f"{ONE_OF_SLICE}, but multiple fields are set"))
    return out


def devices(spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None) -> Errors:
    listed = items(spec.get("devices"), "spec.devices")
    bodies = [mapping(d, f"spec.devices[{i}]") for i, d in enumerate(listed)]
    bodies = [mapping(b.get("basic"), f"spec.devices[{i}]") if "basic" in b else b for i, b in enumerate(bodies)]  # v1beta1
    advanced = any(b.get("taints") or b.get("consumesCounters") for b in bodies)
    limit = DEVICES_MAX_ADVANCED if advanced else DEVICES_MAX
    if len(listed) > limit:
        return [fe.too_many("spec.devices", len(listed), limit)]
    old_taints = {
        str(mapping(d, "spec.devices").get("name")): mapping(d, "spec.devices").get("taints")
        for d in items((old_spec or {}).get("devices"), "spec.devices")
    }
    per_device = spec.get("perDeviceNodeSelection") is True
    out: Errors = []
    seen: set[str] = set()
    for i, (d, body) in enumerate(zip(listed, bodies, strict=True)):
        name = str(mapping(d, f"spec.devices[{i}]").get("name") or "")
        out += device(name, body, f"spec.devices[{i}]", per_device, old_taints.get(name, ()))
        if name in seen:
            out.append(fe.duplicate(f"spec.devices[{i}]", name))
        seen.add(name)
    return out


def device(name: str, body: Mapping[str, Any], path: str, per_device: bool, old_taints: Any) -> Errors:
    for dropped in dev.DROPPED_DEVICE_FIELDS:
        if dropped in body and isinstance(body, dict):
            body.pop(dropped)
    out = [fe.required(f"{path}.name")] if not name else [fe.invalid(f"{path}.name", name, m) for m in names.dns_label(name)]
    attributes = mapping(body.get("attributes"), f"{path}.attributes")
    capacity = mapping(body.get("capacity"), f"{path}.capacity")
    total = len(attributes) + len(capacity)
    if total > dev.ATTRIBUTES_AND_CAPACITIES_MAX:
        out.append(
            fe.invalid(path, total, f"the total number of attributes and capacities must not exceed {dev.ATTRIBUTES_AND_CAPACITIES_MAX}")
        )
    for key, value in attributes.items():
        out += dev.qualified_name(str(key), f"{path}.attributes") + dev.attribute(value, f"{path}.attributes[{key}]")
    multiple = body.get("allowMultipleAllocations") is True
    for key, value in capacity.items():
        out += dev.qualified_name(str(key), f"{path}.capacity") + dev.capacity(value, f"{path}.capacity[{key}]", multiple)
    out += taints(body.get("taints"), f"{path}.taints", old_taints)
    out += dev.counter_consumptions(body.get("consumesCounters"), f"{path}.consumesCounters")
    out += device_nodes(body, path, per_device)
    return out + dev.binding_conditions(body, path)


def taints(raw: Any, path: str, old: Any) -> Errors:
    """Checked when they change: a device keeps taints a newer rule would refuse until the driver edits them."""
    listed = items(raw, path)
    if raw == old and old:
        return []
    if len(listed) > dev.TAINTS_MAX:
        return [fe.too_many(path, len(listed), dev.TAINTS_MAX)]
    out: Errors = []
    for i, t in enumerate(listed):
        out += dev.taint(t, f"{path}[{i}]")
    return out


def device_nodes(body: Mapping[str, Any], path: str, per_device: bool) -> Errors:
    present = [f for f in NODE_FIELDS if body.get(f) is not None]
    if not per_device:
        if present:
            return [
                fe.invalid(
                    path,
                    None,
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            ]
        return []
    chosen: list[str] = []
    out: Errors = []
    if body.get("nodeName") is not None:
        if body["nodeName"] == "":
            out.append(fe.invalid(f"{path}.nodeName", "", "must not be empty"))
        else:
            chosen.append("`nodeName`")
            out += [fe.invalid(f"{path}.nodeName", body["nodeName"], m) for m in names.dns_subdomain(str(body["nodeName"]))]
    if body.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        out += dev.node_selector(body["nodeSelector"], f"{path}.nodeSelector")
    if body.get("allNodes") is True:
        chosen.append("`allNodes`")
    elif body.get("allNodes") is not None:
        out.append(fe.invalid(f"{path}.allNodes", body["allNodes"], "must be either unset or set to true"))
    if not chosen:
        out.append(fe.required(path, ONE_OF_DEVICE))
    elif len(chosen) > 1:
        out.append(fe.invalid(path, "{" + ", ".join(chosen) + "}", ONE_OF_DEVICE))
    return out


def counter_sets(raw: Any) -> Errors:
    sets = items(raw, "spec.sharedCounters")
    if len(sets) > COUNTER_SETS_MAX:
        return [fe.too_many("spec.sharedCounters", len(sets), COUNTER_SETS_MAX)]
    out: Errors = []
    seen: set[str] = set()
    for i, s in enumerate(sets):
        path = f"spec.sharedCounters[{i}]"
        name = str(mapping(s, path).get("name") or "")
        if not name:
            out.append(fe.required(f"{path}.name"))
        out += [fe.invalid(f"{path}.name", name, m) for m in (names.dns_label(name) if name else [])]
        out += dev.counters(mapping(s, path).get("counters"), f"{path}.counters", COUNTERS_PER_SET_MAX)
        if name in seen:
            out.append(fe.duplicate(path, name))
        seen.add(name)
    return out
