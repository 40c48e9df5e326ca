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

# Upstream's v1alpha3 of 1.33-1.34 had `deviceClassName` and CEL `selectors`; 1.35 removed both and
# v1beta2 (1.36) and v1 never had them. The project's CRD keeps them.
_UPSTREAM_GROUP = "resource.k8s.io"
_WITHOUT_CLASS_AND_SELECTORS = frozenset({"v1beta2", "v1"})


def parse_device_taint_rule(raw: Mapping[str, Any], *, group: str, default_time: str = "") -> DeviceTaintRule:
    r = _Reader(_object_ref("DeviceTaintRule", raw))
    raw = r.mapping(raw, "", required=True)
    meta = parse_meta(r, raw, namespaced=False)
    spec = r.mapping(raw.get("spec"), "spec", required=True)
    selector = None
    if spec.get("deviceSelector") is not None:
        s = r.mapping(spec.get("deviceSelector"), "spec.deviceSelector")
        api_version = raw.get("apiVersion")
        if group == _UPSTREAM_GROUP and isinstance(api_version, str) and api_version.partition("/")[2] in _WITHOUT_CLASS_AND_SELECTORS:
            for name in ("deviceClassName", "selectors"):
                if s.get(name) is not None:
                    # The API server would drop it and taint more devices; honouring it would taint fewer.
                    raise r.fail(f"spec.deviceSelector.{name}", f"not a field of {api_version} (only of v1alpha3 in Kubernetes 1.33-1.34)")
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
