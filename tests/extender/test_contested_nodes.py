"""/filter while earlier pods' /binds are outstanding: contested nodes are withheld, not offered twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from extender.wire import BindingArgs, ExtenderArgs
from tests.extender.conftest import DemoService, running_demo
from tests.extender.manifest_cluster import claimed_pod, filter_args

NODES = ["node-a", "node-b"]
GPUS = {"node-a": 1, "node-b": 3}  # node-a's only GPU is what a placed pod may take

CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
"""


def _cluster(directory: Path) -> None:
    docs = [CLASS]
    for node, gpus in GPUS.items():
        docs.append(f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n")
        devices = "".join(f"  - name: gpu-{i}\n" for i in range(gpus))
        docs.append(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\n"
            f"metadata: {{name: {node}-gpu}}\n"
            f"spec:\n  driver: gpu.example.com\n  nodeName: {node}\n"
            f"  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}"
        )
    for i in range(1, 5):
        docs += [yaml.safe_dump(o) for o in claimed_pod(f"p{i}", f"c{i}", "gpu.example.com")]
    directory.mkdir()
    (directory / "cluster.yaml").write_text("---\n".join(docs))


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[DemoService]:
    _cluster(tmp_path / "c")
    async for demo in running_demo(tmp_path / "c"):
        yield demo


def _args(i: int) -> ExtenderArgs:
    return filter_args(f"p{i}", f"c{i}", NODES)


async def _bind(demo: DemoService, i: int, node: str) -> None:
    assert await demo.service.bind(BindingArgs(f"p{i}", "default", f"uid-p{i}", node)) is None


def _withheld(demo: DemoService) -> float:
    return demo.service.metrics.registry.get_sample_value("dra_extender_placement_nodes_withheld_total") or 0.0


async def test_a_node_an_outstanding_bind_may_empty_is_withheld_until_the_bind_decides(demo: DemoService) -> None:
    service = demo.service
    # p1: a client that has not bound yet sees every node that fits (the gate starts off).
    assert (await service.filter(_args(1)))[0] == NODES
    await _bind(demo, 1, "node-b")  # the first bind: this client is a scheduler, the gate turns on
    assert (await service.filter(_args(2)))[0] == NODES  # p2 placed; its /bind has not come
    passed, failed = await service.filter(_args(3))
    assert passed == ["node-b"], "node-a's only GPU may go to p2: not offered to p3 as well"
    assert "withheld" in failed["node-a"] and _withheld(demo) == 1
    await _bind(demo, 2, "node-b")  # p2's bind decides: node-a's GPU is still free
    assert (await service.filter(_args(3)))[0] == NODES


async def test_a_pod_left_with_only_contested_nodes_waits_for_the_bind(demo: DemoService) -> None:
    service = demo.service
    await service.filter(_args(1))
    await _bind(demo, 1, "node-b")
    await service.filter(_args(2))
    await _bind(demo, 2, "node-b")  # one GPU left on each node
    assert (await service.filter(_args(3)))[0] == NODES  # p3 placed; its /bind outstanding
    # p4: p3 may take the last GPU of either node, so no node is safe to offer: p4 waits for
    # p3's bind instead of answering nothing or offering p3's GPU twice.
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, lambda: asyncio.ensure_future(_bind(demo, 3, "node-a")))
    start = loop.time()
    passed, failed = await service.filter(_args(4))
    assert passed == ["node-b"] and "0 of 1 devices available" in failed["node-a"], failed
    assert 0.03 < loop.time() - start < 1.0
    assert (service.metrics.registry.get_sample_value("dra_extender_placement_wait_seconds_count") or 0) == 1
