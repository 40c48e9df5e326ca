"""Service decisions in-process, over a real ManifestSource (no HTTP)."""

from __future__ import annotations

import orjson

from extender.service import Service
from extender.wire import BindingArgs, parse_extender_args
from tests.e2e.harness import demo_pod_args
from tests.extender.conftest import DemoService
from tracker import events as ev

BROKEN_CLASS = {
    # Sorts after deviceclasses.yaml, so this definition of the class wins.
    "zz-override-class.yaml": "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n"
    "spec:\n  selectors:\n  - cel: {expression: 'device.attributes[\"gpu.example.com\"].nosuch == 1'}\n"
}


async def test_failing_class_selector_fails_the_node_and_blames_the_class(demo_service) -> None:
    demo = await demo_service(BROKEN_CLASS)
    service, problems = demo.service, demo.problems
    args = parse_extender_args(orjson.dumps(demo_pod_args("trainer", ["node-a", "node-b"])))
    passed, failed = await service.filter(args)
    assert passed == []
    assert "device class gpu.example.com" in failed["node-a"] and "nosuch" in failed["node-a"]
    blamed = [p for p in problems if p.kind == "DeviceClass"]
    assert len(blamed) >= 1 and blamed[0].name == "gpu.example.com"
    # Asking again does not report it again.
    await service.filter(args)
    assert len([p for p in problems if p.kind == "DeviceClass"]) == len(blamed)


def _foreign(service: Service) -> float:
    return service.metrics.registry.get_sample_value("dra_extender_foreign_allocations_total") or 0.0


async def _allocated_elsewhere(demo: DemoService, claim: str, device: str) -> None:
    service = demo.service
    held = await demo.source.get("ResourceClaim", "default", claim)
    assert held is not None
    raw = dict(held)
    raw["metadata"] = {**raw["metadata"], "resourceVersion": str(10**9)}
    raw["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-b", "device": device}]}}
    }
    service.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"default/{claim}", raw))


async def test_only_allocations_written_elsewhere_are_foreign(demo_service) -> None:
    demo = await demo_service()
    service = demo.service
    pod = service.state.pods["default/trainer"]
    assert await service.bind(BindingArgs("trainer", "default", pod.meta.uid, "node-a")) is None
    assert _foreign(service) == 0, "our own allocation is not foreign"
    await _allocated_elsewhere(demo, "maintenance-ok", "gpu-0")
    assert _foreign(service) == 1
    await _allocated_elsewhere(demo, "maintenance-ok", "gpu-0")
    assert _foreign(service) == 1, "the same allocation seen again is not counted again"
    demo.lease.held = False
    await _allocated_elsewhere(demo, "two-gpus", "gpu-1")
    assert _foreign(service) == 1, "a replica that does not lead expects the leader's allocations"
