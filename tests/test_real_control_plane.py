"""bench/real_control_plane.py writes each object where a real API server serves it, without the fields only the server sets."""

from __future__ import annotations

from typing import Any

import pytest

from bench.real_control_plane import _as_sent, _collection
from kubesim.objects import device_class, heavy_metadata, heavy_node, node_slice
from kubesim.scheduler.workloads import WORKLOADS, cluster_objects


def _kind(kind: str) -> dict[str, Any]:
    return next(o for o in cluster_objects(WORKLOADS["small"]) if o["kind"] == kind)


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param(heavy_node("n1"), "/api/v1/nodes", id="node"),
        pytest.param(_kind("Namespace"), "/api/v1/namespaces", id="namespace"),
        pytest.param(device_class("devices", "dra.example.com"), "/apis/resource.k8s.io/v1/deviceclasses", id="device-class"),
        pytest.param(
            _kind("ResourceClaimTemplate"), "/apis/resource.k8s.io/v1/namespaces/perf/resourceclaimtemplates", id="claim-template"
        ),
        pytest.param(node_slice("n1", "dra.example.com", []), "/apis/resource.k8s.io/v1/resourceslices", id="resource-slice"),
        pytest.param(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"}},
            "/api/v1/namespaces/kube-system/pods",
            id="pod",
        ),
    ],
)
def test_collection(obj: dict[str, Any], path: str) -> None:
    assert _collection(obj) == path


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(heavy_node("n1"), id="heavy-node"),
        pytest.param(heavy_metadata(node_slice("n1", "dra.example.com", [{"name": "d"}]), "dra-driver"), id="heavy-slice"),
    ],
)
def test_as_sent_leaves_out_what_the_server_sets(obj: dict[str, Any]) -> None:
    sent = _as_sent(obj)
    assert "status" not in sent
    assert not {"uid", "resourceVersion", "creationTimestamp", "managedFields"} & set(sent["metadata"])
    assert sent["metadata"]["name"] == obj["metadata"]["name"]
    assert sent["spec"] == obj["spec"]
    assert "managedFields" in obj["metadata"]  # the builder's object is left as it was


# bench/real_plane_modes.py: each mode's kube-scheduler profile, as issue 42's table defines the four modes.
MODE_ROWS = [
    # (mode, DynamicResources on, percentageOfNodesToScore, extender verbs, an extender process)
    pytest.param("in-tree", True, None, None, False, id="in-tree: the plugin, default sampling"),
    pytest.param("extender", False, 100, ("filter", "prioritize", "bind"), True, id="extender: every node offered, it binds"),
    pytest.param("no-op", False, 100, ("filter", "prioritize", None), True, id="no-op: passes and scores, kube-scheduler binds"),
    pytest.param("no-dra", False, 100, None, False, id="no-dra: the ceiling, every node scored as the extender's"),
    pytest.param("extender-sampled", False, None, ("filter", "prioritize", "bind"), True, id="extender with default sampling"),
    pytest.param("no-dra-sampled", False, None, None, False, id="no-dra with default sampling"),
]


@pytest.mark.parametrize(("mode", "dra", "percentage", "verbs", "process"), MODE_ROWS)
def test_mode_scheduler_config(mode: str, dra: bool, percentage: int | None, verbs: tuple[str | None, ...] | None, process: bool) -> None:
    from bench.real_plane_modes import EXTENDER_PORT, extender_command, scheduler_config

    config = scheduler_config(mode, "/k/kubeconfig")
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "dra-scheduler"
    disabled = [p["name"] for p in ((profile.get("plugins") or {}).get("multiPoint") or {}).get("disabled") or []]
    assert ("DynamicResources" not in disabled) == dra
    assert profile.get("percentageOfNodesToScore") == percentage
    assert config["clientConnection"]["kubeconfig"] == "/k/kubeconfig"
    if verbs is None:
        assert "extenders" not in config
    else:
        (ext,) = config["extenders"]
        assert (ext["filterVerb"], ext["prioritizeVerb"], ext.get("bindVerb")) == verbs
        assert ext["urlPrefix"] == f"http://127.0.0.1:{EXTENDER_PORT}" and ext["nodeCacheCapable"] and not ext["ignorable"]
    command = extender_command(mode, "/k/kubeconfig")
    assert (command is not None) == process
    if command is not None:
        assert f"127.0.0.1:{EXTENDER_PORT}" in command
