"""Kubernetes 1.34's alpha partitionable devices, through `dra-extender serve --source` over HTTP (issue 41, row 14).

1.34's API server accepts `sharedCounters` only beside the devices consuming
them, in one slice (1.35 wants separate slices). Node `one` publishes a 40Gi
GPU that way, with partitions `full`, `half-a` and `half-b`: once a pod holds
`full`, a pod asking for any partition fits nowhere. Node `dup` repeats a
counter set name in two slices of its pool (1.34 scopes sets to their slice,
the extender to the pool): the pool is refused, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesim.objects import claim, device_class, node, pod
from tests.e2e.harness import Extender, filter_args

DRIVER = "gpu.example.com"
PARTITIONS = (("full", "40Gi"), ("half-a", "20Gi"), ("half-b", "20Gi"))


def _slice_1_34(name: str, node: str, slice_count: int, parts: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A 1.34-shaped slice: the counter set and the devices consuming it together."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": slice_count},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
            "devices": [
                {
                    "name": device,
                    "capacity": {"memory": {"value": size}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}],
                }
                for device, size in parts
            ],
        },
    }


def _objects() -> list[dict[str, Any]]:
    objs = [node("one"), node("dup"), device_class("partition", DRIVER), _slice_1_34("one", "one", 1, PARTITIONS)]
    objs += [_slice_1_34("dup-0", "dup", 2, PARTITIONS[1:2]), _slice_1_34("dup-1", "dup", 2, PARTITIONS[2:])]
    whole = {"selectors": [{"cel": {"expression": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'}}]}
    for name, exactly in (("a", whole), ("b", None)):
        objs.append(claim(f"claim-{name}", device_class="partition", exactly=exactly))
        objs.append(pod(f"pod-{name}", claims={"gpu": f"claim-{name}"}, scheduler="dra-scheduler", meta={"uid": f"uid-pod-{name}"}))
    return objs


@pytest.fixture
def ext(tmp_path: Path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(_objects()))
    e = Extender("--source", str(tmp_path))
    e.wait_ready()
    yield e
    e.stop()


def _filter(ext: Extender, pod: str, nodes: list[str]) -> dict[str, Any]:
    body = filter_args(f"pod-{pod}", [{"name": "gpu", "resourceClaimName": f"claim-{pod}"}], nodes, uid=f"uid-pod-{pod}")
    resp = ext.post("filter", body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_the_1_34_shape_allocates_by_its_counters(ext: Extender) -> None:
    assert _filter(ext, "a", ["one"])["NodeNames"] == ["one"]
    resp = ext.post("bind", {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-pod-a", "Node": "one"})
    assert resp.status_code == 200 and resp.json()["Error"] == "", resp.text
    result = _filter(ext, "b", ["one"])
    assert result["NodeNames"] == []
    reason = result["FailedAndUnresolvableNodes"]["one"]
    assert "short of shared counters" in reason and "gpu-0/memory: 0 left, 20Gi needed" in reason, reason


def test_a_counter_set_name_repeated_in_a_1_34_pool_is_refused_saying_why(ext: Extender) -> None:
    result = _filter(ext, "b", ["dup"])
    assert result["NodeNames"] == []
    reason = result["FailedAndUnresolvableNodes"]["dup"]
    assert "duplicate counter set name gpu-0" in reason and "Kubernetes 1.34 scopes a counter set to its slice" in reason, reason
