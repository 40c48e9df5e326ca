"""/filter and /bind after a driver republishes its pool without an allocated partition (row 1 of the safety issue).

Counter set `mem: 2`; pod A binds with `part-a` (1); the pool is republished
at generation 2 without `part-a`; pod B asks for `full` (2). In-tree 1.36
binds B (3 of 2 units promised); here B fits nowhere, and says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.wire import BindingArgs, ExtenderArgs
from tests.extender.conftest import DemoService, running_demo
from tests.extender.manifest_cluster import claimed_pod, filter_args
from tracker import events as ev

D = "gpu.example.com"


def _slice(generation: int, devices: list[str]) -> list[dict[str, Any]]:
    pool = {"name": "node-a", "generation": generation, "resourceSliceCount": 2}
    sizes = {"full": "2", "part-a": "1"}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-counters"},
            "spec": {
                "driver": D,
                "nodeName": "node-a",
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": "2"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-devices"},
            "spec": {
                "driver": D,
                "nodeName": "node-a",
                "pool": pool,
                "devices": [
                    {
                        "name": name,
                        "attributes": {"id": {"string": name}},
                        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": sizes[name]}}}],
                    }
                    for name in devices
                ],
            },
        },
    ]


def _cluster(directory: Path) -> None:
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}]
    for name in ("full", "part-a"):
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}" && device.attributes["{D}"].id == "{name}"'}}]},
            }
        )
    docs += _slice(1, ["full", "part-a"])
    for pod, device in (("a", "part-a"), ("b", "full")):
        docs += claimed_pod(pod, pod, device)
    directory.mkdir()
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(docs))


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[DemoService]:
    _cluster(tmp_path / "c")
    async for demo in running_demo(tmp_path / "c"):
        yield demo


def _args(pod: str) -> ExtenderArgs:
    return filter_args(pod, pod, ["node-a"])


async def test_a_pool_republished_without_an_allocated_partition_does_not_fit_b(demo: DemoService) -> None:
    service = demo.service
    assert (await service.filter(_args("a")))[0] == ["node-a"]
    assert await service.bind(BindingArgs("a", "default", "uid-a", "node-a")) is None
    assert service.state.claims["default/a"].allocation is not None
    for raw in _slice(2, ["full"]):  # the driver republishes its pool without part-a, still A's
        service.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, raw["metadata"]["name"], raw))
    passed, failed = await service.filter(_args("b"))
    assert passed == [], "B's full (2 units) with A's part-a (1) held: 3 of 2 promised"
    assert "mem: 1 left, 2 needed" in failed["node-a"], failed
    assert await service.bind(BindingArgs("b", "default", "uid-b", "node-a")) is not None
    assert service.state.claims["default/b"].allocation is None
