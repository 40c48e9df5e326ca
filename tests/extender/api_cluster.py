"""An in-process Service over the fake API server (real ApiSource client, real HTTP), restartable, for bind races.

The races are driven by a controlled interleaving: an async reactor on the
fake API server holds one chosen request until the test lets it go, and the
binding timeout is judged on a fake clock the test sets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.service import Service, build_service
from extender.wire import BindingArgs, parse_extender_args
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.objects import PAUSE, device_class, gpu_slice, pod
from serving.metrics import Metrics
from tracker.apiserver.source import ApiSource
from tracker.state import ClusterState, Problem

DRIVER = "gpu.example.com"
RESOURCE = "example.com/gpu"


async def until(done: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait for a state (not a duration): polled every event-loop turn or millisecond."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


class Held:
    """A reactor holding the first request that `match` picks until `release()`; the test sees when it arrived."""

    def __init__(self, match: Callable[[RequestInfo], bool]) -> None:
        self.match = match
        self.arrived = asyncio.Event()
        self.go = asyncio.Event()
        self.used = False

    async def __call__(self, info: RequestInfo) -> Any:
        if self.used or not self.match(info):
            return None
        self.used = True
        self.arrived.set()
        await self.go.wait()
        return None

    def release(self) -> None:
        self.go.set()


class ApiCluster:
    """The fake API server and one extender Service on it; `restart()` is a new process's worth of state."""

    def __init__(self, api: FakeApiServer, tmp_path: Path, **service_args: Any) -> None:
        self.api = api
        self.kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        self.service_args = {"placement_wait": 0.0, "claim_wait": 0.0, **service_args}
        self.task: asyncio.Task[None] | None = None
        self.state: ClusterState
        self.service: Service

    async def start(self, on_problem: Callable[[Problem], None] | None = None) -> Service:
        """A new process's state and service; `on_problem` hears of faulty objects (the Warning Events' source)."""
        cel = CelEnvironment()
        self.state = ClusterState(cel, on_problem=on_problem)
        source = ApiSource(kubeconfig=str(self.kubeconfig))
        self.service = build_service(self.state, source, Allocator(cel), Metrics(), **self.service_args)
        self.task = asyncio.create_task(source.run(self.state))
        await until(lambda: self.state.ready, "the initial lists")
        return self.service

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def caught_up(self) -> None:
        """Until the state holds every claim and pod at the server's resourceVersion."""

        def same() -> bool:
            for kind, group in (("ResourceClaim", "resource.k8s.io"), ("Pod", "")):
                want = {
                    f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in self.api.list(kind)
                }
                have = self.state.versions.get((kind, group), {})
                if kind == "Pod":
                    want = {k: v for k, v in want.items() if k in have}
                if want != have:
                    return False
            return True

        await until(same, "the state to catch up with the server")

    async def bind(self, pod: dict[str, Any], node: str) -> str:
        """/bind's answer as the wire carries it: '' when bound, else why not."""
        meta = pod["metadata"]
        refusal = await self.service.bind(BindingArgs(meta["name"], meta.get("namespace", "default"), meta["uid"], node))
        return "" if refusal is None else refusal.message

    async def filter(self, pod: dict[str, Any], nodes: list[str]) -> tuple[list[str], dict[str, str]]:
        return await self.service.filter(parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": nodes})))


# ---------------------------------------------------------------------- objects (kubesim/objects.py, with this driver)


def gpu_class(extended_resource: str | None = None) -> dict[str, Any]:
    return device_class("gpu", DRIVER, extended_resource=extended_resource)


def node_slice(name: str, devices: int, *, binding_conditions: bool = False) -> dict[str, Any]:
    extra: dict[str, Any] = (
        {"bindsToNode": True, "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]} if binding_conditions else {}
    )
    return gpu_slice(name, devices, driver=DRIVER, name=f"{name}-slice", **extra)


def pod_with_claim(name: str, claim_name: str) -> dict[str, Any]:
    return pod(name, claims={"gpu": claim_name}, use_claims=True, scheduler="dra-scheduler", image=PAUSE)


def extended_pod(name: str, count: int = 1) -> dict[str, Any]:
    container = {"name": "main", "image": PAUSE, "resources": {"limits": {RESOURCE: str(count)}}}
    return pod(name, containers=[container])


def ready_condition(api: FakeApiServer, claim_name: str) -> dict[str, Any]:
    """What the driver writes: `ready` True for every allocated device, guarded by the claim's resourceVersion."""
    current = api.get("resourceclaims", "default", claim_name, group="resource.k8s.io")
    assert current is not None
    results = current["status"]["allocation"]["devices"]["results"]
    devices = [
        {
            "driver": r["driver"],
            "pool": r["pool"],
            "device": r["device"],
            "conditions": [
                {"type": "ready", "status": "True", "reason": "Driver", "message": "ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        }
        for r in results
    ]
    patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "status": {"devices": devices}}
    return api.patch("resourceclaims", "default", claim_name, patch, subresource="status", group="resource.k8s.io")
