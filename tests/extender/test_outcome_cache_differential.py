"""The shared verdict cache answers exactly as a from-scratch allocation per node would.

Random clusters go through random changes (slices, taint rules, node labels,
classes, claims allocated and freed); after every step each pod's /filter and
/prioritize answers from the service (cached, shared across pods, invalidated
by versions) must equal a fresh `Allocator.allocate` on every node.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_pod
from extender.filter.request_nodes import RequestNodes
from extender.service import build_service
from extender.wire import parse_extender_args
from kubesim.null_source import NullSource
from kubesim.objects import pod
from serving.metrics import Metrics
from tracker import events as ev
from tracker.state import ClusterState

DRIVER = "gpu.example.com"
NODES = [f"n{i}" for i in range(5)]


def _slice(node: str | None, gen: int, devices: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": node or "shared", "generation": gen, "resourceSliceCount": 1},
        "devices": devices,
    }
    if node is None:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["east"]}]}]}
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def _device(rng: random.Random, i: int) -> dict[str, Any]:
    d: dict[str, Any] = {"name": f"d{i}", "attributes": {"model": {"string": rng.choice("ab")}}}
    if rng.random() < 0.25:
        d["taints"] = [{"key": "health", "value": "x", "effect": rng.choice(["None", "NoSchedule", "NoExecute"])}]
    return d


def _claim(name: str, rng: random.Random) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": rng.choice([1, 1, 2])}
    if rng.random() < 0.5:
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{rng.choice("ab")}"'}}]
    if rng.random() < 0.4:
        exactly["tolerations"] = [{"key": rng.choice(["health", "maintenance", ""]), "operator": "Exists"}]
    if rng.random() < 0.2:
        exactly["capacity"] = {"requests": {"memory": str(rng.choice([1, 2]))}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return pod(name, claims={"c": claim}, meta={"uid": f"uid-{name}", "resourceVersion": "1"})


class World:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.cel = CelEnvironment()
        self.state = ClusterState(self.cel)
        self.service = build_service(self.state, NullSource(), Allocator(self.cel), Metrics(), placement_wait=0, claim_wait=0)
        self.reference = Allocator(self.cel)
        self.rv = 10
        self.sent: dict[tuple[str, str], dict[str, Any]] = {}  # the objects as last put (the state keeps them parsed)
        for kind, group in self.state.required:
            self.state.mark_synced(kind, group)
        self.put(
            ev.DEVICE_CLASS,
            "gpu",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        for n in NODES:
            self.put(ev.NODE, n, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"zone": "east"}}})
        self.pods: list[str] = []
        self.claims: list[str] = []

    def put(self, kind: str, key: str, obj: dict[str, Any], group: str | None = None, etype: str = "MODIFIED") -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        g = group if group is not None else (ev.GROUP_CORE if kind in (ev.NODE, ev.POD) else ev.GROUP_RESOURCE)
        self.sent[(kind, key)] = obj
        self.state.apply(ev.ObjectEvent(etype, kind, g, key, obj))

    def step(self) -> str:
        rng = self.rng
        action = rng.choice(
            ["slice", "slice", "shared", "partitions", "rule", "unrule", "label", "class", "claim", "claim", "allocate", "allocate", "free"]
        )
        if action == "slice":
            node = rng.choice(NODES)
            self.put(
                ev.RESOURCE_SLICE,
                f"s-{node}",
                _slice(node, rng.randint(1, 3), [_device(rng, i) for i in range(rng.randint(0, 3))], f"s-{node}"),
            )
        elif action == "shared":
            if rng.random() < 0.3:
                self.put(ev.RESOURCE_SLICE, "s-shared", {}, etype="DELETED")
            else:
                self.put(ev.RESOURCE_SLICE, "s-shared", _slice(None, 1, [_device(rng, i) for i in range(2)], "s-shared"))
        elif action == "partitions":
            # One pool over n0 and n1 drawing on one counter set (published with n0's slices):
            # an allocation on either node changes what the other can take.
            def part(name: str, node: str, body: dict[str, Any]) -> dict[str, Any]:
                spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": "part", "generation": 1, "resourceSliceCount": 3}, **body}
                return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}

            def partition(name: str) -> dict[str, Any]:
                size = rng.choice([2, 4, 6])
                d: dict[str, Any] = {
                    "name": name,
                    "attributes": {"model": {"string": rng.choice("ab")}},
                    "capacity": {"memory": {"value": str(size)}},
                    "consumesCounters": [{"counterSet": "gpu", "counters": {"memory": {"value": str(size)}}}],
                }
                if rng.random() < 0.3:
                    d["allowMultipleAllocations"] = True
                return d

            self.put(
                ev.RESOURCE_SLICE,
                "part-counters",
                part(
                    "part-counters",
                    "n0",
                    {"sharedCounters": [{"name": "gpu", "counters": {"memory": {"value": str(rng.choice([6, 8, 12]))}}}]},
                ),
            )
            self.put(ev.RESOURCE_SLICE, "part-n0", part("part-n0", "n0", {"devices": [partition("pa0"), partition("pa1")]}))
            self.put(ev.RESOURCE_SLICE, "part-n1", part("part-n1", "n1", {"devices": [partition("pb0"), partition("pb1")]}))
        elif action == "rule":
            pool = rng.choice([*NODES, "shared"])
            rule = {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"r-{pool}"},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": pool},
                    "taint": {"key": "maintenance", "value": "y", "effect": rng.choice(["NoSchedule", "None"])},
                },
            }
            self.put(ev.DEVICE_TAINT_RULE, f"r-{pool}", rule)
        elif action == "unrule":
            self.put(ev.DEVICE_TAINT_RULE, f"r-{rng.choice([*NODES, 'shared'])}", {}, etype="DELETED")
        elif action == "label":
            n = rng.choice(NODES)
            self.put(
                ev.NODE, n, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"zone": rng.choice(["east", "west"])}}}
            )
        elif action == "class":
            expr = rng.choice(
                [f'device.driver == "{DRIVER}"', f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model != "b"']
            )
            self.put(
                ev.DEVICE_CLASS,
                "gpu",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": "gpu"},
                    "spec": {"selectors": [{"cel": {"expression": expr}}]},
                },
            )
        elif action == "claim":
            i = len(self.claims)
            name = f"c{i}"
            self.claims.append(name)
            self.put(ev.RESOURCE_CLAIM, f"default/{name}", _claim(name, rng))
            self.pods.append(f"p{i}")
            self.put(ev.POD, f"default/p{i}", _pod(f"p{i}", name))
        elif action in ("allocate", "free") and self.claims:
            key = f"default/{rng.choice(self.claims)}"
            raw = self.sent.get((ev.RESOURCE_CLAIM, key))
            claim = self.state.claims.get(key)
            if raw is None or claim is None:
                return action
            if action == "free" or claim.allocation is not None:
                self.put(ev.RESOURCE_CLAIM, key, {**raw, "metadata": dict(raw["metadata"]), "status": {}})
                return "free"
            node = rng.choice(NODES)
            outcome = self.reference.allocate(
                self.state.nodes[node],
                [claim],
                self.state.queries.slices_for_node(node),
                self.state.classes,
                self.state.allocated_state,
                self.state.device,
            )
            if outcome.ok:
                self.put(
                    ev.RESOURCE_CLAIM,
                    key,
                    {**raw, "metadata": dict(raw["metadata"]), "status": {"allocation": outcome.allocations[key].to_api()}},
                )
        return action

    async def check(self) -> None:
        state = self.state
        for pod_name in self.pods:
            raw_pod = self.sent[(ev.POD, f"default/{pod_name}")]
            args = parse_extender_args(orjson.dumps({"Pod": raw_pod, "NodeNames": NODES}))
            passed, failed = await self.service.filter(args)
            claims, problem = state.pod_claims(parse_pod(raw_pod))
            assert problem is None
            want_passed, want_failed, fresh = [], {}, []
            for n in NODES:
                outcome = state.allocate_on(self.reference, state.nodes[n], claims)
                if outcome.ok:
                    want_passed.append(n)
                else:
                    want_failed[n] = outcome.failure.message  # type: ignore[union-attr]
                fresh.append(outcome)
            assert (passed, failed) == (want_passed, want_failed), pod_name
            got = self.service.prioritize(args)
            want_scores = list(
                zip(
                    NODES,
                    self.service.scores.rank(raw_pod["metadata"]["uid"], claims, NODES, fresh, RequestNodes(state, None)),
                    strict=True,
                )
            )
            assert got == want_scores, pod_name


# Seed 0 in the fast tier, all six in the full one (each is seconds of random churn).
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in range(1, 6))])
async def test_cached_answers_equal_fresh_allocation(seed: int) -> None:
    world = World(seed)
    for _ in range(4):
        world.step()
    for i in range(150):
        action = world.step()
        try:
            await world.check()
        except AssertionError as e:
            raise AssertionError(f"seed {seed}, step {i} ({action}): {e}") from e
    assert world.service.outcomes.hits > 0, "the cache was never used: the test would not see it go stale"


async def test_an_allocation_on_one_node_drops_verdicts_of_every_node_sharing_its_counters() -> None:
    """pa0 on n0 and pb0 on n1 draw on one 8-unit counter set: once pb0 (6) is allocated, pa0 (4) no longer fits on n0."""
    world = World(0)

    def part(name: str, node: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": "part", "generation": 1, "resourceSliceCount": 3}, **body}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}

    def partition(name: str, size: int) -> dict[str, Any]:
        return {"name": name, "consumesCounters": [{"counterSet": "gpu", "counters": {"memory": {"value": str(size)}}}]}

    world.put(
        ev.RESOURCE_SLICE,
        "part-counters",
        part("part-counters", "n0", {"sharedCounters": [{"name": "gpu", "counters": {"memory": {"value": "8"}}}]}),
    )
    world.put(ev.RESOURCE_SLICE, "part-n0", part("part-n0", "n0", {"devices": [partition("pa0", 4)]}))
    world.put(ev.RESOURCE_SLICE, "part-n1", part("part-n1", "n1", {"devices": [partition("pb0", 6)]}))
    for name in ("c0", "c1"):
        claim = _claim(name, random.Random(1))
        claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu"}
        world.claims.append(name)
        world.put(ev.RESOURCE_CLAIM, f"default/{name}", claim)
        world.pods.append(f"p-{name}")
        world.put(ev.POD, f"default/p-{name}", _pod(f"p-{name}", name))
    await world.check()
    raw_pod = world.sent[(ev.POD, "default/p-c0")]
    passed, _ = await world.service.filter(parse_extender_args(orjson.dumps({"Pod": raw_pod, "NodeNames": ["n0", "n1"]})))
    assert passed == ["n0", "n1"]
    key = "default/c1"
    outcome = world.state.allocate_on(world.reference, world.state.nodes["n1"], [world.state.claims[key]])
    assert outcome.ok and outcome.allocations[key].results[0].device == "pb0"
    world.put(
        ev.RESOURCE_CLAIM,
        key,
        {
            **world.sent[(ev.RESOURCE_CLAIM, key)],
            "metadata": dict(world.sent[(ev.RESOURCE_CLAIM, key)]["metadata"]),
            "status": {"allocation": outcome.allocations[key].to_api()},
        },
    )
    passed, failed = await world.service.filter(parse_extender_args(orjson.dumps({"Pod": raw_pod, "NodeNames": ["n0", "n1"]})))
    assert passed == [] and "counter" in failed["n0"], failed
    await world.check()
