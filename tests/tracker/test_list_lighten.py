"""Objects listed and watched without what nothing reads (managedFields, a Node's images) are understood as before.

The reflector drops those fields as each object is decoded, so a list of a
5,000-node cluster is held lean until it is applied (bench/bench_scale5k_cpu.py).
What the tracker parses from a heavy object (as a real API server returns it)
must be what it parses from the whole object; the eviction controller still
sees a DeviceTaintRule's managedFields.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from allocator.parse import parse_node, parse_pod
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import daemon_pods, heavy_metadata, heavy_node, heavy_pod, managed_fields
from tests.extender.api_cluster import ApiCluster, device_class, node_slice, until
from tracker import events as ev
from tracker.reflector import lighten

GROUP = "resource.k8s.io"


def _rule() -> dict[str, Any]:
    rule = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r", "managedFields": [managed_fields("kube-controller-manager", {}, subresource="status")]},
        "spec": {"taint": {"key": "k", "effect": "NoSchedule"}},
    }
    return rule


# name, kind, object, fields that must be gone, fields that must be kept (paths of keys)
ROWS: list[tuple[str, str, dict[str, Any], list[tuple[str, ...]], list[tuple[str, ...]]]] = [
    (
        "node-drops-managed-fields-and-images",
        ev.NODE,
        heavy_node("n1"),
        [("metadata", "managedFields"), ("status", "images")],
        [("metadata", "labels"), ("status", "conditions"), ("status", "allocatable"), ("status", "nodeInfo")],
    ),
    (
        "pod-drops-managed-fields",
        ev.POD,
        daemon_pods("n1", 1)[0],
        [("metadata", "managedFields")],
        [("metadata", "labels"), ("status", "conditions"), ("spec", "volumes")],
    ),
    (
        "slice-drops-managed-fields",
        ev.RESOURCE_SLICE,
        heavy_metadata(node_slice("n1", 2), "dra-driver"),
        [("metadata", "managedFields")],
        [("spec", "devices")],
    ),
    ("rule-keeps-managed-fields", ev.DEVICE_TAINT_RULE, _rule(), [], [("metadata", "managedFields")]),
]


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key)  # type: ignore[assignment]
        if obj is None:
            return None
    return obj


@pytest.mark.parametrize(("kind", "obj", "gone", "kept"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_lighten(kind: str, obj: dict[str, Any], gone: list[tuple[str, ...]], kept: list[tuple[str, ...]]) -> None:
    whole = copy.deepcopy(obj)
    assert all(_get(whole, p) is not None for p in gone + kept)
    light = lighten(kind, obj)
    assert [p for p in gone if _get(light, p) is not None] == []
    assert [p for p in kept if _get(light, p) != _get(whole, p)] == []


async def test_heavy_objects_listed_and_watched_parse_as_the_whole_objects(tmp_path: Path) -> None:
    """A heavy Node and Pods through the real client (list, then a watch event): the state holds what parsing the whole objects gives."""
    listed_node = heavy_node("heavy-a", allocatable={"example.com/gpu": "0"})
    listed_pod = heavy_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "nodeName": "heavy-a",
                "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"example.com/gpu": "1"}}}],
            },
        }
    )
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(device_class())
        api.create(copy.deepcopy(listed_node))
        api.create(heavy_metadata(node_slice("heavy-a", 2), "dra-driver"))
        api.create(copy.deepcopy(listed_pod))
        c = ApiCluster(api, tmp_path)
        await c.start()
        try:
            assert c.state.nodes["heavy-a"] == parse_node(api.get("nodes", "", "heavy-a"))
            assert c.state.pods["default/p"] == parse_pod(api.get("pods", "default", "p"))
            watched = heavy_node("heavy-a", labels={"pool": "b"}, allocatable={"example.com/gpu": "2"})
            api.patch("nodes", "", "heavy-a", {"metadata": {"labels": watched["metadata"]["labels"]}, "status": watched["status"]})
            await until(lambda: c.state.nodes["heavy-a"].labels.get("pool") == "b", "the watched Node")
            assert c.state.nodes["heavy-a"] == parse_node(api.get("nodes", "", "heavy-a"))
        finally:
            await c.stop()
