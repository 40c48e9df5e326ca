"""DRA-backed extended resources: class mapping and createRequestsAndMappings, as named rows.

Rows name the upstream case they mirror (plugins/dynamicresources
extendeddynamicresources_test.go `Test_createRequestsAndMappings_requests`,
dynamicresources_test.go TestPlugin, deviceclass/extendedresourcecache tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from allocator.extended_resources import (
    IMPLICIT_PREFIX,
    class_mapping,
    create_requests_and_mappings,
    dra_resources,
)
from allocator.parse import parse_device_class, parse_node, parse_pod
from allocator.pod_claims import dra_use
from allocator.types import DeviceClass
from kubesim import objects

GPU = "example.com/gpu"
NIC = "example.com/nic"


def cls(name: str, resource: str = "", created: str = "2026-01-01T00:00:00Z") -> DeviceClass:
    spec = {"extendedResourceName": resource} if resource else {}
    return parse_device_class({"metadata": {"name": name, "creationTimestamp": created}, "spec": spec})


@pytest.mark.parametrize(
    ("name", "classes", "want"),
    [
        ("implicit-only", [cls("gpu")], {IMPLICIT_PREFIX + "gpu": "gpu"}),
        ("explicit-and-implicit", [cls("gpu", GPU)], {GPU: "gpu", IMPLICIT_PREFIX + "gpu": "gpu"}),
        (
            "clash-newer-class-wins-loser-loses-implicit",
            [cls("old", GPU, "2026-01-01T00:00:00Z"), cls("new", GPU, "2026-02-01T00:00:00Z")],
            {GPU: "new", IMPLICIT_PREFIX + "new": "new"},
        ),
        ("clash-same-age-smaller-name-wins", [cls("b", GPU), cls("a", GPU)], {GPU: "a", IMPLICIT_PREFIX + "a": "a"}),
    ],
)
def test_class_mapping(name: str, classes: list[DeviceClass], want: dict[str, str]) -> None:
    assert class_mapping({c.meta.name: c for c in classes}) == want


def container(name: str, wants: dict[str, Any], *, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "resources": {"requests": {k: str(v) for k, v in wants.items()}}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Any:
    return parse_pod(objects.pod("p", meta={"uid": "u"}, containers=containers, **({"initContainers": init} if init else {})))


MAPPING = {GPU: "gpu", NIC: "nic"}


@dataclass(frozen=True)
class Row:
    name: str  # which upstream case it mirrors
    containers: list[dict[str, Any]]
    init: list[dict[str, Any]] | None
    requests: list[tuple[str, str, int]]  # (request name, class, count)
    mappings: list[tuple[str, str, str]]  # (container, resource, request)


ROWS = [
    Row(
        "extended-resource-name-with-resources (one container, one device)",
        [container("c", {GPU: 1, "cpu": "1"})],
        None,
        [("container-0-request-1", "gpu", 1)],  # cpu sorts before example.com/gpu
        [("c", GPU, "container-0-request-1")],
    ),
    Row(
        "two regular containers",
        [container("a", {GPU: 1}), container("b", {GPU: 2})],
        None,
        [("container-0-request-0", "gpu", 1), ("container-1-request-0", "gpu", 2)],
        [("a", GPU, "container-0-request-0"), ("b", GPU, "container-1-request-0")],
    ),
    Row(
        "init container reuses a later regular container's request",
        [container("main", {GPU: 2})],
        [container("setup", {GPU: 1})],
        [("container-1-request-0", "gpu", 2)],
        [("main", GPU, "container-1-request-0"), ("setup", GPU, "container-1-request-0")],
    ),
    Row(
        "init container asks for more: only the remainder",
        [container("main", {GPU: 1})],
        [container("setup", {GPU: 3})],
        [("container-0-request-0", "gpu", 2), ("container-1-request-0", "gpu", 1)],
        [("main", GPU, "container-1-request-0"), ("setup", GPU, "container-1-request-0"), ("setup", GPU, "container-0-request-0")],
    ),
    Row(
        "two init containers: only the largest request kept, mappings renamed",
        [container("main", {"cpu": "1"})],
        [container("i0", {GPU: 1}), container("i1", {GPU: 2})],
        [("container-1-request-0", "gpu", 2)],
        [("i0", GPU, "container-1-request-0"), ("i1", GPU, "container-1-request-0")],
    ),
    Row(
        "sidecar init container is long-lived",
        [container("main", {GPU: 1})],
        [container("side", {GPU: 1}, sidecar=True)],
        [("container-0-request-0", "gpu", 1), ("container-1-request-0", "gpu", 1)],
        [("side", GPU, "container-0-request-0"), ("main", GPU, "container-1-request-0")],
    ),
    Row(
        "two resources sorted by name",
        [container("c", {NIC: 1, GPU: 1})],
        None,
        [("container-0-request-0", "gpu", 1), ("container-0-request-1", "nic", 1)],
        [("c", GPU, "container-0-request-0"), ("c", NIC, "container-0-request-1")],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_create_requests_and_mappings(row: Row) -> None:
    p = pod(row.containers, row.init)
    requests, mappings = create_requests_and_mappings(p, frozenset(n for c in p.containers_if_extended for n in c.extended), MAPPING)
    assert [(r.name, r.exactly.device_class_name, r.exactly.count) for r in requests if r.exactly] == row.requests
    assert [(m.container_name, m.resource_name, m.request_name) for m in mappings] == row.mappings


def node(allocatable: dict[str, str] | None) -> Any:
    raw = objects.node("n")
    if allocatable is not None:
        raw["status"] = {"allocatable": allocatable}
    return parse_node(raw)


@pytest.mark.parametrize(
    ("name", "allocatable", "want"),
    [
        ("extended-resource-name-with-resources: absent from allocatable -> DRA", None, {GPU, NIC}),
        ("allocatable zero -> DRA", {GPU: "0", NIC: "0"}, {GPU, NIC}),
        ("extended-resource-name-with-node-resource: device plugin wins", {GPU: "4", NIC: "2"}, set()),
        ("extended-resource-one-device-plugin-one-dra", {NIC: "2"}, {GPU}),
        ("unmapped resource never DRA", {}, {GPU, NIC}),
    ],
)
def test_dra_resources(name: str, allocatable: dict[str, str] | None, want: set[str]) -> None:
    p = pod([container("c", {GPU: 1, NIC: 1, "other.example.com/thing": 1})])
    assert dra_resources(p, MAPPING, node(allocatable)) == want


def test_one_device_plugin_one_dra_request_name() -> None:
    """Upstream `extended-resource-one-device-plugin-one-dra`: the DRA request keeps the resource's index (1)."""
    p = pod([container("c", {"example.com/a-plugin": 1, GPU: 1})])
    requests, _ = create_requests_and_mappings(p, frozenset({GPU}), MAPPING)
    assert [r.name for r in requests] == ["container-0-request-1"]


def _with(**spec: Any) -> Any:
    return parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}], **spec}})


# name -> (the pod, why it needs a DRA allocator or None); the served names are MAPPING's
DRA_USE: dict[str, tuple[Any, str | None]] = {
    "resource claims": (_with(resourceClaims=[{"name": "g", "resourceClaimName": "c"}]), "resourceClaims"),
    "a class's resource, as a limit only": (pod([{"name": "c", "resources": {"limits": {GPU: "1"}}}]), f"extended resource {GPU}"),
    "a class's resource requested": (pod([container("c", {GPU: 1})]), f"extended resource {GPU}"),
    "in an init container": (pod([container("c", {})], init=[container("i", {NIC: 2})]), f"extended resource {NIC}"),
    "an implicit name, class not known (yet)": (
        pod([container("c", {IMPLICIT_PREFIX + "later": 1})]),
        f"extended resource {IMPLICIT_PREFIX}later",
    ),
    "a device-plugin resource": (pod([container("c", {"nvidia.com/gpu": 1})]), None),
    "a zero request": (pod([container("c", {GPU: 0})]), None),
    "nothing": (pod([container("c", {"cpu": "1"})]), None),
    "a recorded extended-resource claim": (
        parse_pod(
            {
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-x"}},
            }
        ),
        "extended-resource claim p-extended-resources-x",
    ),
}


@pytest.mark.parametrize("name", DRA_USE)
def test_dra_use(name: str) -> None:
    the_pod, want = DRA_USE[name]
    assert dra_use(the_pod, MAPPING) == want
