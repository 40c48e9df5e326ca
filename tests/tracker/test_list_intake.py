"""The initial lists' memory: objects lightened as decoded, the first list applied page by page (bench/bench_scale5k_cpu.py).

The reflector drops what nothing reads (managedFields, a Node's images) as each
object is decoded: what the tracker parses from a heavy object (as a real API
server returns it) must be what it parses from the whole object, and the
eviction controller still sees a DeviceTaintRule's managedFields. The first
list of a state that serves nothing yet is applied page by page; a list that
starts over (410) or is retried after a failure is held whole and replaced,
so an object deleted meanwhile is gone from the state.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.parse import parse_node, parse_pod
from kubesim.fakeapi import FakeApiError, FakeApiServer, RequestInfo
from kubesim.objects import daemon_pods, heavy_metadata, heavy_node, heavy_pod, managed_fields, rule
from tests.extender.api_cluster import ApiCluster, gpu_class, node_slice, until
from tracker import events as ev
from tracker.apiserver.reflector import LIST_PAGE_SIZE, lighten
from tracker.apiserver.source import ApiSource
from tracker.resources import KIND_RESOURCES
from tracker.source import SourceError
from tracker.state import ClusterState

GROUP = "resource.k8s.io"


def _rule() -> dict[str, Any]:
    return rule("r", key="k", meta={"managedFields": [managed_fields("kube-controller-manager", {}, subresource="status")]})


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
        api.create(gpu_class())
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


class CountingState(ClusterState):
    """The real state, counting whole-list replaces."""

    def __init__(self) -> None:
        super().__init__(CelEnvironment())
        self.replaces = 0

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        self.replaces += 1
        super().replace(kind, group, objects)


def _claim_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:04d}", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}], "resourceClaims": [{"name": "r", "resourceClaimName": f"claim-{i}"}]},
    }


# name, the fault on the list's second page (after pod-0000, on the first page, is deleted), whole-list replaces
PAGES: list[tuple[str, int | None, int]] = [
    ("first-list-applied-page-by-page", None, 0),
    ("410-on-a-page-starts-over-whole", 410, 1),
    ("failure-on-a-page-retried-whole", 500, 1),
]


@pytest.mark.parametrize(("fault", "replaces"), [r[1:] for r in PAGES], ids=[r[0] for r in PAGES])
async def test_first_list_streams_and_a_restarted_list_deletes_what_went(tmp_path: Path, fault: int | None, replaces: int) -> None:
    pods = LIST_PAGE_SIZE * 2 + 10
    async with FakeApiServer(bookmark_interval=0.2) as api:
        for i in range(pods):
            api.create(_claim_pod(i))
        faulted: list[str] = []

        def second_page(info: RequestInfo) -> Any:
            if fault is None or faulted or info.resource != "pods" or not info.query.get("continue"):
                return None
            faulted.append(info.query["continue"])
            api.delete("pods", "default", "pod-0000")  # on the page already applied
            return FakeApiError(fault, "Expired" if fault == 410 else "etcd is sad", "Expired" if fault == 410 else None)

        api.add_reactor(second_page)
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        state = CountingState()
        reflector = source.reflector(KIND_RESOURCES[ev.POD], state)
        try:
            await reflector.list()
        except SourceError:
            assert fault == 500
            await reflector.list()  # what `run` does after its backoff
        assert bool(faulted) == (fault is not None)
        expected = {f"default/pod-{i:04d}" for i in range(1 if fault else 0, pods)}
        assert set(state.pods) == expected
        assert state.replaces == replaces
