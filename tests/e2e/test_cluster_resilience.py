"""Cluster mode under stress: bursts, dropped and expired watches, API faults, optional APIs.

Two layers:
- the reflectors in-process (`ApiSource` + `ClusterState` against an in-loop
  `FakeApiServer`), for what is hard to see end to end: which resourceVersion a
  resumed watch starts from, re-list on 410, discovery errors vs absence,
  readiness of optional kinds;
- `dra-extender serve --kubeconfig` as a subprocess against `python -m
  kubesim.fakeapi` (tests/e2e/cluster.py), compared object by object with the
  server's state and, for the derived state, with a freshly started extender.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from allocator.cel import CelEnvironment
from kubesim import objects
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import gpu_slice, node
from tests.e2e.cluster import ApiError, FakeApi, cluster_extender, extender_view, view_diff, wait_converged, wait_for
from tests.e2e.harness import DEMO, Extender, demo_pod_args, filter_args
from tracker import events as ev
from tracker.apiserver.source import ApiSource
from tracker.state import ClusterState

CRD_GROUP = "resource.dra-extender.io"
SLICES = (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE)


# ---------------------------------------------------------------------- builders


def rule(name: str, group: str = ev.GROUP_RESOURCE, version: str = "v1beta2", *, pool: str | None = None, **taint: Any) -> dict[str, Any]:
    """A rule on gpu.example.com's devices (of `pool`, if given) valued "true" (kubesim/objects.py)."""
    selector = {"driver": "gpu.example.com", **({"pool": pool} if pool else {})}
    return objects.rule(name, group=group, version=version, selector=selector, value="true", **taint)


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
    fake.create(gpu_slice("n1", 2, name="s1", pool="s1", model="a100"))
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
        created = fake.create(gpu_slice("n2", 2, name="s2", pool="s2", model="a100"))
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
        fake.create(gpu_slice("n1", 2, name=f"s{i}", pool=f"s{i}", model="a100"))
    fake.create(rule("r1", pool="s0"))
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready and r.view_matches_server(), what="initial sync")
        await until(lambda: fake.watches_on("resourceslices"), what="the watch to be open")
        # Hold the watches off while objects change and the history is compacted.
        fake.set_faults(error_rate=1.0, verbs=["watch"])
        fake.drop_watches()
        fake.delete("resourceslices", None, "s1")
        fake.delete("devicetaintrules", None, "r1", group=ev.GROUP_RESOURCE)
        fake.create(gpu_slice("n1", 2, name="s9", pool="s9", model="a100"))
        compacted = fake.compact()
        n = len(fake.requests)
        if how == "http-410":
            fake.clear_faults()

            def gone(info):
                if info.verb == "watch" and int(info.query.get("resourceVersion") or 0) < compacted:
                    return 410, {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "Expired",
                        "code": 410,
                        "message": "too old",
                    }
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
        await until(
            lambda: [x for x in r.requests_since(n, "watch", "resourceslices") if int(x.query["resourceVersion"]) >= compacted],
            what="a watch from the new list's RV",
        )


async def test_paginated_list_survives_an_expired_continue_token_and_a_failed_page(fake):
    """A list of 1,200 nodes takes three pages; a 410 on a continue token starts over, a 500 backs off and retries."""
    fake.load({"apiVersion": "v1", "kind": "List", "items": [node(f"n{i:04}") for i in range(1200)]})
    seen: list[str] = []

    def meddle(info):
        if info.verb != "list" or info.resource != "nodes" or not info.query.get("continue"):
            return None
        seen.append(info.query["continue"])
        if len(seen) == 1:  # the second page: the object set changes and the history goes
            fake.delete("nodes", None, "n0000")
            fake.create(node("late"))
            fake.compact()
        elif len(seen) == 3:  # the second page of the second try
            return 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "message": "injected"}
        return None

    fake.add_reactor(meddle)
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready, what="ready")
        assert len(seen) >= 5  # 2nd page (410), 2nd page (500), then a full list's 2nd and 3rd
        assert len(r.state.nodes) == 1200 and "late" in r.state.nodes and "n0000" not in r.state.nodes
        assert r.view_matches_server()
        lists = [x for x in fake.requests if x.verb == "list" and x.resource == "nodes"]
        assert [x.status for x in lists].count(410) == 1 and [x.status for x in lists].count(500) == 1, [x.status for x in lists]


async def test_discovery_errors_are_not_absence(fake):
    """An optional API whose discovery answers 500 keeps its objects (and its reflector)."""
    fake.create(node("n1"))
    fake.create(gpu_slice("n1", 2, name="s0", pool="s0", model="a100"))
    fake.create(rule("upstream", pool="s0"))
    fake.create(rule("own", CRD_GROUP, "v1alpha1", pool="s0", key="example.com/own"))
    fake.create(slice_patch("p1"))
    async with Reflecting(fake, fake.kubeconfig, optional_recheck_seconds=0.1) as r:
        await until(lambda: r.state.ready and r.view_matches_server(), what="initial sync")
        n = len(fake.requests)
        fake.set_faults(error_rate=1.0, paths=[r"^/apis/resource\.k8s\.io/v1[a-z0-9]*$", r"^/apis/resource\.dra-extender\.io/v1alpha1$"])
        await until(lambda: sum(1 for x in list(fake.requests)[n:] if x.fault) >= 8, what="several failed discovery rounds")
        assert (ev.GROUP_RESOURCE, "upstream") in r.state.rules and (CRD_GROUP, "own") in r.state.rules
        assert "p1" in r.state.patches
        taints = {t.key for t in r.state.devices[next(iter(r.state.devices))].taints}
        assert {"example.com/broken", "example.com/own"} <= taints
        # The reflectors were left running: a change still arrives.
        fake.patch("devicetaintrules", None, "own", {"spec": {"taint": {"value": "changed"}}}, group=CRD_GROUP)
        await until(lambda: r.view_matches_server(), what="the change through the untouched reflector")


async def test_discovery_errors_at_startup_hold_readiness(fake):
    """Unknown is not absent: while discovery fails, the optional kinds are not synced; retried soon, not in 60 s."""
    fake.create(node("n1"))
    fake.create(gpu_slice("n1", 2, name="s0", pool="s0", model="a100"))
    fake.create(rule("upstream", pool="s0"))
    fake.set_faults(error_rate=1.0, paths=[r"^/apis/resource\.k8s\.io/v1[a-z0-9]*$", r"^/apis/resource\.dra-extender\.io/v1alpha1$"])
    async with Reflecting(fake, fake.kubeconfig) as r:  # the production recheck interval (60 s)
        await until(lambda: sum(1 for x in fake.requests if x.fault) >= 4, what="failed discovery, retried")
        assert not r.state.ready
        assert any("DeviceTaintRule" in m for m in r.state.missing()), r.state.missing()
        fake.clear_faults()
        await until(lambda: r.state.ready, timeout=15, what="ready once discovery answers")
        assert (ev.GROUP_RESOURCE, "upstream") in r.state.rules


async def test_a_watch_that_ends_at_once_backs_off(fake):
    """A server that accepts watches and ends them at once, delivering nothing, is not hammered."""

    def empty_watch(info):
        return (200, {"kind": "Status"}) if info.verb == "watch" and info.resource == "resourceclaimtemplates" else None

    fake.add_reactor(empty_watch)
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready, what="ready")
        started = time.monotonic()
        n = len(fake.requests)
        await asyncio.sleep(3)
        watches = r.requests_since(n, "watch", "resourceclaimtemplates")
        # Backoff 0.2 s doubling, jittered x0.5-1.5: at most 6 in 3 s; a hot loop makes hundreds.
        assert 1 <= len(watches) <= 8, f"{len(watches)} watches in {time.monotonic() - started:.1f}s"


async def test_ready_waits_for_served_optional_kinds(fake):
    """Ready means complete: a served DeviceTaintRule API is listed before /readyz says so."""
    fake.create(node("n1"))
    fake.create(gpu_slice("n1", 2, name="s0", pool="s0", model="a100"))
    fake.create(rule("upstream", pool="s0"))
    fake.create(rule("own", CRD_GROUP, "v1alpha1", pool="s0"))
    fake.create(slice_patch("p1"))
    fake.set_faults(latency_ms=2500, verbs=["list"], paths=["devicetaintrules", "resourceslicepatches"])
    async with Reflecting(fake, fake.kubeconfig) as r:
        await until(lambda: r.state.ready, what="ready")
        assert (ev.GROUP_RESOURCE, "upstream") in r.state.rules
        assert (CRD_GROUP, "own") in r.state.rules
        assert "p1" in r.state.patches


async def test_optional_group_missing_then_served(fake, caplog):
    """A missing CRD group: ready anyway, logged once, picked up when served (short recheck here)."""
    fake.set_served(CRD_GROUP, served=False)
    fake.create(node("n1"))
    fake.create(gpu_slice("n1", 2, name="s0", pool="s0", model="a100"))
    caplog.set_level(logging.INFO, logger="dra_extender.source")
    async with Reflecting(fake, fake.kubeconfig, optional_recheck_seconds=0.1) as r:
        await until(lambda: r.state.ready, what="ready without the CRDs")
        await until(lambda: len([x for x in fake.requests if x.path.startswith(f"/apis/{CRD_GROUP}")]) >= 6, what="several rechecks")
        missing = [
            m
            for m in caplog.records
            if m.getMessage() == "optional API not served; checking again periodically"
            and "dra-extender.io" in str(getattr(m, "resource", ""))
        ]
        assert len(missing) == 1, [m.__dict__ for m in missing]
        assert not [x for x in fake.requests if x.path.startswith(f"/apis/{CRD_GROUP}") and x.verb in ("list", "watch")]
        fake.create(rule("own", CRD_GROUP, "v1alpha1", pool="s0"))
        fake.create(slice_patch("p1"))
        fake.set_served(CRD_GROUP, served=True)
        await until(lambda: (CRD_GROUP, "own") in r.state.rules and "p1" in r.state.patches, what="the CRD objects")
        await until(lambda: r.view_matches_server(), what="view == server")


# ---------------------------------------------------------------------- end to end: helpers


def percentile(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def node_names(api: FakeApi) -> list[str]:
    return sorted(o["metadata"]["name"] for o in api.list("Node"))


def filter_answer(ext: Extender, body: dict[str, Any]) -> dict[str, Any]:
    r = ext.post("filter", body)
    assert r.status_code == 200, r.text
    return r.json()


def devices_page(ext: Extender) -> list[dict[str, Any]]:
    r = ext.http.get("/debug/devices", params={"limit": 5000})
    assert r.status_code == 200, r.text
    return r.json()["items"]


DEMO_PODS = ("trainer", "maintenance-job", "pair", "templated", "gpu-and-nic")


class Burst:
    """Seeded random valid changes through the API, with a small model of what exists.

    Creates, updates and deletes Nodes, ResourceSlices, ResourceClaims (status
    allocations included, never two claims on one device), Pods with and without
    claims, DeviceClasses, DeviceTaintRules of both groups and ResourceSlicePatches.
    Demo objects are updated but not deleted, so the demo pods' answers stay interesting.
    """

    EFFECTS = ("NoSchedule", "NoExecute", "None")

    def __init__(self, api: FakeApi, seed: int) -> None:
        self.api = api
        self.rng = random.Random(seed)
        self.counter = 0
        self.changes = 0
        self.nodes = set(node_names(api))
        self.demo_nodes = set(self.nodes)
        self.slices = {
            o["metadata"]["name"]: o["spec"]["pool"]["name"] for o in api.list("ResourceSlice") if o["spec"]["driver"] == "gpu.example.com"
        }
        self.demo_slices = set(self.slices)
        self.claims: dict[str, str | None] = {"gpu-claim": None, "templated-gpu-x7k2p": None}  # name -> allocated device key
        self.demo_claims = set(self.claims)
        self.allocated: dict[tuple[str, str, str], str] = {}
        self.pods: set[str] = set()
        self.classes: set[str] = set()
        self.rules: dict[str, set[str]] = {
            ev.GROUP_RESOURCE: {o["metadata"]["name"] for o in api.list("DeviceTaintRule")},
            CRD_GROUP: set(),
        }
        self.demo_rules = set(self.rules[ev.GROUP_RESOURCE])
        self.patches: set[str] = set()
        self.deleted: list[tuple[str, str]] = []  # (view kind, key)

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"burst-{prefix}-{self.counter}"

    def pools(self) -> list[str]:
        return sorted(set(self.slices.values()))

    # -------------------------------------------------------------- one change

    def step(self) -> None:
        kind = self.rng.choices(
            ["node", "slice", "claim", "pod", "class", "rule", "own-rule", "patch"],
            weights=[10, 20, 22, 18, 6, 10, 8, 6],
        )[0]
        getattr(self, "_" + kind.replace("-", "_"))()
        self.changes += 1

    def _pick_op(self, existing: int, deletable: int) -> str:
        ops = ["create", "create"]  # populations grow, so there is plenty to update and delete
        if existing:
            ops += ["update", "update"]
        if deletable:
            ops.append("delete")
        return self.rng.choice(ops)

    def _node(self) -> None:
        op = self._pick_op(len(self.nodes), len(self.nodes - self.demo_nodes))
        if op == "create":
            name = self.name("node")
            self.api.create(node(name, {"zone": self.rng.choice(["east", "west"])}))
            self.nodes.add(name)
        elif op == "update":
            name = self.rng.choice(sorted(self.nodes))
            self.api.mutate("Node", None, name, lambda o: o["metadata"].setdefault("labels", {}).update(burst=str(self.counter)))
        else:
            name = self.rng.choice(sorted(self.nodes - self.demo_nodes))
            self.api.delete("Node", None, name)
            self.nodes.discard(name)
            self.deleted.append(("Node", name))

    def _slice_taints(self, devices: int) -> dict[int, list[dict[str, str]]]:
        taints: dict[int, list[dict[str, str]]] = {}
        for i in range(devices):
            if self.rng.random() < 0.3:
                taints[i] = [
                    {
                        "key": "gpu.example.com/xid",
                        "value": str(self.rng.randint(1, 99)),
                        "effect": self.rng.choice(self.EFFECTS),
                        "timeAdded": "2026-01-01T00:00:00Z",
                    }
                ]
        return taints

    def _slice(self) -> None:
        op = self._pick_op(len(self.slices), len(set(self.slices) - self.demo_slices))
        if op == "create":
            name = self.name("slice")
            self.api.create(
                gpu_slice(
                    self.rng.choice(sorted(self.nodes)),
                    self.rng.randint(1, 4),
                    name=name,
                    pool=name,
                    model="a100",
                    taints=self._slice_taints(4),
                )
            )
            self.slices[name] = name
        elif op == "update":
            name = self.rng.choice(sorted(self.slices))
            taints = self._slice_taints(4)

            def change(o: dict[str, Any]) -> None:
                o["spec"]["pool"]["generation"] += 1
                for i, d in enumerate(o["spec"]["devices"]):
                    if i in taints:
                        d["taints"] = taints[i]
                    else:
                        d.pop("taints", None)

            self.api.mutate("ResourceSlice", None, name, change)
        else:
            name = self.rng.choice(sorted(set(self.slices) - self.demo_slices))
            self.api.delete("ResourceSlice", None, name)
            del self.slices[name]
            self.deleted.append(("ResourceSlice.resource.k8s.io", name))

    def _claim(self) -> None:
        op = self._pick_op(len(self.claims), len(set(self.claims) - self.demo_claims))
        if op == "create":
            name = self.name("claim")
            request: dict[str, Any] = {"deviceClassName": "gpu.example.com"}
            if self.rng.random() < 0.5:
                request["tolerations"] = [
                    {"key": self.rng.choice(["example.com/broken", "gpu.example.com/xid", "example.com/maintenance"]), "operator": "Exists"}
                ]
            self.api.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
                }
            )
            self.claims[name] = None
        elif op == "update":
            name = self.rng.choice(sorted(self.claims))
            if self.claims[name] is None:
                self._allocate(name)
            elif self.rng.random() < 0.7:
                self._deallocate(name)
            else:
                self.api.mutate(
                    "ResourceClaim", "default", name, lambda o: o["metadata"].setdefault("labels", {}).update(burst=str(self.counter))
                )
        else:
            name = self.rng.choice(sorted(set(self.claims) - self.demo_claims))
            self.api.delete("ResourceClaim", "default", name)
            self._free(name)
            del self.claims[name]
            self.deleted.append(("ResourceClaim.resource.k8s.io", f"default/{name}"))

    def _allocate(self, claim: str) -> None:
        slices = sorted(self.slices)
        self.rng.shuffle(slices)
        for slice_name in slices[:5]:
            obj = self.api.get("ResourceSlice", None, slice_name)
            if obj is None:
                continue
            free = [
                d["name"]
                for d in obj["spec"]["devices"]
                if ("gpu.example.com", obj["spec"]["pool"]["name"], d["name"]) not in self.allocated
            ]
            if not free:
                continue
            device = ("gpu.example.com", obj["spec"]["pool"]["name"], self.rng.choice(free))
            node_name = obj["spec"]["nodeName"]
            status = {
                "allocation": {
                    "devices": {"results": [{"request": "gpu", "driver": device[0], "pool": device[1], "device": device[2]}]},
                    "nodeSelector": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
                    },
                    "allocationTimestamp": "2026-01-01T00:00:00Z",
                },
            }
            self.api.mutate("ResourceClaim", "default", claim, lambda o, status=status: o.update(status=status), subresource="status")
            self.allocated[device] = claim
            self.claims[claim] = "/".join(device)
            return

    def _free(self, claim: str) -> None:
        for device in [d for d, c in self.allocated.items() if c == claim]:
            del self.allocated[device]
        self.claims[claim] = None

    def _deallocate(self, claim: str) -> None:
        self.api.mutate("ResourceClaim", "default", claim, lambda o: o.update(status={}), subresource="status")
        self._free(claim)

    def _pod(self) -> None:
        op = self._pick_op(len(self.pods), len(self.pods))
        if op == "create":
            name = self.name("pod")
            spec: dict[str, Any] = {"schedulerName": "dra-scheduler", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            if self.rng.random() < 0.6 and self.claims:
                claim = self.rng.choice(sorted(self.claims))
                spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
                spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
            self.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
            self.pods.add(name)
        elif op == "update":
            name = self.rng.choice(sorted(self.pods))
            self.api.mutate("Pod", "default", name, lambda o: o["metadata"].setdefault("labels", {}).update(burst=str(self.counter)))
        else:
            name = self.rng.choice(sorted(self.pods))
            self.api.delete("Pod", "default", name)
            self.pods.discard(name)
            self.deleted.append(("Pod", f"default/{name}"))

    def _class(self) -> None:
        op = self._pick_op(len(self.classes), len(self.classes))
        if op == "create":
            name = self.name("class") + ".example.com"
            self.api.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
                }
            )
            self.classes.add(name)
        elif op == "update":
            name = self.rng.choice(sorted(self.classes))
            model = self.rng.choice(["a100", "h100"])
            expression = f'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "{model}"'
            self.api.mutate("DeviceClass", None, name, lambda o: o.update(spec={"selectors": [{"cel": {"expression": expression}}]}))
        else:
            name = self.rng.choice(sorted(self.classes))
            self.api.delete("DeviceClass", None, name)
            self.classes.discard(name)
            self.deleted.append(("DeviceClass.resource.k8s.io", name))

    def _rules_of(self, group: str) -> None:
        names = self.rules[group]
        deletable = names - self.demo_rules
        op = self._pick_op(len(names), len(deletable))
        group_arg = CRD_GROUP if group == CRD_GROUP else None
        version = "v1alpha1" if group == CRD_GROUP else "v1beta2"
        if op == "create":
            name = self.name("rule")
            self.api.create(rule(name, group, version, pool=self.rng.choice([*self.pools(), None]), effect=self.rng.choice(self.EFFECTS)))
            names.add(name)
        elif op == "update":
            name = self.rng.choice(sorted(names))
            effect = self.rng.choice(self.EFFECTS)
            self.api.mutate(
                "DeviceTaintRule", None, name, lambda o: o["spec"]["taint"].update(effect=effect, value=str(self.counter)), group=group_arg
            )
        else:
            name = self.rng.choice(sorted(deletable))
            self.api.delete("DeviceTaintRule", None, name, group=group_arg)
            names.discard(name)
            self.deleted.append((f"DeviceTaintRule.{group}", name))

    def _rule(self) -> None:
        self._rules_of(ev.GROUP_RESOURCE)

    def _own_rule(self) -> None:
        self._rules_of(CRD_GROUP)

    def _patch(self) -> None:
        op = self._pick_op(len(self.patches), len(self.patches))
        if op == "create":
            name = self.name("patch")
            self.api.create(
                slice_patch(name, self.rng.choice([*self.pools(), None]), self.rng.choice(["a100", "h100"]), self.rng.randint(0, 3))
            )
            self.patches.add(name)
        elif op == "update":
            name = self.rng.choice(sorted(self.patches))
            model = self.rng.choice(["a100", "h100", "b200"])
            self.api.mutate(
                "ResourceSlicePatch",
                None,
                name,
                lambda o: o["spec"]["devices"]["attributes"].update({"gpu.example.com/model": {"string": model}}),
            )
        else:
            name = self.rng.choice(sorted(self.patches))
            self.api.delete("ResourceSlicePatch", None, name)
            self.patches.discard(name)
            self.deleted.append((f"ResourceSlicePatch.{CRD_GROUP}", name))

    # -------------------------------------------------------------- what to ask /filter about

    def filter_bodies(self, nodes: list[str]) -> list[dict[str, Any]]:
        bodies = [demo_pod_args(p, nodes) for p in DEMO_PODS]
        with_claims = []
        for name in sorted(self.pods):
            pod_obj = self.api.get("Pod", "default", name)
            if pod_obj and pod_obj["spec"].get("resourceClaims"):
                with_claims.append(filter_args(name, pod_obj["spec"]["resourceClaims"], nodes, uid=pod_obj["metadata"]["uid"]))
        return bodies + with_claims[:10]


# ---------------------------------------------------------------------- end to end: a burst of changes

CORE_PLURALS = ("nodes", "pods", "resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses")


def test_burst_with_dropped_and_expired_watches() -> None:
    """1,000 random changes while watches drop and the history is compacted: the view ends equal to the server."""
    api = FakeApi(DEMO, extra_args=("--bookmark-interval", "0.2"))
    ext = fresh = None
    try:
        ext = cluster_extender(api)
        ext.wait_ready(60)
        wait_converged(api, ext, 20)
        burst = Burst(api, seed=5055)
        drops_at, expire_at = {60, 140, 220, 300, 380, 460, 640, 780, 900}, 520
        drop_times: list[float] = []
        window: list[tuple[str, str]] = []
        relist_mark = compacted = 0
        while burst.changes < 1000:
            if burst.changes in drops_at:
                drops_at.discard(burst.changes)
                # Every reflector has resumed since the last drop (six core kinds, two rule groups,
                # patches), and has had a bookmark (every 0.2 s): a watch cut the moment it opens,
                # with nothing delivered, rightly counts as a failure in a row and backs off.
                wait_for(lambda: api.state()["watches"] >= 9, 15, what="all nine watches open")
                time.sleep(0.3)
                drop_times.append(time.time())
                assert api.drop_watches() >= 9
            if burst.changes == expire_at:
                # No watch can reopen while objects change and get deleted; then the
                # history goes, so every resume answers 410 and each reflector re-lists.
                api.faults(error_rate=1.0, verbs=["watch"])
                api.drop_watches()
                first = len(burst.deleted)
                for _ in range(40):
                    burst.step()
                window = burst.deleted[first:]
                compacted = api.compact()
                relist_mark = api.state()["requests"]
                api.clear_faults()
            burst.step()
        took = wait_converged(api, ext, 30)
        print(f"burst: converged {took:.2f}s after the last of {burst.changes} changes")

        view = extender_view(ext)
        assert len({kind for kind, _ in window}) >= 3, f"the seeded window should delete several kinds: {window}"
        for kind, key in burst.deleted:
            assert key not in view.get(kind, {}), f"{kind} {key} was deleted but is still in the view"
        after = api.requests(relist_mark)
        for plural in (*CORE_PLURALS, "devicetaintrules", "resourceslicepatches"):
            lists = [r for r in after if r["verb"] == "list" and r["resource"] == plural]
            assert lists, f"{plural}: no re-list after the compaction"
            resumed = [
                r for r in after if r["verb"] == "watch" and r["resource"] == plural and int(r["query"]["resourceVersion"]) < compacted
            ]
            assert resumed, f"{plural}: the first resume after the compaction should have tried the old RV (and got 410)"
        everything = api.requests(0)
        watch_paths = {r["path"] for r in everything if r["verb"] == "watch"}
        # 9 device kinds, PersistentVolumeClaims and PersistentVolumes; DeviceHealthPolicies are the controllers' (serve never watches them)
        assert len(watch_paths) == 11, watch_paths
        assert not any(p.endswith("/devicehealthpolicies") for p in watch_paths), watch_paths
        for dropped_at in drop_times:
            # A dropped stream is not a failure streak: each resume comes after one short
            # jittered delay (<= 0.75 s), not a backoff that doubles with every drop.
            for path in watch_paths:
                first = min(
                    (r["started"] for r in everything if r["path"] == path and r["verb"] == "watch" and r["started"] > dropped_at),
                    default=None,
                )
                # None: that kind's stream was not open at the drop (a list in progress, or a watch the fake
                # server had not registered yet), so there was nothing to resume; convergence is checked below.
                assert first is None or first - dropped_at < 5, f"{path} resumed {first - dropped_at}s after a drop"
        for plural in CORE_PLURALS:
            # The extender's first page carries no `continue` (this test's client always sends one).
            lists = [r for r in everything if r["verb"] == "list" and r["resource"] == plural and "continue" not in r["query"]]
            assert len(lists) == 2, f"{plural}: {len(lists)} lists; plain drops must resume, only the 410 re-lists"
        assert "watch expired (410 Gone); re-listing" in ext.logs()

        # The derived state (taints, patches, allocations) equals a fresh extender's.
        fresh = cluster_extender(api)
        fresh.wait_ready(60)
        assert view_diff(api.expected_view(), extender_view(fresh)) == {}, "ready before the view was complete"
        nodes = node_names(api)
        bodies = burst.filter_bodies(nodes)
        assert len(bodies) >= 10
        for body in bodies:
            old, new = filter_answer(ext, body), filter_answer(fresh, body)
            assert old == new, f"pod {body['Pod']['metadata']['name']}: long-running {old} != fresh {new}"
        assert devices_page(ext) == devices_page(fresh)
        answers = [filter_answer(ext, b) for b in bodies]
        assert any(a["NodeNames"] for a in answers) and any(a["FailedAndUnresolvableNodes"] for a in answers), answers
    finally:
        for proc in (fresh, ext):
            if proc is not None:
                proc.stop()
        api.stop()


# ---------------------------------------------------------------------- end to end: API faults


def retrying(call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """This test's own client retries the injected 500s (the extender's reflectors must cope alone)."""
    for _ in range(60):
        try:
            return call(*args, **kw)
        except ApiError as e:
            if e.status != 500:
                raise
    raise AssertionError(f"{call.__name__}: still failing after 60 tries")


class Changer(threading.Thread):
    """Keeps changing objects through the API, about ten times a second, without touching the demo pods' answers."""

    def __init__(self, api: FakeApi) -> None:
        super().__init__(daemon=True)
        self.api = copy.copy(api)
        self.api.http = httpx.Client(base_url=api.url, timeout=30)  # its own connection, its own thread
        self.stopping = threading.Event()
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        try:
            while not self.stopping.is_set():
                i = self.done
                what = rng.choice(["node", "label", "pod", "claim-label"])
                if what == "node":
                    retrying(self.api.create, node(f"faulty-node-{i}"))
                elif what == "label":
                    retrying(
                        self.api.mutate,
                        "Node",
                        None,
                        rng.choice(["node-a", "node-b", "node-c"]),
                        lambda o, i=i: o["metadata"].setdefault("labels", {}).update(touched=str(i)),
                    )
                elif what == "pod":
                    retrying(
                        self.api.create,
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "metadata": {"name": f"faulty-pod-{i}", "namespace": "default"},
                            "spec": {
                                "containers": [{"name": "c", "image": "pause"}],
                                "resourceClaims": [{"name": "gpu", "resourceClaimName": f"faulty-{i}"}],
                            },
                        },
                    )
                else:
                    retrying(
                        self.api.mutate,
                        "ResourceClaim",
                        "default",
                        "gpu-claim",
                        lambda o, i=i: o["metadata"].setdefault("labels", {}).update(touched=str(i)),
                    )
                self.done += 1
                self.stopping.wait(0.1)
        except BaseException as e:
            self.error = e
        finally:
            self.api.http.close()


class ReadyWatch(threading.Thread):
    """Polls /readyz every 50 ms; remembers every answer that was not 200."""

    def __init__(self, ext: Extender) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=ext.url, timeout=10)
        self.stopping = threading.Event()
        self.polls = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                r = self.http.get("/readyz")
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text[:200]}")
            except httpx.HTTPError as e:
                self.failures.append(repr(e))
            self.polls += 1
            self.stopping.wait(0.05)
        self.http.close()


def timed_filters(ext: Extender, bodies: list[dict[str, Any]], expected: list[dict[str, Any]], n: int) -> list[float]:
    latencies = []
    for i in range(n):
        body = bodies[i % len(bodies)]
        started = time.perf_counter()
        r = ext.post("filter", body)
        latencies.append(time.perf_counter() - started)
        assert r.status_code == 200, r.text
        assert r.json() == expected[i % len(bodies)], f"{body['Pod']['metadata']['name']}: the answer changed: {r.json()}"
    return latencies


def test_filter_keeps_answering_through_api_faults() -> None:
    """20 % of API calls fail and all take 200 ms more: /filter answers from the last view, as fast; ready throughout."""
    api = FakeApi(DEMO, extra_args=("--bookmark-interval", "0.5"))
    ext = None
    threads: list[Any] = []
    try:
        ext = cluster_extender(api)
        ext.wait_ready(60)
        wait_converged(api, ext, 20)
        nodes = node_names(api)
        bodies = [demo_pod_args(p, nodes) for p in DEMO_PODS]
        expected = [filter_answer(ext, b) for b in bodies]
        assert any(a["NodeNames"] for a in expected) and any(a["FailedAndUnresolvableNodes"] for a in expected)
        ready, changer = ReadyWatch(ext), Changer(api)
        threads = [ready, changer]
        for t in threads:
            t.start()
        timed_filters(ext, bodies, expected, 20)  # warm-up

        def phase() -> list[float]:
            # 4.5 s of back-to-back requests (as the scheduler sends them); the watches drop at
            # 0 and 1.5 s, so the reflectors come back (through the faults, later). Not later:
            # a reflector that met 3 errors in a row in its last second would still be in a
            # 2-6 s backoff when the faults clear, which is right but not what the 5 s bound tests.
            samples: list[float] = []
            started = time.monotonic()
            drops = 0
            while time.monotonic() - started < 4.5:
                if drops < 2 and time.monotonic() - started >= 1.5 * drops:
                    api.drop_watches()
                    drops += 1
                samples += timed_filters(ext, bodies, expected, 10)
            assert len(samples) >= 200
            return samples

        base = phase()  # the same load (changes flowing, watches dropping), no faults
        changes_before = changer.done
        mark = api.state()["requests"]
        api.faults(error_rate=0.2, latency_ms=200)
        faulty = phase()
        wait_for(lambda: changer.done >= changes_before + 5 or changer.error, 20, what="changes made during the faults")
        faulted = [r for r in api.requests(mark) if r["fault"] == "error"]
        assert faulted, "the faults never hit"
        # (The extender's own calls - re-watches, lists - all get the 200 ms; each fails at 20 %.)
        extender_faults = [r for r in faulted if r["verb"] in ("watch", "list")]
        changer.stopping.set()
        changer.join(30)
        assert changer.error is None, changer.error

        api.clear_faults()
        took = wait_converged(api, ext, 5)
        ready.stopping.set()
        ready.join(10)
        assert ready.polls > 80 and not ready.failures, ready.failures[:5]

        b50, b99, f50, f99 = (percentile(x, p) * 1000 for x, p in ((base, 50), (base, 99), (faulty, 50), (faulty, 99)))
        print(
            f"faults: /filter fault-free p50 {b50:.1f} ms p99 {b99:.1f} ms; faulty p50 {f50:.1f} ms p99 {f99:.1f} ms; "
            f"converged {took:.2f}s after clearing; {changer.done} changes, {len(faulted)} injected errors "
            f"({len(extender_faults)} on the extender's watches and lists)"
        )
        # 50 ms absorbs scheduler noise on a shared 2-core machine (three processes and two
        # threads here, other engineers' tests beside us: one lost time slice or GC pass is
        # 10-40 ms) yet stays below the 200 ms injected latency: a /filter that waited on a
        # single API call, or on a reflector holding a lock across one, would still fail.
        assert f99 <= 2 * b99 + 50, f"faulty p99 {f99:.1f} ms vs fault-free p99 {b99:.1f} ms"
        assert f50 <= 2 * b50 + 50, f"faulty p50 {f50:.1f} ms vs fault-free p50 {b50:.1f} ms"
    finally:
        for t in threads:
            t.stopping.set()
        if ext is not None:
            ext.stop()
        api.stop()


# ---------------------------------------------------------------------- end to end: optional APIs


def test_missing_crd_group_is_logged_once_and_not_hammered() -> None:
    """Without resource.dra-extender.io: ready, one log line, one discovery request, no list or watch.

    The production recheck is 60 s and there is no flag for it (docs/design.md#apis-read-and-written), so picking the group
    up once it is served is tested in-process (test_optional_group_missing_then_served).
    """
    api = FakeApi(DEMO, extra_args=("--no-crds",))
    ext = None
    try:
        ext = cluster_extender(api)
        ext.wait_ready(60)
        ready_at = time.time()
        answer = filter_answer(ext, demo_pod_args("trainer", ["node-a", "node-b", "node-c"]))
        assert "node-c" in answer["FailedAndUnresolvableNodes"], answer  # the upstream rule still applies
        time.sleep(4)  # the window in which requests are counted
        ours = [r for r in api.requests(0) if r["path"].startswith(f"/apis/{CRD_GROUP}")]
        assert 1 <= len(ours) <= 2 and all(r["path"] == f"/apis/{CRD_GROUP}/v1alpha1" and r["method"] == "GET" for r in ours), ours
        assert not [r for r in ours if r["started"] > ready_at], "discovery of the missing group repeated within seconds"
        lines = [line for line in ext.logs().splitlines() if "optional API not served" in line]
        assert len(lines) == 1 and "resource.dra-extender.io CRDs" in lines[0], lines
        assert ext.http.get("/readyz").status_code == 200
    finally:
        if ext is not None:
            ext.stop()
        api.stop()


@pytest.mark.parametrize("version", ["v1alpha3", "v1"])
def test_device_taint_rules_at_the_only_served_version(version: str) -> None:
    """DeviceTaintRules are read at whichever version the server has, listed and watched."""
    files = [p for p in sorted(DEMO.glob("*.yaml")) if p.name != "devicetaintrules.yaml"]
    api = FakeApi(*files, extra_args=("--dtr-versions", version))
    ext = None
    collection_path = f"/apis/resource.k8s.io/{version}/devicetaintrules"

    def create(obj: dict[str, Any]) -> None:
        r = api.http.post(collection_path, json=obj)
        assert r.status_code == 201, r.text

    def rule_taints() -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for d in devices_page(ext):
            for t in d["taints"]:
                if t["source"].startswith("DeviceTaintRule/"):
                    out.setdefault(t["source"], set()).add(f"{d['pool']}/{d['device']}")
        return out

    try:
        assert api.http.get("/apis/resource.k8s.io/v1beta2/devicetaintrules").status_code == 404
        create(rule("node-c-maintenance", version=version, pool="node-c", key="example.com/maintenance"))
        ext = cluster_extender(api)
        ext.wait_ready(60)
        assert rule_taints() == {"DeviceTaintRule/resource.k8s.io/node-c-maintenance": {"node-c/gpu-0", "node-c/gpu-1"}}
        if version == "v1alpha3":
            # A 1.33-1.34 rule may select by CEL: honoured (it matches nothing here), not widened to all devices.
            narrowed = rule("by-cel", version=version)
            narrowed["spec"]["deviceSelector"] = {
                "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "b200"'}}]
            }
            create(narrowed)
        create(rule("node-a-broken", version=version, pool="node-a"))  # watch events arrive in order: by-cel first
        wait_for(lambda: "DeviceTaintRule/resource.k8s.io/node-a-broken" in rule_taints(), 10, what="the watched rule")
        taints = rule_taints()
        assert "DeviceTaintRule/resource.k8s.io/by-cel" not in taints, taints
        if version == "v1alpha3":
            assert "by-cel" in extender_view(ext)["DeviceTaintRule.resource.k8s.io"]
        answer = filter_answer(ext, demo_pod_args("trainer", ["node-a", "node-b", "node-c"]))
        assert set(answer["FailedAndUnresolvableNodes"]) >= {"node-a", "node-c"}, answer
        watched = [r for r in api.requests(0) if r["path"] == collection_path and r["verb"] in ("list", "watch")]
        assert {r["verb"] for r in watched} == {"list", "watch"}, watched
    finally:
        if ext is not None:
            ext.stop()
        api.stop()
