"""/filter stops looking once `offer_nodes` fully healthy fitting nodes (no None-effect taint) are found (docs/kube-scheduler.md#how-many-nodes-filter-offers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from extender.service import Service
from extender.wire import BindingArgs, ExtenderArgs
from tests.extender.manifest_cluster import claimed_pod, filter_args, manifest_service

NODES = [f"node-{i:02d}" for i in range(12)]

CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
"""


def _cluster(directory: Path, gpus: dict[str, int], taints: dict[str, str] | None = None, tolerate: bool = False) -> None:
    docs = [CLASS]
    for node in NODES:
        docs.append(f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n")
        devices = ""
        for i in range(gpus.get(node, 0)):
            devices += f"  - name: gpu-{i}\n"
            if taints and node in taints:
                devices += f"    taints: [{{key: example.com/degraded, value: x, effect: {taints[node]}}}]\n"
        if devices:
            docs.append(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\n"
                f"metadata: {{name: {node}-gpu}}\n"
                f"spec:\n  driver: gpu.example.com\n  nodeName: {node}\n"
                f"  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}"
            )
    for i in range(1, 9):
        exactly = {"tolerations": [{"operator": "Exists"}]} if tolerate else None
        docs += [yaml.safe_dump(o) for o in claimed_pod(f"p{i}", f"c{i}", "gpu.example.com", exactly)]
    directory.mkdir()
    (directory / "cluster.yaml").write_text("---\n".join(docs))


Start = Callable[..., Awaitable[Service]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    tasks: list[asyncio.Task] = []

    async def run(gpus: dict[str, int], offer_nodes: int, taints: dict[str, str] | None = None, tolerate: bool = False) -> Service:
        directory = tmp_path / f"c{len(tasks)}"
        _cluster(directory, gpus, taints, tolerate)
        service, task = await manifest_service(directory, offer_nodes=offer_nodes, placement_wait=0.2)
        tasks.append(task)
        return service

    yield run
    for task in tasks:
        task.cancel()


def _args(i: int, names: list[str] = NODES) -> ExtenderArgs:
    return filter_args(f"p{i}", f"c{i}", names)


async def test_filter_offers_the_first_fitting_nodes_and_starts_the_next_look_where_it_stopped(start: Start) -> None:
    service = await start(dict.fromkeys(NODES, 2), offer_nodes=3)
    passed, failed = await service.filter(_args(1))
    assert passed == NODES[:3] and failed == {}, "the nodes not looked at are neither offered nor failed"
    assert await service.bind(BindingArgs("p1", "default", "uid-p1", passed[0])) is None
    passed, failed = await service.filter(_args(2))
    assert passed == NODES[3:6] and failed == {}
    assert await service.bind(BindingArgs("p2", "default", "uid-p2", passed[0])) is None
    # Every pod still reaches every fitting node in turn, wrapping around the list.
    seen = set()
    for i in range(3, 7):
        passed, _ = await service.filter(_args(i))
        seen.update(passed)
        assert await service.bind(BindingArgs(f"p{i}", "default", f"uid-p{i}", passed[0])) is None
    assert seen == set(NODES)


async def test_the_look_stops_at_the_node_that_reaches_the_limit(start: Start) -> None:
    # The first chunk (node-00..02) has two fits; the second completes the three at node-03 and the
    # look stops there: node-04 and node-05 are neither offered nor failed, and the next look starts at node-04.
    service = await start({n: 0 if n == NODES[0] else 2 for n in NODES}, offer_nodes=3)
    passed, failed = await service.filter(_args(1))
    assert passed == NODES[1:4] and set(failed) == {NODES[0]}, (passed, failed)
    passed, failed = await service.filter(_args(2))
    assert passed == NODES[4:7] and failed == {}, (passed, failed)


async def test_a_pod_that_fits_on_one_node_only_is_offered_it_wherever_it_is(start: Start) -> None:
    service = await start({NODES[-1]: 1}, offer_nodes=3)
    passed, failed = await service.filter(_args(1))
    assert passed == [NODES[-1]]
    assert set(failed) == set(NODES[:-1]), "a look over every name reports why each other node does not fit"
    assert await service.bind(BindingArgs("p1", "default", "uid-p1", NODES[-1])) is None
    passed, failed = await service.filter(_args(2))
    assert passed == [] and set(failed) == set(NODES), "no fitting node: refused, as before"


async def test_nodes_with_tainted_devices_do_not_end_the_look(start: Start) -> None:
    # The first six nodes' devices carry a taint that does not block allocation: they fit but
    # score lower, so the look goes on until three fits without such taints are found.
    tainted = dict.fromkeys(NODES[:6], "None")
    service = await start(dict.fromkeys(NODES, 1), offer_nodes=3, taints=tainted)
    passed, _ = await service.filter(_args(1))
    assert passed[:6] == NODES[:6] and passed[6:] == NODES[6:9]
    scores = dict(service.prioritize(_args(1, passed)))
    assert all(scores[n] < scores[NODES[6]] for n in NODES[:6])


async def test_offer_nodes_0_offers_every_fitting_node(start: Start) -> None:
    service = await start(dict.fromkeys(NODES, 1), offer_nodes=0)
    passed, _ = await service.filter(_args(1))
    assert passed == NODES
    assert await service.bind(BindingArgs("p1", "default", "uid-p1", NODES[1])) is None
    passed, _ = await service.filter(_args(2))
    assert passed == [n for n in NODES if n != NODES[1]]


async def test_a_limited_look_still_withholds_nodes_a_placed_pod_may_take(start: Start) -> None:
    service = await start(dict.fromkeys(NODES[:6], 1), offer_nodes=2)
    names = NODES[:6]
    passed, _ = await service.filter(_args(1, names))
    assert passed == names[:2]
    assert await service.bind(BindingArgs("p1", "default", "uid-p1", names[0])) is None  # the gate turns on
    assert (await service.filter(_args(2, names)))[0] == names[2:4]  # p2 placed; its /bind outstanding
    assert (await service.filter(_args(3, names)))[0] == names[4:6]  # p3 looks further on: nothing shared
    # p4 wraps around: node-00 is taken, node-01 fits, node-02 fits alone but p2 may take its only
    # device: withheld, never offered twice. The look stopped at node-02 (the second fit): node-03 is in neither map.
    passed, failed = await service.filter(_args(4, names))
    assert passed == [names[1]]
    assert "withheld" in failed[names[2]] and names[3] not in failed
    assert "allocated" in failed[names[0]]


async def test_a_tolerated_blocking_taint_does_not_lower_health_and_ends_the_look(start: Start) -> None:
    # Every device carries a NoSchedule taint the claims tolerate: as healthy as untainted for
    # /prioritize, so the look stops after three fits.
    service = await start(dict.fromkeys(NODES, 1), offer_nodes=3, taints=dict.fromkeys(NODES, "NoSchedule"), tolerate=True)
    passed, failed = await service.filter(_args(1))
    assert passed == NODES[:3] and failed == {}
