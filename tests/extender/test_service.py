"""Service decisions in-process, over a real ManifestSource (no HTTP)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.metrics import Metrics
from extender.service import Service
from extender.wire import parse_extender_args
from tests.e2e.harness import DEMO, demo_pod_args
from tracker.manifest_source import ManifestSource
from tracker.state import ClusterState, Problem


@pytest.fixture
async def loaded(tmp_path: Path):
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    # Sorts after deviceclasses.yaml, so this definition of the class wins.
    (directory / "zz-override-class.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n"
        "spec:\n  selectors:\n  - cel: {expression: 'device.attributes[\"gpu.example.com\"].nosuch == 1'}\n"
    )
    problems: list[Problem] = []
    cel = CelEnvironment()
    state = ClusterState(cel, on_problem=problems.append)
    source = ManifestSource(directory, watch=False)
    task = asyncio.create_task(source.run(state))
    for _ in range(100):
        if state.ready:
            break
        await asyncio.sleep(0.01)
    yield Service(state, source, Allocator(cel), Metrics()), problems
    task.cancel()


async def test_failing_class_selector_fails_the_node_and_blames_the_class(loaded) -> None:
    service, problems = loaded
    import orjson

    args = parse_extender_args(orjson.dumps(demo_pod_args("trainer", ["node-a", "node-b"])))
    passed, failed = service.filter(args)
    assert passed == []
    assert "device class gpu.example.com" in failed["node-a"] and "nosuch" in failed["node-a"]
    blamed = [p for p in problems if p.kind == "DeviceClass"]
    assert len(blamed) >= 1 and blamed[0].name == "gpu.example.com"
    # Asking again does not report it again.
    service.filter(args)
    assert len([p for p in problems if p.kind == "DeviceClass"]) == len(blamed)


@pytest.fixture
async def demo(tmp_path: Path):
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    cel = CelEnvironment()
    state = ClusterState(cel)
    source = ManifestSource(directory, watch=False)
    task = asyncio.create_task(source.run(state))
    for _ in range(100):
        if state.ready:
            break
        await asyncio.sleep(0.01)
    leading = {"now": True}
    yield Service(state, source, Allocator(cel), Metrics(), is_leader=lambda: leading["now"]), leading
    task.cancel()


def _foreign(service: Service) -> float:
    return service.metrics.registry.get_sample_value("dra_extender_foreign_allocations_total") or 0.0


def _allocated_elsewhere(service: Service, claim: str, device: str) -> None:
    from tracker import events as ev

    raw = dict(service.state.raw_claims[f"default/{claim}"])
    raw["metadata"] = {**raw["metadata"], "resourceVersion": str(10**9)}
    raw["status"] = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-b", "device": device}]}}}
    service.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"default/{claim}", raw))


async def test_only_allocations_written_elsewhere_are_foreign(demo) -> None:
    from extender.wire import BindingArgs

    service, leading = demo
    pod = service.state.raw_pods["default/trainer"]
    assert await service.bind(BindingArgs("trainer", "default", pod["metadata"]["uid"], "node-a")) == ""
    assert _foreign(service) == 0, "our own allocation is not foreign"
    _allocated_elsewhere(service, "maintenance-ok", "gpu-0")
    assert _foreign(service) == 1
    _allocated_elsewhere(service, "maintenance-ok", "gpu-0")
    assert _foreign(service) == 1, "the same allocation seen again is not counted again"
    leading["now"] = False
    _allocated_elsewhere(service, "two-gpus", "gpu-1")
    assert _foreign(service) == 1, "a replica that does not lead expects the leader's allocations"
