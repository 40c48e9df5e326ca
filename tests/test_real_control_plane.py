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
