"""Binding conditions in the allocator: named rows mirroring upstream's allocator test cases.

Upstream: structured/internal/allocatortesting/allocator_testing.go (the row
names are upstream's case names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.features import Features
from allocator.types import Node
from tests.allocator.builders import claim, dev, device_class, req, slice_, view

NODE = Node("node-1", {"kubernetes.io/hostname": "node-1"})
CLASSES = {"gpu": device_class("gpu")}
BC = {"bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}


@dataclass(frozen=True)
class Row:
    name: str  # upstream's case name
    slices: list[Any]
    requests: list[dict[str, Any]]
    gate: bool = True
    want: list[tuple[str, str]] | None = None  # (device, binding conditions) per result; None: no fit
    selector_node: bool = False  # the allocation is pinned to the node by name
    extra: dict[str, Any] = field(default_factory=dict)


ROWS = [
    Row(
        "device-binding-conditions",
        [slice_("s", [dev("gpu-0", **BC)])],
        [req("r")],
        want=[("gpu-0", "ready")],
        selector_node=True,
    ),
    Row(
        # One pool with binding conditions, one without: the one without is tried first.
        "binding-conditions-with-and-without",
        [slice_("a", [dev("gpu-0", **BC)], pool="a-pool"), slice_("b", [dev("gpu-1")], pool="b-pool")],
        [req("r")],
        want=[("gpu-1", "")],
    ),
    Row(
        # Two requests: the plain device first, then the one with conditions.
        "binding-conditions-with-and-without-two-requests",
        [slice_("a", [dev("gpu-0", **BC)], pool="a-pool"), slice_("b", [dev("gpu-1")], pool="b-pool")],
        [req("r1"), req("r2")],
        want=[("gpu-1", ""), ("gpu-0", "ready")],
    ),
    Row("binding-conditions-without-feature-gate", [slice_("s", [dev("gpu-0", **BC)])], [req("r")], gate=False, want=None),
    Row(
        "binding-conditions-without-feature-gate-plain-device-still-used",
        [slice_("a", [dev("gpu-0", **BC)], pool="a-pool"), slice_("b", [dev("gpu-1")], pool="b-pool")],
        [req("r")],
        gate=False,
        want=[("gpu-1", "")],
    ),
    Row(
        # bindsToNode on a device reachable from all nodes: the allocation is pinned to this node.
        "node-restriction",
        [slice_("net", [dev("nic-0", bindsToNode=True, **BC)], node=None, pool="net", all_nodes=True)],
        [req("r")],
        want=[("nic-0", "ready")],
        selector_node=True,
    ),
    Row(
        # Pools with such devices in node-local slices go after all others, whatever their names.
        "partitionable-devices-with-binding-conditions-multi-slices",
        [slice_("a", [dev("gpu-0", **BC)], pool="aaa"), slice_("z", [dev("gpu-9")], pool="zzz")],
        [req("r")],
        want=[("gpu-9", "")],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_binding_conditions(row: Row) -> None:
    allocator = Allocator(CelEnvironment(), features=Features(binding_conditions=row.gate))
    out = allocator.allocate(
        NODE, [claim("c", *row.requests)], [view(s) for s in row.slices], CLASSES, set(), timestamp="2026-01-01T00:00:00Z"
    )
    if row.want is None:
        assert not out.ok
        return
    assert out.ok, out.failure
    alloc = out.allocations["default/c"]
    assert [(r.device, ",".join(r.binding_conditions)) for r in alloc.results] == row.want
    for r in alloc.results:
        api = r.to_api()
        if r.binding_conditions:
            assert api["bindingConditions"] == ["ready"] and api["bindingFailureConditions"] == ["failed"]
        else:
            assert "bindingConditions" not in api and "bindingFailureConditions" not in api
    if row.selector_node:
        assert alloc.to_api()["nodeSelector"] == {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
        }
