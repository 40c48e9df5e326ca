"""Per-node verdicts shared across pods and kept until something they depend on changes.

A verdict (does this pod's set of claims fit on this node, and why not) is
keyed by what decides it, never by the pod:

- the claims' *requirement signature*: for a claim still to be allocated its
  spec (requests, selectors, counts, tolerations, constraints, firstAvailable
  order) and annotation tolerations, not its name; for an allocated claim
  the claim itself at its resourceVersion;
- the node's reach version (`ClusterState.reach_version`): it moves when a
  slice reachable from the node, a device's allocation state there, the
  Node, a shared pool or a DeviceClass changes.

So the second to n-th pod of a workload (every pod from one
ResourceClaimTemplate) are dictionary lookups, and a bind on one node makes
only that node's verdicts be computed again. Failure messages name the
claims; a verdict found for other claims with the same signature is told
with their names.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from allocator.allocation import Allocator, Outcome
from allocator.cel_library import DeadlineExceeded
from allocator.types import TOLERATIONS_ANNOTATION, Node, ResourceClaim
from tracker.state import ClusterState

ClaimSignature = tuple[Any, ...]


class OutcomeCache:
    def __init__(
        self,
        state: ClusterState,
        allocator: Allocator,
        *,
        size: int = 50_000,
        on_computed: Callable[[Outcome], None] = lambda _o: None,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.size = size
        self.on_computed = on_computed
        # signature -> node name -> (node version, shared version, class version, node token, verdict, told for)
        self._groups: OrderedDict[tuple[ClaimSignature, ...], dict[str, tuple[Any, ...]]] = OrderedDict()
        self._entries = 0
        self._signatures: dict[tuple[str, str], ClaimSignature] = {}
        self.hits = 0
        self.misses = 0

    def signature(self, claims: Sequence[ResourceClaim]) -> tuple[ClaimSignature, ...]:
        return tuple(self._claim_signature(c) for c in claims)

    def _claim_signature(self, claim: ResourceClaim) -> ClaimSignature:
        ident = (claim.key, claim.meta.resource_version)
        sig = self._signatures.get(ident)
        if sig is not None:
            return sig
        if claim.allocation is not None:
            sig = ("allocated", claim.key, claim.meta.resource_version)
        else:
            raw = self.state.raw_claims.get(claim.key) or {}
            spec = orjson.dumps(raw.get("spec"), option=orjson.OPT_SORT_KEYS)
            sig = ("new", spec, claim.meta.annotations.get(TOLERATIONS_ANNOTATION), bool(claim.meta.deletion_timestamp))
        if len(self._signatures) >= self.size:
            self._signatures.clear()
        self._signatures[ident] = sig
        return sig

    def verdicts(
        self,
        signature: tuple[ClaimSignature, ...],
        claims: Sequence[ResourceClaim],
        nodes: Sequence[tuple[Node, Any]],
        deadline: float | None = None,
    ) -> list[Outcome]:
        """The verdict for `claims` (whose signature is `signature`) on each (node, node token).

        Past `deadline` (time.monotonic()) it raises DeadlineExceeded with
        `nodes_done` set, before computing the next node: nothing partial is
        cached or answered.
        """
        group = self._groups.get(signature)
        if group is None:
            group = self._groups[signature] = {}
        else:
            self._groups.move_to_end(signature)
        names = tuple(c.key for c in claims)
        state = self.state
        node_versions = state.node_versions
        shared, classes = state.shared_version, state.class_version
        out = []
        for node, token in nodes:
            name = node.name
            version = node_versions.get(name, 0)
            entry = group.get(name)
            if entry is not None and entry[0] == version and entry[1] == shared and entry[2] == classes and entry[3] == token:
                self.hits += 1
                outcome, told_for = entry[4], entry[5]
                out.append(outcome if told_for is None or told_for == names else _retold(outcome, told_for, names))
                continue
            self.misses += 1
            try:
                if deadline is not None and time.monotonic() > deadline:
                    raise DeadlineExceeded()
                outcome = self.allocator.allocate(
                    node, claims, state.slices_for_node(name), state.classes, state.is_taken, state.device
                )
            except DeadlineExceeded as e:
                e.nodes_done = len(out)  # type: ignore[attr-defined] - read by the caller's message
                raise
            self.on_computed(outcome)
            if entry is None:
                self._entries += 1
            # A fit names no claim: it is stored without the allocations (which name them) and
            # serves every pod with this signature as it is.
            if outcome.failure is None:
                group[name] = (version, shared, classes, token, Outcome(None, {}, outcome.devices), None)
            else:
                group[name] = (version, shared, classes, token, outcome, names)
            out.append(outcome)
        while self._entries > self.size and len(self._groups) > 1:
            _, dropped = self._groups.popitem(last=False)
            self._entries -= len(dropped)
        return out

    def __len__(self) -> int:
        return self._entries


def _retold(outcome: Outcome, told_for: tuple[str, ...], names: tuple[str, ...]) -> Outcome:
    """The same verdict, naming `names` where it named `told_for` (claims in the same positions)."""
    failure = outcome.failure
    message = failure.message
    # Two passes through placeholders, so claims that swap places are told right.
    for i, old in enumerate(told_for):
        message = re.sub(rf"claim {re.escape(old)}(?![a-z0-9.\-])", f"claim \x00{i}\x00", message)
    for i, new in enumerate(names):
        message = message.replace(f"claim \x00{i}\x00", f"claim {new}")
    claim = names[told_for.index(failure.claim)] if failure.claim in told_for else failure.claim
    return Outcome(replace(failure, message=message, claim=claim))
