"""The issue's two in-tree measurements, through `dra-extender serve --source` over HTTP.

1. A GPU of 40Gi published as counters, with partitions `full` (40Gi),
   `half-a` and `half-b` (20Gi each): once a pod holds `full`, a pod asking
   for any partition fits nowhere (in-tree 1.36 leaves it pending).
2. A device with `allowMultipleAllocations` and 40Gi of memory, three pods
   each asking `capacity.requests.memory: 20Gi`: two share it, each result
   with `consumedCapacity` and its own `shareID`; the third fits nowhere.

/debug/devices shows the counters and shares left.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import Extender, filter_args

DRIVER = "gpu.example.com"


def _objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "partition"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && "kind" in device.attributes["{DRIVER}"] && device.attributes["{DRIVER}"].kind == "partition"'
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "shared"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && device.allowMultipleAllocations'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-devices"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
                "devices": [
                    {
                        "name": name,
                        "attributes": {"kind": {"string": "partition"}},
                        "capacity": {"memory": {"value": size}},
                        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}],
                    }
                    for name, size in (("full", "40Gi"), ("half-a", "20Gi"), ("half-b", "20Gi"))
                ]
                + [{"name": "shared-gpu", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "40Gi"}}}],
            },
        },
    ]
    for name, cls, capacity in (
        ("a", "partition", None),
        ("b", "partition", None),
        ("s1", "shared", "20Gi"),
        ("s2", "shared", "20Gi"),
        ("s3", "shared", "20Gi"),
    ):
        exactly: dict[str, Any] = {"deviceClassName": cls}
        if name == "a":
            exactly["selectors"] = [{"cel": {"expression": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'}}]
        if capacity:
            exactly["capacity"] = {"requests": {"memory": capacity}}
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{name}", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            }
        )
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{name}", "namespace": "default", "uid": f"uid-pod-{name}"},
                "spec": {
                    "schedulerName": "dra-scheduler",
                    "containers": [{"name": "c", "image": "x"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{name}"}],
                },
            }
        )
    return objs


@pytest.fixture
def ext(tmp_path: Path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(_objects()))
    e = Extender("--source", str(tmp_path))
    e.wait_ready()
    yield e
    e.stop()


def _filter(ext: Extender, pod: str) -> dict[str, Any]:
    body = filter_args(f"pod-{pod}", [{"name": "gpu", "resourceClaimName": f"claim-{pod}"}], ["node-a"], uid=f"uid-pod-{pod}")
    resp = ext.post("filter", body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _bind(ext: Extender, pod: str) -> None:
    resp = ext.post("bind", {"PodName": f"pod-{pod}", "PodNamespace": "default", "PodUID": f"uid-pod-{pod}", "Node": "node-a"})
    assert resp.status_code == 200 and resp.json()["Error"] == "", resp.text


def _devices(ext: Extender) -> dict[str, dict[str, Any]]:
    return {d["device"]: d for d in ext.http.get("/debug/devices").json()["items"]}


def test_a_partition_is_refused_once_the_whole_gpu_is_taken(ext: Extender) -> None:
    assert _filter(ext, "a")["NodeNames"] == ["node-a"]
    _bind(ext, "a")
    assert _devices(ext)["full"]["allocatedTo"] == "default/claim-a"
    result = _filter(ext, "b")
    assert result["NodeNames"] == []
    reason = result["FailedAndUnresolvableNodes"]["node-a"]
    assert "short of shared counters" in reason and "gpu-0/memory: 0 left, 20Gi needed" in reason, reason
    assert _devices(ext)["half-a"]["countersLeft"] == {"gpu-0": {"memory": "0"}}


def test_two_of_three_pods_share_a_device_and_the_third_is_refused(ext: Extender) -> None:
    for pod in ("s1", "s2"):
        assert _filter(ext, pod)["NodeNames"] == ["node-a"], pod
        _bind(ext, pod)
    shared = _devices(ext)["shared-gpu"]
    assert sorted(shared["shares"].values()) == ["default/claim-s1", "default/claim-s2"]
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s) for s in shared["shares"])
    assert shared["capacityLeft"] == {f"{DRIVER}/memory": "0"}
    result = _filter(ext, "s3")
    assert result["NodeNames"] == []
    assert "without enough capacity left" in result["FailedAndUnresolvableNodes"]["node-a"]
