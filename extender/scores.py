"""/prioritize's scores: health first, packing only breaks ties (formula in docs/scoring.md)."""

from __future__ import annotations

from typing import Any

from allocator.allocation import Outcome
from allocator.tolerations import blocks_allocation
from allocator.types import ResourceClaim
from extender.outcomes import OutcomeCache
from extender.request_nodes import RequestNodes
from tracker.state import ClusterState

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority
MAX_KEPT_SCORES = 1024  # pods whose /filter left scores for their /prioritize


class Scores:
    def __init__(self, state: ClusterState, outcomes: OutcomeCache) -> None:
        self.state = state
        self.outcomes = outcomes
        self._kept: dict[str, dict[str, int]] = {}  # pod uid -> node -> score, kept by /filter for /prioritize

    def score(self, node_name: str, outcome: Outcome) -> int:
        """score = round(9 * healthy) + (1 if the node already has devices in use), 0 when nothing fits.

        `healthy` is the share of the pod's devices without a non-blocking
        (None/unknown effect) taint. Packing is worth one point only: enough to
        prefer a node already in use over an empty one among equally healthy
        nodes, never enough to outweigh kube-scheduler's own spreading scores
        and its random choice among equal totals.
        """
        if not outcome.ok:
            return 0
        devices = outcome.devices
        healthy = 1.0
        if devices:
            degraded = sum(1 for d in devices if any(not blocks_allocation(t) for t in d.taints))
            healthy = 1.0 - degraded / len(devices)
        in_use = self.state.taken_on_node(node_name) > 0
        return max(0, min(MAX_PRIORITY, round((MAX_PRIORITY - 1) * healthy) + (1 if in_use else 0)))

    def of(self, claims: list[ResourceClaim], names: list[str], nodes: RequestNodes) -> list[tuple[str, int]]:
        """Each node's score for these claims (verdicts shared through the outcome cache)."""
        scores = self.outcomes.scores(self.outcomes.signature(claims), claims, nodes.resolve(names), self.score)
        return list(zip(names, scores, strict=True))

    def keep(self, uid: str, claims: list[ResourceClaim], passed: list[str], verdicts: list[Outcome], nodes: RequestNodes) -> None:
        """/prioritize's answer for the nodes just offered, for the HTTP thread to send without a hop.

        kube-scheduler calls /prioritize right after /filter, with the nodes
        that passed; scores computed now differ from ones computed then only
        by what changed in between (a few ms), and they only order nodes that
        all fit.
        """
        scores = self.outcomes.scores(self.outcomes.signature(claims), claims, nodes.resolve(passed), self.score, verdicts)
        kept = self._kept
        if len(kept) >= MAX_KEPT_SCORES:
            del kept[next(iter(kept))]  # the oldest: its pod had one node left, or went away
        kept[uid] = dict(zip(passed, scores, strict=True))

    def forget(self, uid: str) -> None:
        self._kept.pop(uid, None)

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
