"""An eviction controller on a fake clock against the fake API server over real HTTP.

The production path end to end: ApiSource reflectors feed a ClusterState,
the controller writes through ApiSource, the fake API server answers. Only
time is fake: `Cluster.run_until` jumps the clock to the controller's next
deadline whenever it is idle, so minutes of tolerationSeconds take
milliseconds, and every write is stamped with the fake time it happened at.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from allocator.cel import CelEnvironment
from allocator.pod_volumes import has_pvc_volumes
from controllers.eviction import EvictionController, Ownership, Settings
from kubesim import objects
from kubesim.clock import FakeClock
from kubesim.fakeapi import FakeApiServer, RequestInfo
from kubesim.lease import FakeLease
from serving.metrics import Metrics
from tracker.apiserver.source import ApiSource
from tracker.leadership_gate import LeadershipGate
from tracker.state import ClusterState

DRIVER = "gpu.example.com"
CRD = "resource.dra-extender.io"
T0 = 1_767_225_600.0  # the fake clock's start, 2026-01-01T00:00:00Z


@dataclass(frozen=True, slots=True)
class Write:
    """One write the fake API server received, at fake time `at`."""

    at: float
    verb: str
    resource: str  # pods, pods/status, pods/eviction, events, devicetaintrules/status...
    name: str  # the object written (for events: the involved object)
    body: Any


@dataclass
class Recorder:
    clock: FakeClock
    writes: list[Write] = field(default_factory=list)

    def __call__(self, info: RequestInfo) -> None:
        if info.verb not in ("create", "update", "patch", "delete"):
            return None
        body = info.json() if info.body else None
        name = info.name or ""
        if info.resource == "events" and isinstance(body, dict):
            name = (body.get("involvedObject") or {}).get("name", "")
        resource = info.resource + (f"/{info.subresource}" if info.subresource else "")
        self.writes.append(Write(self.clock.now(), info.verb, resource, name, body))
        return None

    def deletions(self) -> list[Write]:
        return [w for w in self.writes if w.verb == "delete" and w.resource == "pods"]

    def deleted(self) -> list[str]:
        return [w.name for w in self.deletions()]

    def events(self, message: str | None = None) -> list[Write]:
        return [w for w in self.writes if w.resource == "events" and (message is None or w.body.get("message") == message)]

    def for_pod(self, name: str) -> list[str]:
        """The pod's writes in order: event:<message>, condition:<reason>, delete, evict."""
        out = []
        for w in self.writes:
            if w.name != name:
                continue
            if w.resource == "events":
                out.append(f"event:{w.body.get('message')}")
            elif w.resource == "pods/status":
                out.append("condition:" + ",".join(c.get("reason", "") for c in w.body["status"]["conditions"]))
            elif w.resource == "pods" and w.verb == "delete":
                out.append("delete")
            elif w.resource == "pods/eviction":
                out.append("evict")
        return out


class CountedWrites:
    """The controller's source, counting the calls under way: the writes a settled cluster has none of."""

    def __init__(self, source: ApiSource) -> None:
        self._source = source
        self.under_way = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._source, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            self.under_way += 1  # at the call, before any task created from it first runs
            return self._answered(attr(*args, **kwargs))

        return call

    async def _answered(self, call: Coroutine[Any, Any, Any]) -> Any:
        try:
            return await call
        finally:
            self.under_way -= 1


class Cluster:
    """The fake API server plus one running controller (restartable)."""

    @property
    def leading(self) -> bool:
        return self.lease.held

    @leading.setter
    def leading(self, value: bool) -> None:
        """The Lease moves to this replica (True) or away from it, to the standby (False)."""
        self.lease.held, self.standby_lease.held = value, not value

    def __init__(self, api: FakeApiServer, tmp_path: Path) -> None:
        self.api = api
        self.kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        self.clock = FakeClock(T0)
        self.recorder = Recorder(self.clock)
        api.add_reactor(self.recorder)
        self.lease = FakeLease()  # this replica's
        self.standby_lease = FakeLease(held=False)  # a second replica's (tests/health/harness.py): held while this one's is not
        self.tasks: list[asyncio.Task] = []
        self.controller: EvictionController | None = None
        self.state: ClusterState | None = None
        self.writes: CountedWrites | None = None

    async def start(self, *, mode: str = "delete", evict_upstream: bool = False) -> EvictionController:
        self.state = ClusterState(CelEnvironment())
        source = ApiSource(kubeconfig=str(self.kubeconfig))
        settings = Settings(mode=mode, ownership=Ownership(evict_upstream=evict_upstream), debounce=0.005)  # type: ignore[arg-type]
        self.writes = CountedWrites(source)
        self.controller = EvictionController(
            self.state, self.writes, settings, leadership=LeadershipGate(self.lease), clock=self.clock, metrics=Metrics()
        )
        self.tasks = [asyncio.create_task(source.run(self.state)), asyncio.create_task(self.controller.run())]
        for _ in range(500):
            if self.state.ready:
                break
            await asyncio.sleep(0.01)
        assert self.state.ready
        await self.settle()
        return self.controller

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def settle(self, timeout: float = 10.0) -> None:
        """Until nothing is under way: the controller blocked on the clock with no tracker event
        pending, none of its writes unanswered, and the tracker caught up with the server.

        Each condition is a state, not a quiet period, so a fake second of leadership polling
        costs a few event-loop turns instead of tens of milliseconds of real time. Two checks a
        millisecond apart must agree, so a callback scheduled by the last answer has run too.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        steady = 0
        while steady < 2:
            await asyncio.sleep(0.001 if steady else 0)
            steady = steady + 1 if self._settled() else 0
            if loop.time() > deadline:
                ctrl = self.controller
                assert ctrl is not None and self.writes is not None
                raise TimeoutError(
                    f"the controller did not settle: idle={ctrl.idle} dirty={ctrl.dirty} woken={ctrl.woken} "
                    f"in_flight={ctrl.in_flight} writes={self.writes.under_way} caught_up={self._caught_up()} "
                    f"next deadline in {(self.clock.next_deadline() or 0) - self.clock.now()} s"
                )

    def _settled(self) -> bool:
        ctrl = self.controller
        assert ctrl is not None and self.writes is not None
        if not ctrl.idle or ctrl.woken or ctrl.in_flight or self.writes.under_way:
            return False
        # Blocked on the clock, not merely released by the last `advance_to` and yet to run:
        # the controller always waits with a deadline (leadership is polled), in the future.
        nxt = self.clock.next_deadline()
        return nxt is not None and nxt > self.clock.now() and self._caught_up()

    def _caught_up(self) -> bool:
        """The tracker holds every object at the server's resourceVersion (the watch events are in)."""
        assert self.state is not None
        for kind, group, plural in (
            ("Pod", "", "pods"),
            ("ResourceClaim", "resource.k8s.io", "resourceclaims"),
            ("ResourceSlice", "resource.k8s.io", "resourceslices"),
            ("DeviceTaintRule", "resource.k8s.io", "devicetaintrules"),
            ("DeviceTaintRule", CRD, "devicetaintrules"),
            ("PersistentVolumeClaim", "", "persistentvolumeclaims"),  # the controller writes volume taints' timeAdded
            ("PersistentVolume", "", "persistentvolumes"),
        ):
            want = {}
            for obj in self.api.list(plural, group=group or None):
                meta = obj["metadata"]
                if kind == "Pod" and not (obj.get("spec") or {}).get("resourceClaims") and not has_pvc_volumes(obj):
                    continue
                key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
                want[key] = meta["resourceVersion"]
            if want != self.state.versions.get((kind, group), {}):
                return False
        return True

    async def run_until(self, done: Callable[[], bool], *, within: float, step_limit: int = 5000) -> float:
        """Jump the fake clock from deadline to deadline until `done()`; returns the fake seconds taken."""
        start = self.clock.now()
        for _ in range(step_limit):
            await self.settle()
            if done():
                return self.clock.now() - start
            nxt = self.clock.next_deadline()
            assert nxt is not None, "nothing to wait for, and not done"
            if nxt - start > within:
                raise AssertionError(f"not done within {within} fake seconds")
            self.clock.advance_to(nxt)
        raise AssertionError("too many steps")

    async def advance(self, seconds: float) -> None:
        """Let `seconds` of fake time pass, stopping at every deadline on the way."""
        end = self.clock.now() + seconds
        while True:
            await self.settle()
            nxt = self.clock.next_deadline()
            if nxt is None or nxt > end:
                self.clock.advance_to(end)
                await self.settle()
                return
            self.clock.advance_to(nxt)


# ---------------------------------------------------------------------- objects


def gpu_slice(devices: int, *, node_name: str = "node-a", taints: dict[int, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The suite's slice: `devices` GPUs on `node_name` (kubesim/objects.py), named `<node>-gpus`."""
    return objects.gpu_slice(node_name, devices, driver=DRIVER, name=f"{node_name}-gpus", taints=taints)


def claim_and_pod(
    name: str,
    device: int,
    *,
    namespace: str = "default",
    tolerations: list[dict[str, Any]] | None = None,
    annotation_tolerations: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    node_name: str = "node-a",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod bound to `node_name` holding an allocated, reserved claim on gpu-<device>."""
    uid = f"uid-{namespace}-{name}"
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{device}"}
    if tolerations:
        result["tolerations"] = tolerations
    claim_meta: dict[str, Any] = {"name": f"{name}-gpu", "namespace": namespace}
    if annotation_tolerations:
        claim_meta["annotations"] = {"resource.dra-extender.io/tolerations": orjson.dumps({"gpu": annotation_tolerations}).decode()}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        },
        "status": {"phase": "Running"},
    }
    return claim, pod


def rule(name: str, effect: str = "NoExecute", *, group: str = CRD, selector: dict[str, Any] | None = None, **taint: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{group}/v1alpha1" if group == CRD else f"{group}/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector if selector is not None else {"driver": DRIVER, "pool": "node-a"},
            "taint": {"key": "example.com/broken", "effect": effect, **taint},
        },
    }


def seed(api: FakeApiServer, *objects: dict[str, Any]) -> None:
    for obj in objects:
        api.create(obj)
