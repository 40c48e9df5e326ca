"""DeviceTaintRule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_selectors, parse_taint
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.types import (
    DeviceTaintRule,
    DeviceTaintSelector,
)


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
