"""Cluster mode under stress: bursts, dropped and expired watches, API faults, optional APIs.

Two layers:
- the reflectors in-process (`ApiSource` + `ClusterState` against an in-loop
  `FakeApiServer`), for what is hard to see end to end: which resourceVersion a
  resumed watch starts from, re-list on 410, discovery errors vs absence,
  readiness of optional kinds;
- `dra-extender serve --kubeconfig` as a subprocess against `python -m
  tests.fakeapi` (tests/e2e/cluster.py), compared object by object with the
  server's state and, for the derived state, with a freshly started extender.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from tests.fakeapi import FakeApiServer
from tracker import events as ev
from tracker.api_source import ApiSource
from tracker.state import ClusterState

pytestmark = pytest.mark.e2e

CRD_GROUP = "resource.dra-extender.io"
SLICES = (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE)


# ---------------------------------------------------------------------- builders


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


def gpu_slice(name: str, node_name: str, devices: int = 2, generation: int = 1, taints: dict[int, list[dict[str, str]]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node_name,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}}, **({"taints": taints[i]} if taints and i in taints else {})}
                for i in range(devices)
            ],
        },
    }


def rule(name: str, group: str = ev.GROUP_RESOURCE, version: str = "v1beta2", *, pool: str | None = None, effect: str = "NoSchedule", key: str = "example.com/broken") -> dict[str, Any]:
    selector: dict[str, str] = {"driver": "gpu.example.com"}
    if pool:
        selector["pool"] = pool
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": {"key": key, "value": "true", "effect": effect}},
    }


def slice_patch(name: str, pool: str | None = None, model: str = "h100", priority: int = 0) -> dict[str, Any]:
    flt: dict[str, str] = {"driver": "gpu.example.com"}
    if pool:
        flt["pool"] = pool
    return {
        "apiVersion": f"{CRD_GROUP}/v1alpha1",
        "kind": "ResourceSlicePatch",
        "metadata": {"name": name},
        "spec": {"devices": {"filter": flt, "priority": priority, "attributes": {"gpu.example.com/model": {"string": model}}}},
    }


# ---------------------------------------------------------------------- in-process reflectors


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(0.02)


class Reflecting:
    """An ApiSource feeding a ClusterState, against an in-loop fake API server."""

    def __init__(self, api: FakeApiServer, kubeconfig: str, **kw: Any) -> None:
        self.api = api
        self.source = ApiSource(kubeconfig=kubeconfig, **kw)
        self.state = ClusterState(CelEnvironment())
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Reflecting:
        self.task = asyncio.create_task(self.source.run(self.state))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def rv(self, kind: tuple[str, str] = SLICES) -> int:
        return int(self.source.last_resource_versions.get(kind) or 0)

    def requests_since(self, n: int, verb: str, resource: str) -> list[Any]:
        return [r for r in list(self.api.requests)[n:] if r.verb == verb and r.resource == resource]

    def view_matches_server(self) -> bool:
        for kind, group, plural in (
            (ev.NODE, "", "nodes"),
            (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "resourceslices"),
            (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "devicetaintrules"),
            (ev.DEVICE_TAINT_RULE, CRD_GROUP, "devicetaintrules"),
            (ev.RESOURCE_SLICE_PATCH, CRD_GROUP, "resourceslicepatches"),
        ):
            try:
                objs = self.api.list(plural, group=group or None)
            except KeyError:
                objs = []
            want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objs}
            if dict(self.state.versions.get((kind, group), {})) != want:
                return False
        return True


@pytest.fixture
async def fake(tmp_path):
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))  # type: ignore[attr-defined]
        yield api


async def test_resumed_watch_starts_from_the_last_bookmark_or_event(fake):
    """A dropped stream resumes from the newest RV it delivered: a bookmark's, then an event's."""
    fake.create(node("n1"))
    fake.create(gpu_slice("s1", "n1"))
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready, what="ready")
        listed = r.rv()
        # Changes elsewhere move the global RV: the slice watch only sees bookmarks.
        fake.create(node("n2"))
        await until(lambda: r.rv() > listed, what="a bookmark past the list's RV")
        bookmark = r.rv()
        n = len(fake.requests)
        assert fake.drop_watches(resource="resourceslices") == 1
        await until(lambda: r.requests_since(n, "watch", "resourceslices"), what="the slice watch to resume")
        resumed = r.requests_since(n, "watch", "resourceslices")[0]
        assert int(resumed.query["resourceVersion"]) >= bookmark > listed, (listed, bookmark, resumed.query)
        assert not r.requests_since(n, "list", "resourceslices"), "a resume must not re-list"

        # Now an event on the kind itself, then a drop before any newer bookmark can be sent.
        await until(lambda: fake.watches_on("resourceslices"), what="the watch to be open")
        created = fake.create(gpu_slice("s2", "n2"))
        event_rv = int(created["metadata"]["resourceVersion"])
        await until(lambda: "s2" in r.state.slices, what="the slice event")
        n = len(fake.requests)
        fake.drop_watches(resource="resourceslices")
        await until(lambda: r.requests_since(n, "watch", "resourceslices"), what="the slice watch to resume")
        assert int(r.requests_since(n, "watch", "resourceslices")[0].query["resourceVersion"]) >= event_rv


@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_expired_watch_relists_and_forgets_deleted_objects(fake, how):
    """410 Gone (as a watch ERROR event, or as the HTTP status) re-lists; what was deleted meanwhile goes."""
    fake.create(node("n1"))
    for i in range(3):
        fake.create(gpu_slice(f"s{i}", "n1"))
    fake.create(rule("r1", pool="s0"))
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready and r.view_matches_server(), what="initial sync")
        await until(lambda: fake.watches_on("resourceslices"), what="the watch to be open")
        # Hold the watches off while objects change and the history is compacted.
        fake.set_faults(error_rate=1.0, verbs=["watch"])
        fake.drop_watches()
        fake.delete("resourceslices", None, "s1")
        fake.delete("devicetaintrules", None, "r1", group=ev.GROUP_RESOURCE)
        fake.create(gpu_slice("s9", "n1"))
        compacted = fake.compact()
        n = len(fake.requests)
        if how == "http-410":
            fake.clear_faults()

            def gone(info):
                if info.verb == "watch" and int(info.query.get("resourceVersion") or 0) < compacted:
                    return 410, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410, "message": "too old"}
                return None

            fake.add_reactor(gone)
        else:
            fake.clear_faults()  # the fake answers an old RV with an ERROR 410 event
        await until(lambda: r.view_matches_server(), what="view == server after 410")
        assert "s1" not in r.state.slices and "s9" in r.state.slices
        assert (ev.GROUP_RESOURCE, "r1") not in r.state.rules
        assert not any(t.key == "example.com/broken" for d in r.state.devices.values() for t in d.taints)
        assert r.source.stats["relists_410"] >= 2  # slices and rules at least
        assert r.requests_since(n, "list", "resourceslices"), "no re-list after 410"
        relisted = [x for x in r.requests_since(n, "watch", "resourceslices") if int(x.query["resourceVersion"]) >= compacted]
        assert relisted, "the watch after the re-list must start from the new list's RV"
