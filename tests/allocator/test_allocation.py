"""Allocation semantics (docs/design.md#allocation), one named row per case, each run through
every path of the allocator (tests/allocator/paths.py): the same verdict on each, the same
devices unless the path's order defines others."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from allocator import failures as A  # noqa: N812 - A.REASON_* reads as the table of reasons
from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_device_taint_rule
from allocator.types import DeviceClass, DeviceID, Node, ResourceClaim
from tests.allocator.builders import (
    DRIVER,
    claim,
    dev,
    device_class,
    exactly,
    first_available,
    req,
    slice_,
    taint,
    view,
)
from tests.allocator.paths import PATHS, SPREAD_ORDER, allocator_for

GPU = device_class("gpu", f'device.driver == "{DRIVER}"')
BIG = device_class("big", f'device.attributes["{DRIVER}"].model == "big"')
SMALL = device_class("small", f'device.attributes["{DRIVER}"].model == "small"')
CLASSES = {c.meta.name: c for c in (GPU, BIG, SMALL)}
NODE = Node("node-1", {"zone": "a", "rack": "r1"})

TOL_OVERHEAT = {"key": "example.com/overheating", "operator": "Exists", "effect": "NoSchedule"}


def did(device: str, pool: str = "node-1", driver: str = DRIVER) -> DeviceID:
    return DeviceID(driver, pool, device)


@dataclass
class Case:
    name: str
    slices: list
    claims: list[ResourceClaim]
    want: dict[str, list[tuple[str, str]]] | None = None  # claim -> [(request, device)]
    spread: dict[str, list[tuple[str, str]]] | None = None  # the picks under spread, where its order differs from `want`
    fail: str | None = None  # substring of the failure message
    code: str | None = None
    allocated: set[DeviceID] = field(default_factory=set)
    node: Node = NODE
    classes: dict[str, DeviceClass] = field(default_factory=lambda: CLASSES)
    lookup: dict[DeviceID, object] = field(default_factory=dict)


def three(**kw):
    return slice_(
        "s1",
        [
            dev("gpu-0", {"model": "big", "numa": 0}),
            dev("gpu-1", {"model": "small", "numa": 1}),
            dev("gpu-2", {"model": "small", "numa": 1}),
        ],
        **kw,
    )


def partitions(gpus: int, parts: int) -> list:
    """`gpus` GPUs of 20Gi, each cut into `parts` partitions of 10Gi drawing on its own counter set: two slices of one pool."""
    devices = [
        dev(f"gpu-{g}-part-{p}", consumesCounters=[{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": "10Gi"}}}])
        for g in range(gpus)
        for p in range(parts)
    ]
    return [
        view(slice_("parts", devices, count=2)),
        view(slice_("counters", [], count=2, counters={f"gpu-{g}": {"memory": "20Gi"} for g in range(gpus)})),
    ]


CASES = [
    Case("count-default-one-picks-first", [view(three())], [claim("c", req("r"))], want={"default/c": [("r", "gpu-0")]}),
    Case(
        "count-two",
        [view(three())],
        [claim("c", req("r", count=2))],
        want={"default/c": [("r", "gpu-0"), ("r", "gpu-1")]},
    ),
    Case(
        "count-more-than-available",
        [view(three())],
        [claim("c", req("r", count=4))],
        fail="claim default/c, request r: 3 of 4 devices available",
    ),
    Case(
        "request-selector-narrows",
        [view(three())],
        [claim("c", req("r", selectors=[f'device.attributes["{DRIVER}"].numa == 1']))],
        want={"default/c": [("r", "gpu-1")]},
    ),
    Case("class-selector-narrows", [view(three())], [claim("c", req("r", "small"))], want={"default/c": [("r", "gpu-1")]}),
    Case(
        "class-missing",
        [view(three())],
        [claim("c", req("r", "nope"))],
        fail="device class nope not found",
        code=A.REASON_CLASS_MISSING,
    ),
    Case(
        "untolerated-noschedule-skipped",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("example.com/overheating", "NoSchedule", "true")]), dev("gpu-1")]))],
        [claim("c", req("r"))],
        want={"default/c": [("r", "gpu-1")]},
    ),
    Case(
        "untolerated-noschedule-reason",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("example.com/overheating", "NoSchedule", "true")])]))],
        [claim("c", req("r"))],
        fail="claim default/c, request r: 0 of 1 devices available: 1 tainted (example.com/overheating=true:NoSchedule not tolerated)",
        code=A.REASON_TAINTED,
    ),
    Case(
        "tolerated-noschedule",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("example.com/overheating", "NoSchedule", "true")])]))],
        [claim("c", req("r", tolerations=[TOL_OVERHEAT]))],
        want={"default/c": [("r", "gpu-0")]},
    ),
    Case(
        "untolerated-noexecute-skipped",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("gpu.example.com/xid", "NoExecute", "79")])]))],
        [claim("c", req("r"))],
        code=A.REASON_TAINTED,
        fail="gpu.example.com/xid=79:NoExecute not tolerated",
    ),
    Case(
        "noexecute-toleration-does-not-cover-noschedule",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("k", "NoSchedule")])]))],
        [claim("c", req("r", tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute"}]))],
        code=A.REASON_TAINTED,
    ),
    Case(
        "none-effect-never-blocks",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("gpu.example.com/unmonitored", "None")])]))],
        [claim("c", req("r"))],
        want={"default/c": [("r", "gpu-0")]},
    ),
    Case(
        "unknown-effect-acts-like-none",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("k", "FutureEffect")])]))],
        [claim("c", req("r"))],
        want={"default/c": [("r", "gpu-0")]},
    ),
    Case(
        "same-key-two-effects-both-apply",
        [view(slice_("s1", [dev("gpu-0", taints=[taint("k", "NoSchedule"), taint("k", "NoExecute")])]))],
        [claim("c", req("r", tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute"}]))],
        code=A.REASON_TAINTED,
    ),
    Case(
        "allocated-device-skipped",
        [view(three())],
        [claim("c", req("r"))],
        allocated={did("gpu-0")},
        want={"default/c": [("r", "gpu-1")]},
    ),
    Case(
        "allocated-reason",
        [view(slice_("s1", [dev("gpu-0"), dev("gpu-1", taints=[taint("t", "NoSchedule")])]))],
        [claim("c", req("r"))],
        allocated={did("gpu-0")},
        fail="0 of 1 devices available: 1 tainted (t:NoSchedule not tolerated), 1 allocated",
    ),
    Case(
        "admin-access-may-use-allocated",
        [view(slice_("s1", [dev("gpu-0")]))],
        [claim("c", req("r", admin=True))],
        allocated={did("gpu-0")},
        want={"default/c": [("r", "gpu-0")]},
    ),
    Case(
        "all-mode-takes-every-match",
        [view(three())],
        [claim("c", req("r", "small", mode="All"))],
        want={"default/c": [("r", "gpu-1"), ("r", "gpu-2")]},
    ),
    Case(
        "all-mode-fails-on-tainted",
        [view(slice_("s1", [dev("gpu-0"), dev("gpu-1", taints=[taint("t", "NoSchedule")])]))],
        [claim("c", req("r", mode="All"))],
        code=A.REASON_TAINTED,
        fail="asks for all 2 matching devices",
    ),
    Case(
        "all-mode-tolerated-taint-ok",
        [view(slice_("s1", [dev("gpu-0"), dev("gpu-1", taints=[taint("t", "NoSchedule")])]))],
        [claim("c", req("r", mode="All", tolerations=[{"key": "t", "operator": "Exists"}]))],
        want={"default/c": [("r", "gpu-0"), ("r", "gpu-1")]},
    ),
    Case(
        "all-mode-fails-on-allocated",
        [view(three())],
        [claim("c", req("r", mode="All"))],
        allocated={did("gpu-2")},
        code=A.REASON_ALLOCATED,
    ),
    Case(
        "all-mode-admin-access-on-allocated",
        [view(three())],
        [claim("c", req("r", "small", mode="All", admin=True))],
        allocated={did("gpu-2")},
        want={"default/c": [("r", "gpu-1"), ("r", "gpu-2")]},
    ),
    Case(
        "all-mode-fails-when-none-match",
        [view(three())],
        [claim("c", req("r", "gpu", mode="All", selectors=["false"]))],
        code=A.REASON_NO_DEVICES,
    ),
    Case(
        "all-mode-incomplete-pool-fails",
        [view(slice_("s1", [dev("gpu-0")], count=2))],
        [claim("c", req("r", mode="All"))],
        code=A.REASON_POOL_INCOMPLETE,
        fail="is currently being updated",
    ),
    Case(
        "exact-count-skips-incomplete-pool",
        [view(slice_("s1", [dev("gpu-0")], count=2, pool="p1")), view(slice_("s2", [dev("gpu-9")], pool="p2"))],
        [claim("c", req("r"))],
        want={"default/c": [("r", "gpu-9")]},
    ),
    Case(
        "exact-count-only-incomplete-pool",
        [view(slice_("s1", [dev("gpu-0")], count=2, pool="p1"))],
        [claim("c", req("r"))],
        code=A.REASON_POOL_INCOMPLETE,
        fail="pool gpu.example.com/p1 incomplete",
    ),
    Case(
        "newest-generation-only",
        [
            view(slice_("old", [dev("gpu-old")], pool="p", generation=1)),
            view(slice_("new", [dev("gpu-new")], pool="p", generation=2)),
        ],
        [claim("c", req("r", count=1))],
        want={"default/c": [("r", "gpu-new")]},
    ),
    Case(
        "newest-generation-never-older-even-if-short",
        [
            view(slice_("old", [dev("a"), dev("b")], pool="p", generation=1)),
            view(slice_("new", [dev("a")], pool="p", generation=2)),
        ],
        [claim("c", req("r", count=2))],
        fail="1 of 2 devices available",
    ),
    Case(
        "incomplete-newest-generation-skipped",
        [
            view(slice_("old", [dev("a")], pool="p", generation=1)),
            view(slice_("new-1", [dev("b")], pool="p", generation=2, count=2)),
        ],
        [claim("c", req("r"))],
        code=A.REASON_POOL_INCOMPLETE,
    ),
    Case(
        "node-local-other-node-unreachable",
        [view(slice_("s1", [dev("gpu-0")], node="node-2"))],
        [claim("c", req("r"))],
        code=A.REASON_NO_DEVICES,
        fail="no devices of class gpu reachable from this node",
    ),
    Case(
        "node-selector-reach",
        [
            view(
                slice_(
                    "net",
                    [dev("nic-0")],
                    node=None,
                    pool="net",
                    node_selector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                )
            )
        ],
        [claim("c", req("r"))],
        want={"default/c": [("r", "nic-0")]},
    ),
    Case(
        "node-selector-no-reach",
        [
            view(
                slice_(
                    "net",
                    [dev("nic-0")],
                    node=None,
                    pool="net",
                    node_selector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]},
                )
            )
        ],
        [claim("c", req("r"))],
        code=A.REASON_NO_DEVICES,
    ),
    Case(
        "all-nodes-reach",
        [view(slice_("net", [dev("nic-0")], node=None, pool="net", all_nodes=True))],
        [claim("c", req("r"))],
        want={"default/c": [("r", "nic-0")]},
    ),
    Case(
        "per-device-node-selection",
        [
            view(
                slice_(
                    "pd",
                    [dev("far", nodeName="node-2"), dev("near", nodeName="node-1"), dev("any", allNodes=True)],
                    node=None,
                    pool="pd",
                    per_device=True,
                )
            )
        ],
        [claim("c", req("r", count=2))],
        want={"default/c": [("r", "near"), ("r", "any")]},
    ),
    Case(
        "match-attribute-needs-backtracking",
        [view(three())],
        [
            claim(
                "c",
                req("a"),
                req("b"),
                constraints=[{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/numa"}],
            )
        ],
        want={"default/c": [("a", "gpu-1"), ("b", "gpu-2")]},
    ),
    Case(
        "match-attribute-all-requests-when-unlisted",
        [view(three())],
        [claim("c", req("a", count=2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])],
        want={"default/c": [("a", "gpu-1"), ("a", "gpu-2")]},
    ),
    Case(
        "match-attribute-missing-attribute-fails",
        [view(slice_("s1", [dev("x"), dev("y")]))],
        [claim("c", req("a", count=2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])],
        code=A.REASON_CONSTRAINTS,
        fail="matchAttribute gpu.example.com/numa",
    ),
    Case(
        "distinct-attribute",
        [view(three())],
        [claim("c", req("a", count=2), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}])],
        want={"default/c": [("a", "gpu-0"), ("a", "gpu-1")]},
    ),
    Case(
        "distinct-attribute-impossible",
        [view(three())],
        [claim("c", req("a", "small", count=2), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}])],
        code=A.REASON_CONSTRAINTS,
    ),
    Case(
        "first-available-falls-through-tainted-subrequest",
        [view(slice_("s1", [dev("gpu-0", {"model": "big"}, taints=[taint("t", "NoSchedule")]), dev("gpu-1", {"model": "small"})]))],
        [claim("c", first_available("r", ("big", exactly("big")), ("small", exactly("small"))))],
        want={"default/c": [("r/small", "gpu-1")]},
    ),
    Case(
        "first-available-subrequest-with-own-toleration",
        [view(slice_("s1", [dev("gpu-0", {"model": "big"}, taints=[taint("t", "NoSchedule")]), dev("gpu-1", {"model": "small"})]))],
        [
            claim(
                "c",
                first_available(
                    "r",
                    ("big", exactly("big", tolerations=[{"key": "t", "operator": "Exists"}])),
                    ("small", exactly("small")),
                ),
            )
        ],
        want={"default/c": [("r/big", "gpu-0")]},
    ),
    Case(
        "first-available-none-fits",
        [view(slice_("s1", [dev("gpu-0", {"model": "big"}, taints=[taint("t", "NoSchedule")])]))],
        [claim("c", first_available("r", ("big", exactly("big")), ("small", exactly("small"))))],
        fail="no subrequest can be satisfied",
    ),
    Case(
        "first-available-backtracks-into-next-subrequest",
        [view(three())],
        [
            claim(
                "c",
                first_available("r", ("big", exactly("big")), ("small", exactly("small"))),
                req("other", "small"),
                constraints=[{"matchAttribute": f"{DRIVER}/numa"}],
            )
        ],
        want={"default/c": [("r/small", "gpu-1"), ("other", "gpu-2")]},
    ),
    Case(
        "two-claims-never-share-a-device",
        [view(slice_("s1", [dev("gpu-0"), dev("gpu-1")]))],
        [claim("c1", req("r")), claim("c2", req("r"))],
        want={"default/c1": [("r", "gpu-0")], "default/c2": [("r", "gpu-1")]},
    ),
    Case(
        "two-claims-not-enough",
        [view(slice_("s1", [dev("gpu-0")]))],
        [claim("c1", req("r")), claim("c2", req("r"))],
        fail="not enough left",
    ),
    Case(
        "partition-first-fit-packs-spread-takes-untouched-gpu",
        partitions(2, 2),
        [claim("c", req("r"))],
        allocated={did("gpu-0-part-0")},
        want={"default/c": [("r", "gpu-0-part-1")]},
        spread={"default/c": [("r", "gpu-1-part-0")]},
    ),
    Case(
        "partitions-two-devices-by-each-order",
        partitions(2, 2),
        [claim("c", req("r", count=2))],
        allocated={did("gpu-0-part-0")},
        want={"default/c": [("r", "gpu-0-part-1"), ("r", "gpu-1-part-0")]},
        spread={"default/c": [("r", "gpu-1-part-0"), ("r", "gpu-1-part-1")]},
    ),
    Case(
        "partitions-counters-exhausted",
        partitions(1, 3),
        [claim("c", req("r", count=3))],
        code=A.REASON_COUNTERS,
    ),
    Case(
        "partition-on-a-full-gpu-refused",
        partitions(1, 3),
        [claim("c", req("r"))],
        allocated={did("gpu-0-part-0"), did("gpu-0-part-1")},
        fail="0 of 1 devices available: 2 allocated, 1 short of shared counters",
    ),
    Case(
        "selector-runtime-error-fails-node",
        [view(three())],
        [claim("c", req("r", selectors=[f'device.attributes["{DRIVER}"].missing == 1']))],
        code=A.REASON_SELECTOR_ERROR,
        fail="device.attributes",
    ),
    Case(
        "selector-guarded-with-in",
        [view(three())],
        [claim("c", req("r", selectors=[f'"missing" in device.attributes["{DRIVER}"] && device.attributes["{DRIVER}"].missing == 1']))],
        code=A.REASON_SELECTOR,
    ),
    Case(
        "selector-compile-error",
        [view(three())],
        [claim("c", req("r", selectors=["device.driver =="]))],
        code=A.REASON_SELECTOR_ERROR,
    ),
    Case(
        "unknown-domain-is-empty-map",
        [view(three())],
        [claim("c", req("r", selectors=['size(device.attributes["other.example.com"]) == 0']))],
        want={"default/c": [("r", "gpu-0")]},
    ),
]


@pytest.fixture(scope="module")
def allocator() -> Allocator:
    return Allocator(CelEnvironment())


@pytest.fixture(scope="module")
def allocators() -> dict[str, Allocator]:
    cel = CelEnvironment()
    return {path: allocator_for(path, cel) for path in PATHS}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_allocation(case: Case, path: str, allocators: dict[str, Allocator]) -> None:
    outcome = allocators[path].allocate(case.node, case.claims, case.slices, case.classes, case.allocated, case.lookup.get)
    want = case.spread if path == SPREAD_ORDER and case.spread is not None else case.want
    if want is not None:
        assert outcome.ok, outcome.failure
        got = {key: [(r.request, r.device) for r in result.results] for key, result in outcome.allocations.items()}
        assert got == want
    else:
        assert not outcome.ok, f"expected a failure, got {outcome.allocations}"
        if case.fail:
            assert case.fail in outcome.failure.message
        if case.code:
            assert outcome.failure.code == case.code, outcome.failure.message


# ----------------------------------------------------------------------------- result shape


def test_results_copy_tolerations_and_admin_access(allocator: Allocator) -> None:
    tol = {"key": "gpu.example.com/xid", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    c = claim("c", req("r", tolerations=[tol], admin=True))
    out = allocator.allocate(NODE, [c], [view(slice_("s1", [dev("gpu-0")]))], CLASSES, set())
    result = out.allocations["default/c"].to_api()
    assert result["devices"]["results"] == [
        {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "gpu-0", "adminAccess": True, "tolerations": [tol]}
    ]


def test_node_local_allocation_selects_node_by_name(allocator: Allocator) -> None:
    out = allocator.allocate(NODE, [claim("c", req("r"))], [view(three())], CLASSES, set())
    assert out.allocations["default/c"].to_api()["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    }


def test_all_nodes_allocation_has_no_node_selector(allocator: Allocator) -> None:
    s = slice_("net", [dev("nic-0")], node=None, pool="net", all_nodes=True)
    out = allocator.allocate(NODE, [claim("c", req("r"))], [view(s)], CLASSES, set())
    assert "nodeSelector" not in out.allocations["default/c"].to_api()


def test_node_selector_slices_merge_into_one_term(allocator: Allocator) -> None:
    def sel(key: str) -> dict:
        return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "Exists"}]}]}

    s1 = slice_("a", [dev("x")], node=None, pool="a", node_selector=sel("zone"))
    s2 = slice_("b", [dev("y")], node=None, pool="b", node_selector=sel("rack"))
    out = allocator.allocate(NODE, [claim("c", req("r", count=2))], [view(s1), view(s2)], CLASSES, set())
    assert out.allocations["default/c"].to_api()["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}, {"key": "rack", "operator": "Exists"}]}]
    }


def test_config_from_class_then_claim(allocator: Allocator) -> None:
    cls = device_class("gpu", config=[{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}])
    c = claim("c", req("r"), config=[{"requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}}])
    out = allocator.allocate(NODE, [c], [view(three())], {"gpu": cls}, set())
    assert out.allocations["default/c"].to_api()["devices"]["config"] == [
        {"source": "FromClass", "requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}},
        {"source": "FromClaim", "requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}},
    ]


def test_at_most_32_results_per_claim(allocator: Allocator) -> None:
    s = slice_("big", [dev(f"d{i}") for i in range(40)])
    out = allocator.allocate(NODE, [claim("c", req("r", mode="All"))], [view(s)], CLASSES, set())
    assert out.failure is not None and out.failure.code == A.REASON_TOO_MANY
    out = allocator.allocate(NODE, [claim("c", req("a", count=20), req("b", count=13))], [view(s)], CLASSES, set())
    assert out.failure is not None and out.failure.code == A.REASON_TOO_MANY, out.failure
    assert "at least 33 devices" in out.failure.message


# ----------------------------------------------------------------------------- allocated claims


def _allocated_claim(node_selector: dict | None, tolerations: list | None = None) -> ResourceClaim:
    result = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
    if tolerations:
        result["tolerations"] = tolerations
    alloc: dict = {"devices": {"results": [result]}}
    if node_selector:
        alloc["nodeSelector"] = node_selector
    return claim("c", req("r"), status={"allocation": alloc})


ON_NODE_1 = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}


@pytest.mark.parametrize(
    ("name", "node_selector", "tolerations", "device_taints", "ok", "code"),
    [
        ("fits-its-node", ON_NODE_1, None, [], True, None),
        ("other-node", ON_NODE_1, None, [], False, A.REASON_NODE_MISMATCH),
        ("no-selector-fits-anywhere", None, None, [], True, None),
        ("untolerated-noexecute-refused", ON_NODE_1, None, [taint("x", "NoExecute")], False, A.REASON_NO_EXECUTE),
        ("tolerated-noexecute-ok", ON_NODE_1, [{"key": "x", "operator": "Exists"}], [taint("x", "NoExecute")], True, None),
        ("noschedule-on-allocated-is-fine", ON_NODE_1, None, [taint("x", "NoSchedule")], True, None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_already_allocated_claim(allocator, name, node_selector, tolerations, device_taints, ok, code) -> None:
    c = _allocated_claim(node_selector, tolerations)
    s = view(slice_("s1", [dev("gpu-0", taints=device_taints)]))
    lookup = {d.id: d for d in s.devices}
    node = Node("node-2") if name == "other-node" else NODE
    out = allocator.allocate(node, [c], [s], CLASSES, {did("gpu-0")}, lookup.get)
    assert out.ok is ok, out.failure
    if code:
        assert out.failure.code == code
    if ok:
        assert out.allocations == {}  # never allocated again


def test_rule_taint_parses_into_effective_taint(allocator: Allocator) -> None:
    rule = parse_device_taint_rule(
        {
            "metadata": {"name": "maint"},
            "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": "maintenance", "effect": "NoSchedule"}},
        },
        group="resource.k8s.io",
    )
    s = slice_("s1", [dev("gpu-0")])
    out = allocator.allocate(NODE, [claim("c", req("r"))], [view(s, {"gpu-0": [rule.taint]})], CLASSES, set())
    assert out.failure.code == A.REASON_TAINTED and "maintenance:NoSchedule" in out.failure.message


SEARCH_BOUND_CASES = [
    # name, numa of device i, constraint, expected failure code
    # Every device on its own NUMA node: matchAttribute fails at the second pick, quickly.
    ("match-fails-fast", lambda i: i, "matchAttribute", A.REASON_CONSTRAINTS),
    # 8 distinct values wanted among 7 (8 requests: upstream keys distinctAttribute values by
    # request, so only different requests are kept apart): every combination is tried before giving up.
    ("distinct-explodes", lambda i: i % 7, "distinctAttribute", A.REASON_SEARCH_LIMIT),
]


@pytest.mark.parametrize(("numa", "constraint", "code"), [c[1:] for c in SEARCH_BOUND_CASES], ids=[c[0] for c in SEARCH_BOUND_CASES])
def test_search_budget_bounds_pathological_constraints(numa, constraint: str, code: str) -> None:
    devices = [dev(f"d{i}", {"numa": numa(i)}) for i in range(30)]
    s = view(slice_("s1", devices))
    c = claim("c", *(req(f"r{k}") for k in range(8)), constraints=[{constraint: f"{DRIVER}/numa"}])
    out = Allocator(CelEnvironment(), search_budget=2_000).allocate(NODE, [c], [s], CLASSES, set())
    assert out.failure is not None and out.failure.code == code, out.failure


def test_one_slice_view_answers_each_selector_set_separately(allocator: Allocator) -> None:
    """The per-slice selector memo is keyed by the selectors: reused views never mix answers."""
    s = view(three())
    model = f'device.attributes["{DRIVER}"].model'
    for _ in range(2):  # the second round is answered from the memo
        small = allocator.allocate(NODE, [claim("c", req("r", selectors=[f'{model} == "small"']))], [s], CLASSES, set())
        big = allocator.allocate(NODE, [claim("c", req("r", "big"))], [s], CLASSES, set())
        none = allocator.allocate(NODE, [claim("c", req("r", selectors=[f'{model} == "huge"']))], [s], CLASSES, set())
        assert [r.device for r in small.allocations["default/c"].results] == ["gpu-1"]
        assert [r.device for r in big.allocations["default/c"].results] == ["gpu-0"]
        assert none.failure.code == A.REASON_SELECTOR
    # A selector failing on one device is still named with that device, memo or not.
    for _ in range(2):
        bad = allocator.allocate(
            NODE, [claim("c", req("r", selectors=[f'device.attributes["{DRIVER}"].numa / 0 == 1']))], [s], CLASSES, set()
        )
        assert bad.failure.code == A.REASON_SELECTOR_ERROR and "gpu-0" in bad.failure.message, bad.failure
