"""/prioritize's placement policy (docs/scoring.md): binpack and spread over nodes, health first, pods seen before their /bind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.service import Service
from extender.wire import BindingArgs, ExtenderArgs
from kubesim.objects import device_class, node_slice, partitioned_slices
from tests.extender.manifest_cluster import claimed_pod, filter_args, manifest_service

DRIVER = "gpu.example.com"
NODES = ["n0", "n1", "n2"]
PODS = 12


def _manifest(directory: Path, kind: str, devices: int, taints: dict[str, str]) -> None:
    docs: list[dict[str, Any]] = [device_class(DRIVER, DRIVER)]
    for node in NODES:
        docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        if kind == "plain":
            taint = [{"key": "example.com/degraded", "value": "x", "effect": taints[node]}] if node in taints else []
            docs.append(node_slice(node, DRIVER, [{"name": f"gpu-{j}", **({"taints": taint} if taint else {})} for j in range(devices)]))
        else:
            docs += partitioned_slices(node, DRIVER, devices)
    for i in range(PODS):
        docs += claimed_pod(f"p{i}", f"c{i}", DRIVER)
    directory.mkdir()
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(docs))


Start = Callable[..., Awaitable[Service]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    tasks: list[asyncio.Task] = []

    async def run(
        policy: str, kind: str = "plain", devices: int = 4, taints: dict[str, str] | None = None, device_placement: str = "binpack"
    ) -> Service:
        directory = tmp_path / f"c{len(tasks)}"
        _manifest(directory, kind, devices, taints or {})
        service, task = await manifest_service(
            directory, allocator={"device_placement": device_placement}, placement_wait=0.2, node_placement=policy
        )
        tasks.append(task)
        return service

    yield run
    for task in tasks:
        task.cancel()


def _args(i: int, names: list[str] = NODES) -> ExtenderArgs:
    return filter_args(f"p{i}", f"c{i}", names)


async def _place(service: Service, i: int, node: str) -> None:
    """Pod i filtered (offered only `node`) and bound there, as kube-scheduler would."""
    passed, failed = await service.filter(_args(i, [node]))
    assert passed == [node], failed
    assert await service.bind(BindingArgs(f"p{i}", "default", f"uid-p{i}", node)) is None


@dataclass(frozen=True)
class Row:
    name: str
    policy: str
    placed: list[str]  # the node of each pod bound before the probe, in order
    best: str  # the node the probe must score highest
    kind: str = "plain"
    devices: int = 4
    taints: dict[str, str] = field(default_factory=dict)
    below: tuple[str, ...] = ()  # nodes that must score strictly below `best`'s runner-up order: best > each of these


ROWS = [
    Row("binpack: a node in use over empty ones", "binpack", ["n1"], "n1", below=("n0", "n2")),
    Row("spread: an empty node over one in use", "spread", ["n0"], "n1", below=("n0",)),
    Row("binpack: the fuller of two nodes in use", "binpack", ["n1", "n2", "n2"], "n2", below=("n1", "n0")),
    Row("spread: the emptier of two nodes in use when none is empty", "spread", ["n0", "n1", "n1", "n2", "n2"], "n0", below=("n1", "n2")),
    Row("binpack: empty nodes tie, the first name wins", "binpack", [], "n0"),
    Row(
        # n1's gpu-0 is full (four 10Gi partitions): a pod there breaks its whole gpu-1; on n0 it joins the touched gpu-0.
        "binpack: a partition in a touched GPU over breaking a whole GPU on a fuller node",
        "binpack",
        ["n0", "n1", "n1", "n1", "n1"],
        "n0",
        kind="partitions",
        devices=2,
        below=("n1", "n2"),
    ),
    Row("spread: partitions go to the untouched node", "spread", ["n0", "n1", "n1", "n1", "n1"], "n2", kind="partitions", devices=2),
    Row(
        "health first: binpack does not prefer a node in use whose devices carry a None taint",
        "binpack",
        ["n1"],
        "n0",
        taints={"n1": "None"},
        below=("n1",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_placement_scores(start: Start, row: Row) -> None:
    service = await start(row.policy, row.kind, row.devices, row.taints)
    for i, node in enumerate(row.placed):
        await _place(service, i, node)
    probe = len(row.placed)
    passed, failed = await service.filter(_args(probe))
    assert passed == NODES, failed
    scores = dict(service.prioritize(_args(probe)))
    assert max(scores, key=lambda n: scores[n]) == row.best, scores
    assert list(scores.values()).count(scores[row.best]) == 1, f"the best node is one node: {scores}"
    assert all(scores[n] < scores[row.best] for n in row.below), scores
    assert all(1 <= s <= 10 for s in scores.values()), scores


@pytest.mark.parametrize("policy", ["binpack", "spread"])
async def test_a_pod_scored_before_the_previous_pods_bind_sees_where_that_pod_goes(start: Start, policy: str) -> None:
    """kube-scheduler scores pod B before pod A's /bind: B's scores count A's devices on the node A is aimed at.

    binpack: n1 and n2 hold one device each; A is offered n2 only, so it goes
    there; B must see n2 as the fuller node (without A it ties with n1, and
    n1 wins on the name). spread: A's best is the empty n0; B must then see
    n0 in use and prefer n2 (without A it would pick n0 again).
    """
    service = await start(policy)
    if policy == "binpack":
        await _place(service, 0, "n1")
        await _place(service, 1, "n2")
        a_nodes, want = ["n2"], "n2"
    else:
        await _place(service, 0, "n1")
        a_nodes, want = NODES, "n2"
    passed, _ = await service.filter(_args(5, a_nodes))
    assert passed == a_nodes
    if len(a_nodes) > 1:
        a_scores = dict(service.prioritize(_args(5, a_nodes)))
        assert max(a_scores, key=lambda n: a_scores[n]) == "n0", a_scores
    passed, _ = await service.filter(_args(6))  # B, before A's /bind
    assert passed == NODES
    scores = dict(service.prioritize(_args(6)))
    assert max(scores, key=lambda n: scores[n]) == want, scores
    # A's /bind: its devices are in the ledger now, its aim counts no more; B still sees them.
    a_node = "n2" if policy == "binpack" else "n0"
    assert await service.bind(BindingArgs("p5", "default", "uid-p5", a_node)) is None
    assert service.scores.expected() == 1, "only B's own aim is left"
    passed, _ = await service.filter(_args(6))
    scores = dict(service.prioritize(_args(6)))
    assert max(scores, key=lambda n: scores[n]) == want, scores


async def test_a_third_pod_sees_both_pods_aimed_before_it_on_their_devices(start: Start) -> None:
    """binpack: A and B are offered n2 only and scored before either binds; C must count two devices there.

    n1 holds one bound pod. B's devices on n2 are those it gets with A's held
    (gpu-1), and its aim keeps them: had it kept its own verdict (gpu-0, A's
    too), C would count one device on n2, tie it with n1, and n1 would win on
    the name.
    """
    service = await start("binpack")
    await _place(service, 0, "n1")
    for i in (5, 6):  # A, then B: each offered n2 alone, neither bound
        passed, _ = await service.filter(_args(i, ["n2"]))
        assert passed == ["n2"]
    b_aim = service.scores._aimed["uid-p6"]
    assert b_aim.node == "n2"
    assert [d.name for d in b_aim.devices] == ["gpu-1"], "B's aim holds the device it gets after A"
    passed, _ = await service.filter(_args(7))  # C
    assert passed == NODES
    scores = dict(service.prioritize(_args(7)))
    assert max(scores, key=lambda n: scores[n]) == "n2", scores
    assert list(scores.values()).count(scores["n2"]) == 1, scores


async def test_pods_scored_while_the_same_pods_are_aimed_search_after_them_once(start: Start) -> None:
    """While binds lag every pod scored sees the same aims: the search after them is kept, not repeated per pod."""
    service = await start("binpack")
    passed, _ = await service.filter(_args(5, ["n2"]))  # A: aimed at n2, not bound
    assert passed == ["n2"]
    searches = service.scores._after_searches
    for i in (6, 7, 8):  # B, C, D: offered every node; each is scored right after its /filter, none bound
        passed, _ = await service.filter(_args(i))
        assert passed == NODES
        del service.scores._aimed[f"uid-p{i}"]  # each sees A alone (as if it went elsewhere)
        if i == 6:
            assert len(searches) == 1
            first = next(iter(searches.values()))
    assert len(searches) == 1 and next(iter(searches.values())) is first, "C and D reused B's search on n2"
    await _place(service, 9, "n2")  # a bind on n2: the node changed, the next pod there searches again
    passed, _ = await service.filter(_args(10, ["n2"]))
    assert passed == ["n2"]
    assert len(searches) == 1 and next(iter(searches.values())) is not first


@pytest.mark.parametrize(("device_placement", "want"), [("binpack", "gpu-0-part-1"), ("spread", "gpu-1-part-0")])
async def test_device_placement_decides_which_gpu_of_the_node_a_bind_takes(start: Start, device_placement: str, want: str) -> None:
    """The second one-partition pod on n0: binpack (upstream's first fit) cuts gpu-0 again; spread takes the untouched gpu-1."""
    service = await start("binpack", "partitions", 2, device_placement=device_placement)
    await _place(service, 0, "n0")
    await _place(service, 1, "n0")
    allocation = service.state.claims["default/c1"].allocation
    assert allocation is not None
    assert [r.device for r in allocation.results] == [want]
