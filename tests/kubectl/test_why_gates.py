"""`kubectl dra why` judges with the DRA feature gates of the cluster's minor, as the extender does (allocator/features.py).

A pod asking for three of a DRA-backed extended resource on a node with two
such devices: on 1.36 (DRAExtendedResource on by default) the extender
serves the resource and the node has too few devices; on 1.35 (off) the
resource is not DRA's and every node fits as far as the extender goes
(kube-scheduler's own resource fit judges it). The fake API server reports
the row's version at /version; the plugin runs in process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubectl_dra.cli import build_parser, run
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import device_class, gpu_slice, node

RESOURCE = "example.com/gpu"


@dataclass(frozen=True)
class Row:
    name: str
    version: str
    fits: bool  # does node-a fit
    said: str  # the `kubernetes` the json names


ROWS = [
    Row("1.36: extended resources are DRA's, two devices are too few", "v1.36.2", False, "1.36"),
    Row("1.35: the gate is off, the extender leaves the resource to kube-scheduler", "v1.35.2", True, "1.35"),
    Row("1.34: likewise", "v1.34.2", True, "1.34"),
]


def er_pod() -> dict:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {RESOURCE: "3"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "er", "namespace": "default", "uid": "uid-er"},
        "spec": {"schedulerName": "dra-scheduler", "containers": [container]},
    }


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_why_uses_the_gates_of_the_clusters_minor(tmp_path: Path, row: Row) -> None:
    async with FakeApiServer(kubernetes_version=row.version) as api:
        for obj in (device_class("gpu", "gpu.example.com", extended_resource=RESOURCE), node("node-a"), gpu_slice("node-a", 2), er_pod()):
            api.create(obj)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        answer: list[str] = []
        assert await run(build_parser().parse_args(["--kubeconfig", kubeconfig, "why", "er", "-o", "json"]), answer.append) == 0
    got = json.loads("\n".join(answer))
    reason = got["nodes"]["node-a"]
    assert (reason is None) == row.fits, reason
    if not row.fits:
        assert "devices" in reason, reason
    assert got["featureGates"]["kubernetes"] == row.said
    assert got["featureGates"]["gates"]["DRAExtendedResource"] == (not row.fits)
