"""Fresh nodes alike share their first-pass verdicts (extender/filter/shapes.py): the answers never change by it.

Each row is a cluster of partitioned GPUs in which some node differs from
the others in one thing allocation reads (a taint, a rule, a patch, a
counter consumed, a shared pool, its device names, its capacity, ...). The
same objects go to two services, one sharing verdicts between fresh nodes
alike and one computing every node's, and to a from-scratch allocation per
node; every claim shape's /filter and /prioritize answers must be the same
three ways, on every node, with node names sent and with nodes sent in full
(NodeList). Each row also says which nodes the shared path may tell a
verdict to and which it must compute: were a digest to leave out the field
a row changes, the differing node would be told its neighbours' verdict and
its answer would differ.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_pod
from extender.filter.request_nodes import RequestNodes
from extender.service import Service, build_service
from extender.wire import BindingArgs, parse_extender_args
from kubesim.null_source import NullSource
from kubesim.objects import claim, pod, rule
from serving.metrics import Metrics
from tests.extender.manifest_cluster import manifest_service
from tracker import events as ev
from tracker.state import ClusterState
from tracker.views import recompute

DRIVER = "gpu.example.com"
NODES = [f"n{i}" for i in range(6)]
GPUS = 2
PARTITIONS = (("small", "10Gi"), ("small", "10Gi"), ("big", "20Gi"), ("whole", "40Gi"))  # (profile, memory) per partition


def _device(name: str, profile: str, memory: str, gpu: int) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"profile": {"string": profile}, "model": {"string": "a"}},
        "capacity": {"memory": {"value": memory}},
        "consumesCounters": [{"counterSet": f"gpu-{gpu}", "counters": {"memory": {"value": memory}}}],
    }


def _devices(prefix: str = "gpu", gpus: int = GPUS) -> list[dict[str, Any]]:
    """The partitions of `gpus` GPUs, a device without counters and a device held in shares."""
    parts = [_device(f"{prefix}-{g}-{p}", profile, memory, g) for g in range(gpus) for p, (profile, memory) in enumerate(PARTITIONS)]
    plain = {"name": f"{prefix}-plain", "attributes": {"profile": {"string": "plain"}, "model": {"string": "a"}}}
    shared = {
        "name": f"{prefix}-shared",
        "attributes": {"profile": {"string": "shared"}, "model": {"string": "a"}},
        "allowMultipleAllocations": True,
        "capacity": {"bandwidth": {"value": "10"}},
    }
    return [*parts, plain, shared]


def _slices(node: str, devices: list[dict[str, Any]], gpus: int = GPUS, pool: str | None = None) -> list[dict[str, Any]]:
    """A node's pool: a device slice and a counter-set slice (one 40Gi set per GPU)."""
    pool = pool or f"{node}-pool"

    def one(name: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2}, **body}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}

    counters = [{"name": f"gpu-{g}", "counters": {"memory": {"value": "40Gi"}}} for g in range(gpus)]
    return [one(f"{node}-devices", {"devices": devices}), one(f"{node}-counters", {"sharedCounters": counters})]


def _node(name: str, zone: str = "west") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": zone}}}


def _rule(name: str, pool: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return rule(name, effect, selector={"driver": DRIVER, "pool": pool}, key="maintenance")


def _patch(name: str, pool: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{ev.GROUP_EXTENDER}/v1alpha1",
        "kind": "ResourceSlicePatch",
        "metadata": {"name": name},
        "spec": {"devices": {"filter": {"driver": DRIVER, "pool": pool}, "attributes": {f"{DRIVER}/model": attributes}}},
    }


def _selector(expression: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": expression}}]}


# claim name -> its request's `exactly` fields (one device of class gpu unless `count`)
SHAPES: dict[str, dict[str, Any]] = {
    "one": {},
    "two-whole": {
        "allocationMode": "ExactCount",
        "count": 2,
        **_selector(f'"memory" in device.capacity["{DRIVER}"] && device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'),
    },
    "big": _selector(f'device.attributes["{DRIVER}"].profile == "big"'),
    "model-b": _selector(f'device.attributes["{DRIVER}"].model == "b"'),
    "model-c": _selector(f'device.attributes["{DRIVER}"].model == "c"'),
    "tolerant-pair": {
        "allocationMode": "ExactCount",
        "count": 2,
        "tolerations": [{"key": "maintenance", "operator": "Exists"}],
        **_selector(f'device.attributes["{DRIVER}"].profile == "small"'),
    },
    "plain": _selector(f'device.attributes["{DRIVER}"].profile == "plain"'),
    "share6": {
        "capacity": {"requests": {"bandwidth": "6"}},
        **_selector(f'device.attributes["{DRIVER}"].profile == "shared"'),
    },
    "too-many": {"allocationMode": "ExactCount", "count": 9, **_selector(f'device.attributes["{DRIVER}"].profile != "big"')},
}


@dataclass
class Twins:
    """The same objects in two services: `shared` shares verdicts between fresh nodes alike, `computed` does not."""

    cel: CelEnvironment = field(default_factory=CelEnvironment)
    states: list[ClusterState] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    sent: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    rv: int = 10

    def __post_init__(self) -> None:
        for share in (True, False):
            state = ClusterState(self.cel)
            for kind, group in state.required:
                state.mark_synced(kind, group)
            service = build_service(state, NullSource(), Allocator(self.cel), Metrics(), placement_wait=0, claim_wait=0)
            if not share:
                service.outcomes.shapes = None
            self.states.append(state)
            self.services.append(service)

    @property
    def shared(self) -> Service:
        return self.services[0]

    @property
    def state(self) -> ClusterState:
        return self.states[0]

    def put(self, obj: dict[str, Any], etype: str = "MODIFIED") -> None:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        kind = obj["kind"]
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        group = obj["apiVersion"].rpartition("/")[0]
        self.sent[(kind, key)] = obj
        for state in self.states:
            state.apply(ev.ObjectEvent(etype, kind, group, key, copy.deepcopy(obj)))

    def allocate(self, claim_name: str, node: str) -> None:
        """The claim allocated on `node` as a fresh allocation there picks (its status written, as after a bind)."""
        key = f"default/{claim_name}"
        c = self.state.claims[key]
        outcome = self.state.allocate_on(Allocator(self.cel), self.state.nodes[node], [c])
        assert outcome.ok, outcome.failure
        raw = self.sent[(ev.RESOURCE_CLAIM, key)]
        self.put({**raw, "status": {"allocation": outcome.allocations[key].to_api()}})

    async def views_computed(self) -> None:
        """Until both states' background view work is done.

        A rule or patch whose views do not fit in the event handler's time slice (a
        loaded machine) is recomputed in the background, and until then the verbs
        answer "not ready" (or, later, lag) as in production; the rows compare answers
        over views that are complete, whichever service deferred.
        """
        async with asyncio.timeout(30):
            while any(t.get_name() == "warm-selectors" and not t.done() for t in asyncio.all_tasks()):
                await asyncio.sleep(0.001)

    async def check(self, sent_nodes: bool) -> None:
        """Every shape's answers: the same from both services and from a fresh allocation per node."""
        await self.views_computed()
        state = self.state
        reference = Allocator(self.cel)
        for name in SHAPES:
            raw_pod = self.sent[(ev.POD, f"default/p-{name}")]
            body: dict[str, Any] = {"Pod": raw_pod}
            items: list[dict[str, Any]] | None = None
            if sent_nodes:
                # n2 as the scheduler has it: in the zone the shared slice selects, unlike the state's copy
                items = [self.sent[(ev.NODE, n)] for n in NODES]
                items[2] = {**items[2], "metadata": {**items[2]["metadata"], "labels": {"zone": "east"}}}
                body["Nodes"] = {"items": items}
            else:
                body["NodeNames"] = NODES
            args = parse_extender_args(orjson.dumps(body))
            answers = []
            for service in self.services:
                passed, failed = await service.filter(args)
                answers.append((passed, failed, service.prioritize(args)))
                service.bind_decided(raw_pod["metadata"]["uid"])
            claims, problem = state.pod_claims(parse_pod(raw_pod))
            assert problem is None
            want_passed, want_failed, fresh = [], {}, []
            request_nodes = RequestNodes(state, items)
            for n in NODES:
                outcome = state.allocate_on(reference, request_nodes.resolve([n])[0][0], claims)
                if outcome.failure is None:
                    want_passed.append(n)
                else:
                    want_failed[n] = outcome.failure.message
                fresh.append(outcome)
            computed = self.services[1]
            want_scores = list(zip(NODES, computed.scores.rank("", claims, NODES, fresh, request_nodes), strict=True))
            assert answers[0] == answers[1], f"{name}: shared {answers[0]} != computed {answers[1]}"
            assert answers[0][:2] == (want_passed, want_failed), f"{name}: {answers[0][:2]} != fresh allocation"
            assert answers[0][2] == want_scores, f"{name}: scores {answers[0][2]} != {want_scores}"

    def told(self) -> set[str]:
        """The nodes the shared service now holds a shape for (fresh and shareable)."""
        shapes = self.shared.outcomes.shapes
        assert shapes is not None
        shape_of = shapes.current()
        return {n for n in NODES if shape_of(n) is not None}


def _base(t: Twins, *, devices: Callable[[str], list[dict[str, Any]]] = lambda _n: _devices()) -> None:
    t.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    for n in NODES:
        t.put(_node(n, "east" if n in ("n0", "n1") else "west"))
        for s in _slices(n, devices(n)):
            t.put(s)


def _pods(t: Twins) -> None:
    for name, exactly in SHAPES.items():
        t.put(claim(name, exactly=exactly, uid=f"uid-c-{name}"))
        t.put(pod(f"p-{name}", claims={"gpu": name}, meta={"uid": f"uid-p-{name}"}))


def _tainted_device(t: Twins) -> None:
    devices = _devices()
    for d in devices:
        if d["name"].startswith("gpu-0"):
            d["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    t.put(_slices("n2", devices)[0])


def _shared_pool(t: Twins) -> None:
    shared = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "shared-devices"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "shared", "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["east"]}]}]},
            "devices": [{"name": "net-0", "attributes": {"model": {"string": "c"}, "profile": {"string": "whole"}}}],
        },
    }
    t.put(shared)


def _mixed_pool(t: Twins) -> None:
    """The shared pool also has a slice local to n5: no node's shape includes it."""
    _shared_pool(t)
    local = _slices("n5", [{"name": "net-9", "attributes": {"model": {"string": "c"}}}], pool="shared")[0]
    local["metadata"]["name"] = "shared-local"
    local["spec"]["pool"]["resourceSliceCount"] = 1
    t.put(local)


def _held(t: Twins, shape: str) -> None:
    """A claim of `shape` allocated on n1."""
    t.put(claim("held", exactly=SHAPES[shape], uid="uid-c-held"))
    t.allocate("held", "n1")


def _held_unpublished(t: Twins) -> None:
    """A partition allocated on n1, then n1's driver republishes without it: its counters stay consumed."""
    _held(t, "big")
    t.put(_slices("n1", [d for d in _devices() if d["name"] != "gpu-0-2"])[0])
    t.put(_slices("n2", [d for d in _devices() if d["name"] != "gpu-0-2"])[0])  # n2: the same devices, nothing held


def _other_capacity(t: Twins) -> None:
    devices = _devices()
    devices[3]["capacity"]["memory"]["value"] = "30Gi"  # gpu-0-3 ("whole") reports less than its counters take
    t.put(_slices("n5", devices)[0])


def _other_counters(t: Twins) -> None:
    """n4 and n5 alike, each with a GPU that cannot hold its whole partition: the failure names the node's pool."""
    for n in ("n4", "n5"):
        counters = _slices(n, _devices())[1]
        counters["spec"]["sharedCounters"][1]["counters"]["memory"]["value"] = "20Gi"
        t.put(counters)


def _node_local_selector_only(t: Twins) -> None:
    """Same devices, but n3's pool spans a second slice published for n3 later (three slices, one pool)."""
    extra = _slices("n3", [_device("gpu-9-0", "whole", "40Gi", 0)])[0]
    extra["metadata"]["name"] = "n3-devices-extra"
    extra["spec"]["pool"]["resourceSliceCount"] = 3
    for s in _slices("n3", _devices()):
        s["spec"]["pool"]["resourceSliceCount"] = 3
        t.put(s)
    t.put(extra)


# (row, what sets the difference up, nodes that must compute rather than be told a neighbour's verdict)
ROWS: list[tuple[str, Callable[[Twins], None], set[str]]] = [
    ("alike", lambda t: None, set()),
    ("taint on one node's devices", _tainted_device, set()),
    ("DeviceTaintRule on one pool", lambda t: t.put(_rule("r-n3", "n3-pool")), set()),
    ("None-effect rule on one pool", lambda t: t.put(_rule("r-n3", "n3-pool", "None")), set()),
    ("patch on one node", lambda t: t.put(_patch("p-n1", "n1-pool", {"string": "b"})), set()),
    ("counter consumed on one node", lambda t: _held(t, "big"), {"n1"}),
    ("a device held whole on one node", lambda t: _held(t, "plain"), {"n1"}),
    ("a share held on one node", lambda t: _held(t, "share6"), {"n1"}),
    ("a held partition no longer published", _held_unpublished, {"n1"}),
    ("shared pool reachable from two nodes", _shared_pool, set()),
    ("a pool with a node-local and a shared slice", _mixed_pool, set(NODES)),
    ("different device names", lambda t: t.put(_slices("n4", _devices("acc"))[0]), set()),
    ("other capacity on one node", _other_capacity, set()),
    ("other counters on two nodes", _other_counters, set()),
    ("a pool of three slices on one node", _node_local_selector_only, set()),
    ("more GPUs on one node", lambda t: [t.put(s) for s in _slices("n5", _devices(gpus=3), gpus=3)], set()),
]


@pytest.fixture(params=["idle", "loaded"])
def machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """ "loaded": no view work fits in an event handler's time slice, so every recompute runs in the background
    (what a busy machine does at random); the answers must not change by it."""
    if request.param == "loaded":
        monkeypatch.setattr(recompute, "SLICE_HANDLER_SECONDS", 0.0)
        monkeypatch.setattr(recompute, "WARM_SLICE_SECONDS", 0.0)
    return str(request.param)


@pytest.mark.parametrize("sent_nodes", [False, True], ids=["node names", "NodeList"])
@pytest.mark.parametrize(("setup", "computes"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_shared_answers_equal_computed_ones(
    setup: Callable[[Twins], None], computes: set[str], sent_nodes: bool, machine: str
) -> None:
    t = Twins()
    _base(t)
    setup(t)
    _pods(t)
    assert not computes & t.told(), "a node that is not fresh or shares a pool must compute its verdicts"
    await t.check(sent_nodes)
    if computes != set(NODES):
        assert t.shared.outcomes.shared > 0, "no verdict was shared: the row would not see a wrong one"
    await t.check(sent_nodes)  # from the caches, after a first pass that shared


# (row, the change that makes n1 stop being fresh or alike)
CHANGES: list[tuple[str, Callable[[Twins], None]]] = [
    ("an allocation", lambda t: t.allocate("held", "n1")),
    ("a taint rule", lambda t: t.put(_rule("r-n1", "n1-pool"))),
    ("a slice update", lambda t: t.put(_slices("n1", _devices()[4:])[0])),
    ("a patch", lambda t: t.put(_patch("p-n1", "n1-pool", {"string": "b"}))),
]


@pytest.mark.parametrize("change", [c[1] for c in CHANGES], ids=[c[0] for c in CHANGES])
async def test_a_node_that_changes_after_sharing_no_longer_takes_a_shared_verdict(change: Callable[[Twins], None]) -> None:
    t = Twins()
    _base(t)
    t.put(claim("held", exactly={"allocationMode": "ExactCount", "count": 2, **SHAPES["two-whole"]}, uid="uid-c-held"))
    _pods(t)
    await t.check(sent_nodes=False)
    assert "n1" in t.told() and t.shared.outcomes.shared > 0
    change(t)
    await t.check(sent_nodes=False)
    await t.check(sent_nodes=True)


async def test_bind_on_a_node_told_its_verdict_allocates_that_nodes_own_devices(tmp_path: Path) -> None:
    """A told verdict only answers /filter: /bind allocates again against the live state (binder._decide), here the node's own GPU."""
    from tests.extender.test_verdict_prefetch import NODES as PREFETCH_NODES
    from tests.extender.test_verdict_prefetch import _args, _cluster

    directory = tmp_path / "cluster"
    _cluster(directory, dict.fromkeys(PREFETCH_NODES, 1))
    service, task = await manifest_service(directory, offer_nodes=0, placement_wait=0.2)
    try:
        passed, _ = await service.filter(_args("p1"))
        assert passed == PREFETCH_NODES
        assert service.outcomes.shared == len(PREFETCH_NODES) - 1, "every node but the first was told its verdict"
        service.bind_decided("uid-p1")
        node = PREFETCH_NODES[-1]
        assert await service.bind(BindingArgs("p4", "default", "uid-p4", node)) is None
        allocation = service.state.claims["default/c4"].allocation
        assert allocation is not None
        assert [(r.pool, r.device) for r in allocation.results] == [(node, "gpu-0")]
        passed, failed = await service.filter(_args("p5"))
        assert node in failed and node not in passed, "its only GPU is taken: the node is no longer fresh"
    finally:
        task.cancel()
