"""/prioritize's scores: health first, then the placement policy (formula in docs/scoring.md)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from allocator.allocation import Outcome
from allocator.device_view import DeviceView
from allocator.tolerations import blocks_allocation
from allocator.types import ResourceClaim
from extender.filter.outcomes import OutcomeCache
from extender.filter.request_nodes import RequestNodes
from extender.prioritize.packing import NodeFullness, NodeUnits
from tracker.state import ClusterState

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority
MAX_KEPT_SCORES = 1024  # pods whose /filter left scores for their /prioritize
MAX_AFTER_SEARCHES = 4096  # searches after aimed pods kept (then all forgotten at once)
BINPACK, SPREAD = "binpack", "spread"
NODE_PLACEMENTS = (BINPACK, SPREAD)
DEFAULT_NODE_PLACEMENT = BINPACK
AIM_TTL = 10.0  # seconds a pod's best node counts as where it goes, if its /bind does not say otherwise first
PLACEMENT_POINTS = 2  # the policy's points: 2 for the one best node of a health level, 1 for the better half, 0 else
HEALTH_STRIDE = PLACEMENT_POINTS + 1  # health levels never overlap: health first
assert 1 + 2 * HEALTH_STRIDE + PLACEMENT_POINTS <= MAX_PRIORITY  # the best score (9) is one the scheduler accepts


@dataclass(frozen=True, slots=True)
class Aim:
    """The node a scored pod is expected on (its unique best score) and the devices it would take there."""

    node: str
    claims: tuple[ResourceClaim, ...]  # those its /bind allocates
    devices: tuple[DeviceView, ...]
    at: float

    @property
    def held(self) -> tuple[DeviceView, ...]:
        """The devices it would hold whole: none when a claim asks for admin access, no shared device."""
        if any(_admin_access(c) for c in self.claims):
            return ()
        return tuple(d for d in self.devices if not d.allow_multiple_allocations)


def _admin_access(claim: ResourceClaim) -> bool:
    return any(e.admin_access for r in claim.requests for e in r.subrequests)


def health_level(outcome: Outcome) -> int:
    """2: none of the pod's devices carries a non-blocking taint (or it uses none); 1: some do; 0: all do."""
    devices = outcome.devices
    if not any(d.taints for d in devices):
        return 2  # the usual case, no taint at all: per node of every /filter, so kept cheap
    degraded = sum(1 for d in devices if any(not blocks_allocation(t) for t in d.taints))
    return 2 if degraded == 0 else (0 if degraded == len(devices) else 1)


class Scores:
    def __init__(self, state: ClusterState, outcomes: OutcomeCache, node_placement: str = DEFAULT_NODE_PLACEMENT) -> None:
        if node_placement not in NODE_PLACEMENTS:
            raise ValueError(f"node placement {node_placement!r}: must be one of {', '.join(NODE_PLACEMENTS)}")
        self.state = state
        self.outcomes = outcomes
        self.node_placement = node_placement
        self.fullness = NodeFullness(state)
        self._kept: dict[str, dict[str, int]] = {}  # pod uid -> node -> score, kept by /filter for /prioritize
        self._aimed: dict[str, Aim] = {}  # pod uid -> where it is expected, until its /bind is decided
        # (node, its token, claims signature, devices held) -> (the node's units when searched, the devices found):
        # pods of one shape scored while the same pods are aimed at a node search once, not once each
        self._after_searches: dict[tuple[Any, ...], tuple[NodeUnits, tuple[DeviceView, ...] | None]] = {}

    def rank(
        self, uid: str, claims: Sequence[ResourceClaim], names: Sequence[str], verdicts: Sequence[Outcome], nodes: RequestNodes
    ) -> list[int]:
        """Each node's score for one pod; the pod's unique best node is remembered as where it goes (`aim`).

        score = 0 where the claims do not fit, else 1 + 3 x health + placement
        (docs/scoring.md). Placement points compare nodes of the same health
        level only: 2 for the single best by the policy's order, 1 for a node
        as good (a tie lost on the name) or better than the median node, 0
        for the rest. binpack orders by whole units the pod would break
        (fewest first), then fullness after it (fullest first); spread by
        fullness after it (emptiest first); ties by node name. Fullness
        counts the pods scored before whose /bind has not come, on the node
        each is aimed at: there the pod's devices are those it gets with
        theirs held (as their binds come first), so consecutive pods see
        each other before any bind.
        """
        now = time.monotonic()
        expected: dict[str, list[Aim]] = {}
        for other, aim in list(self._aimed.items()):
            if now - aim.at > AIM_TTL:
                del self._aimed[other]
            elif other != uid:
                expected.setdefault(aim.node, []).append(aim)
        spread = self.node_placement == SPREAD
        levels: dict[int, list[tuple[tuple[float, ...], str, int]]] = {}  # health -> (order key, name, index)
        units_of = self.fullness.current()
        shapes = self.outcomes.shapes
        alike = self.fullness.alike(units_of, shapes.current()) if shapes is not None else None
        after_aims: dict[int, tuple[DeviceView, ...]] = {}  # index -> this pod's devices there, after the pods aimed there
        for i, (name, outcome) in enumerate(zip(names, verdicts, strict=True)):
            if outcome.failure is not None:
                continue
            aims = expected.get(name)
            told = alike(name, outcome.devices) if alike is not None and not aims else None
            if told is not None:  # a fresh node alike measured before (packing.py NodeFullness.alike)
                touched_before, touched, use = told
            elif aims:
                units = units_of(name)
                before = [d for a in aims for d in a.devices]
                devices = self._after(aims, claims, name, nodes, units)
                if devices is not None:
                    after_aims[i] = devices
                touched_before, _ = units.measure(before)
                touched, use = units.measure([*before, *(outcome.devices if devices is None else devices)])
            else:  # the usual case: nothing expected here, and the node's verdict is the cached one
                units = units_of(name)
                touched_before = units.base_touched
                touched, use = units.measure_devices(outcome.devices)
            key: tuple[float, ...] = (touched + use,) if spread else (touched - touched_before, -(touched + use))
            levels.setdefault(health_level(outcome), []).append((key, name, i))
        scores = [0] * len(names)
        for health, group in levels.items():
            group.sort()
            best, median = group[0][0], group[(len(group) - 1) // 2][0]
            for rank, (order, _, i) in enumerate(group):
                points = PLACEMENT_POINTS if rank == 0 else (PLACEMENT_POINTS - 1 if order == best or order < median else 0)
                scores[i] = 1 + HEALTH_STRIDE * health + points
        if uid and levels:
            top = max(range(len(names)), key=lambda i: (scores[i], -i))
            if scores.count(scores[top]) == 1:
                devices = after_aims.get(top, verdicts[top].devices)
                self._aimed[uid] = Aim(names[top], tuple(c for c in claims if c.allocation is None), devices, now)
            else:
                self._aimed.pop(uid, None)
        return scores

    def _after(
        self, aims: list[Aim], claims: Sequence[ResourceClaim], name: str, nodes: RequestNodes, units: NodeUnits
    ) -> tuple[DeviceView, ...] | None:
        """This pod's devices on `name` once the pods aimed there hold theirs (None: they share a claim, or it does not fit).

        Their binds come first and each allocates its own claims alone, so
        this is what this pod's /bind would get there: one search for its own
        claims with their devices held, not a joint search of everyone's. The
        answer is kept while the node's units are (until the tracker's
        change log names the node) for the next pod of the same claims
        signature that finds the same devices held: while binds lag, every
        pod scored sees the same aims, and the cost per pod must not grow
        with their number.
        """
        own = {c.key for c in claims}
        if any(c.key in own for a in aims for c in a.claims):
            return None
        held = frozenset(d.id for a in aims for d in a.held)
        node, token = nodes.resolve([name])[0]
        key = (name, token, self.outcomes.signature(claims), held)
        kept = self._after_searches.get(key)
        if kept is not None and kept[0] is units:
            return kept[1]
        outcome = self.state.allocate_on(self.outcomes.allocator, node, claims, also_held=held)
        devices = outcome.devices if outcome.ok else None
        if len(self._after_searches) >= MAX_AFTER_SEARCHES:
            self._after_searches.clear()
        self._after_searches[key] = (units, devices)
        return devices

    def aim(self, uid: str, claims: Sequence[ResourceClaim], node: str, outcome: Outcome, nodes: RequestNodes) -> None:
        """A pod offered one node only goes there (if it goes at all), after the pods aimed there before it."""
        if not uid:
            return
        now = time.monotonic()
        aims = [a for other, a in self._aimed.items() if a.node == node and other != uid and now - a.at <= AIM_TTL]
        devices = self._after(aims, claims, node, nodes, self.fullness.of(node)) if aims else None
        self._aimed[uid] = Aim(node, tuple(c for c in claims if c.allocation is None), outcome.devices if devices is None else devices, now)

    def of(self, uid: str, claims: list[ResourceClaim], names: list[str], nodes: RequestNodes) -> list[tuple[str, int]]:
        """Each node's score for these claims (verdicts shared through the outcome cache)."""
        verdicts = self.outcomes.verdicts(self.outcomes.signature(claims), claims, nodes.resolve(names))
        return list(zip(names, self.rank(uid, claims, names, verdicts, nodes), strict=True))

    def keep(self, uid: str, claims: list[ResourceClaim], passed: list[str], verdicts: list[Outcome], nodes: RequestNodes) -> None:
        """/prioritize's answer for the nodes just offered, sent as it is when /prioritize comes (no decision then).

        kube-scheduler calls /prioritize right after /filter, with the nodes
        that passed; scores computed now differ from ones computed then only
        by what changed in between (a few ms), and they only order nodes that
        all fit.
        """
        scores = self.rank(uid, claims, passed, verdicts, nodes)
        kept = self._kept
        if len(kept) >= MAX_KEPT_SCORES:
            del kept[next(iter(kept))]  # the oldest: its pod had one node left, or went away
        kept[uid] = dict(zip(passed, scores, strict=True))

    def forget(self, uid: str) -> None:
        """The pod is in /filter again: its kept scores and its aim are stale."""
        self._kept.pop(uid, None)
        self._aimed.pop(uid, None)

    def decided(self, uid: str) -> None:
        """The pod's /bind is decided: its devices are in the ledger (or it goes nowhere); its aim counts no more."""
        self._aimed.pop(uid, None)

    def expected(self) -> int:
        return len(self._aimed)

    def take(self, uid: Any, names: list[str]) -> list[tuple[str, int]] | None:
        """The scores kept for the pod's nodes, or None (none kept, or not the nodes its /filter offered).

        Thread-safe: takes one entry (a dict operation, atomic under the GIL).
        """
        kept = self._kept.pop(uid, None) if isinstance(uid, str) else None
        if kept is None:
            return None
        try:
            return [(n, kept[n]) for n in names]
        except KeyError:  # not the nodes its /filter offered: score them on the main loop
            return None
