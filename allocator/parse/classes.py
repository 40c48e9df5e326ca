"""DeviceClass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_config, _parse_selectors
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.types import (
    DeviceClass,
)


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
