"""Per-node verdicts shared across pods and kept until something they depend on changes.

A verdict (does this pod's set of claims fit on this node, and why not) is
keyed by what decides it, never by the pod:

- the claims' *requirement signature*: for a claim still to be allocated its
  spec (requests, selectors, counts, tolerations, constraints, firstAvailable
  order) and annotation tolerations, not its name; for an allocated claim
  the claim itself at its resourceVersion;
- the node: a verdict stands until the tracker's change log
  (`ClusterState.changed_nodes_since`) names the node (a slice reachable
  from it, a device's allocation state there, the Node object) or every node
  (a shared pool, a DeviceClass).

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
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from allocator.allocation import Allocator, Failure, Outcome
from allocator.cel.lib.budget import DeadlineExceeded
from allocator.types import TOLERATIONS_ANNOTATION, Node, ResourceClaim
from tracker.state import ClusterState

ClaimSignature = tuple[Any, ...]


@dataclass(slots=True)
class _Group:
    """The verdicts of one claims signature, as of change `seq` of the tracker's log."""

    seq: int
    verdicts: dict[str, tuple[Any, Outcome]] = field(default_factory=dict)  # node -> (node token, verdict template)
    scores: dict[str, tuple[Any, int]] = field(default_factory=dict)  # node -> (node token, /prioritize score)
    # One template object per distinct failure: nodes that fail alike share it, so a
    # call tells each distinct message once, not once per node.
    interned: dict[Failure, Outcome] = field(default_factory=dict)


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
        self._groups: OrderedDict[tuple[ClaimSignature, ...], _Group] = OrderedDict()
        self._entries = 0
        self._signatures: dict[tuple[str, str], ClaimSignature] = {}
        self.hits = 0
        self.misses = 0

    def signature(self, claims: Sequence[ResourceClaim]) -> tuple[ClaimSignature, ...]:
        return tuple(self._claim_signature(c) for c in claims)

    def _claim_signature(self, claim: ResourceClaim) -> ClaimSignature:
        if claim.allocation is None and claim.key not in self.state.raw_claims:
            # An extended-resource claim not created yet: its requests are all there is (and differ per node).
            return ("memory", claim.requests)
        ident = (claim.key, claim.meta.resource_version)
        sig = self._signatures.get(ident)
        if sig is not None:
            return sig
        if claim.allocation is not None:
            sig = ("allocated", claim.key, claim.meta.resource_version)
        else:
            raw = self.state.raw_claims.get(claim.key) or {}
            # Copied to a bytes object of its own size: orjson's output keeps a 4 KB buffer, and
            # signatures live as long as their verdicts.
            spec = bytes(memoryview(orjson.dumps(raw.get("spec"), option=orjson.OPT_SORT_KEYS)))
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
            group = self._groups[signature] = _Group(self.state.change_seq)
        else:
            self._groups.move_to_end(signature)
            self._catch_up(group)
        verdicts = group.verdicts
        names = tuple(c.key for c in claims)
        told: dict[int, Outcome] = {}  # template outcome id -> told with `names`, once per call
        state = self.state
        out: list[Outcome] = []
        append = out.append
        get = verdicts.get
        misses = 0
        for node, token in nodes:
            name = node.name
            entry = get(name)
            if entry is not None and entry[0] == token:
                outcome = entry[1]
                if outcome.failure is not None:
                    known = told.get(id(outcome))
                    if known is None:
                        known = told[id(outcome)] = _tell(outcome, names)
                    outcome = known
                append(outcome)
                continue
            misses += 1
            try:
                if deadline is not None and time.monotonic() > deadline:
                    raise DeadlineExceeded()
                outcome = self.allocator.allocate(
                    node, claims, state.slices_for_node(name), state.classes, state.ledger, state.device, pool_slices=state.pool_slices
                )
            except DeadlineExceeded as e:
                e.nodes_done = len(out)
                raise
            self.on_computed(outcome)
            if entry is None:
                self._entries += 1
            # Stored without the claims' names: a fit without its allocations (which name
            # them), a failure with placeholders where its message names a claim.
            if outcome.failure is None:
                verdicts[name] = (token, Outcome(None, {}, outcome.devices))
            else:
                template = _template(outcome, names)
                assert template.failure is not None
                interned = group.interned
                if len(interned) > 64 + 2 * len(verdicts):  # messages that name nodes do not share: keep it bounded
                    interned.clear()
                verdicts[name] = (token, interned.setdefault(template.failure, template))
            append(outcome)
        self.misses += misses
        self.hits += len(out) - misses
        while self._entries > self.size and len(self._groups) > 1:
            _, dropped = self._groups.popitem(last=False)
            self._entries -= len(dropped.verdicts)
        return out

    def scores(
        self,
        signature: tuple[ClaimSignature, ...],
        claims: Sequence[ResourceClaim],
        nodes: Sequence[tuple[Node, Any]],
        score: Callable[[str, Outcome], int],
        verdicts: Sequence[Outcome] | None = None,
    ) -> list[int]:
        """`score(node, verdict)` per node, kept with the verdicts (and dropped with them).

        `verdicts`: the nodes' verdicts when the caller has them already (they are looked up otherwise).
        """
        if verdicts is None:
            verdicts = self.verdicts(signature, claims, nodes)
        cached = self._groups[signature].scores
        out = []
        for (node, token), outcome in zip(nodes, verdicts, strict=True):
            entry = cached.get(node.name)
            if entry is not None and entry[0] == token:
                out.append(entry[1])
            else:
                value = score(node.name, outcome)
                cached[node.name] = (token, value)
                out.append(value)
        return out

    def _catch_up(self, group: _Group) -> None:
        """Forget the verdicts of nodes that changed since the group last looked."""
        changed = self.state.changed_nodes_since(group.seq)
        if changed is None:
            self._entries -= len(group.verdicts)
            group.verdicts.clear()
            group.scores.clear()
            group.interned.clear()
        else:
            for name in changed:
                if name is not None and group.verdicts.pop(name, None) is not None:
                    self._entries -= 1
                    group.scores.pop(name, None)
        group.seq = self.state.change_seq

    def __len__(self) -> int:
        return self._entries


def _template(outcome: Outcome, names: tuple[str, ...]) -> Outcome:
    """The failure with a placeholder where its message names one of `names` (claims in pod order)."""
    failure = outcome.failure
    assert failure is not None
    message = failure.message
    for i, name in enumerate(names):
        message = re.sub(rf"claim {re.escape(name)}(?![a-z0-9.\-])", f"claim \x00{i}\x00", message)
    claim = f"\x00{names.index(failure.claim)}\x00" if failure.claim in names else failure.claim
    return Outcome(replace(failure, message=message, claim=claim))


def _tell(template: Outcome, names: tuple[str, ...]) -> Outcome:
    """A stored failure told for the claims `names` (same signature, so same positions)."""
    failure = template.failure
    assert failure is not None
    message = failure.message
    claim = failure.claim
    for i, name in enumerate(names):
        mark = f"\x00{i}\x00"
        message = message.replace(mark, name)
        if claim == mark:
            claim = name
    return Outcome(replace(failure, message=message, claim=claim))
