"""ResourceSlicePatch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_attribute, _parse_quantity, _parse_selectors
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.quantity import Quantity
from allocator.types import (
    REMOVE,
    AttributeValue,
    DevicePatchFilter,
    ResourceSlicePatch,
)


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
