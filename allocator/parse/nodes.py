"""Node (core/v1): the fields placement reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.parse.fields import _parse_quantity
from allocator.parse.reader import _object_ref, _Reader, parse_meta
from allocator.types import (
    Node,
)


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
