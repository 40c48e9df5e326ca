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
claims: a failure is kept as a template whose claim names (the ClaimName
parts its message is built from) are slots (the claim's index in the pod),
and a verdict found for other claims with the same signature is rendered
with their names when the cache hands it out.

The first pass of a claim shape over the nodes shares work between fresh
nodes alike (extender/filter/shapes.py): a node's missing verdict is the
verdict of another fresh node with the same shape, computed once per
(signature, shape) and told of this node: a fit with this node's devices
at the same places; a failure as it is, unless its message names the node,
a pool or a slice of the node it was computed on (then computed here).
Only for claims still to be allocated. A shared verdict only answers
/filter and /prioritize: /bind allocates again against the live state.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from allocator.allocation import Allocator, Failure, Outcome
from allocator.cel.lib.budget import DeadlineExceeded
from allocator.failures import ClaimName
from allocator.types import TOLERATIONS_ANNOTATION, Node, ResourceClaim
from extender.filter.shapes import NodeShape, NodeShapes
from tracker.state import ClusterState

ClaimSignature = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class FailureTemplate:
    """A failure without the names of the claims it was computed for.

    `parts` is the failure's message parts with a slot (an int: the claim's
    index in the pod's claims, in order) for each claim it names; `claim` is
    a slot when the failure blames one of them. `failure` holds the other
    fields as computed (its parts and claim blank).
    """

    failure: Failure
    parts: tuple[str | int | ClaimName, ...]
    claim: str | int

    @classmethod
    def of(cls, failure: Failure, names: Sequence[str]) -> FailureTemplate:
        """`failure` with a slot for each of `names` it names (a name twice in `names`: its first place)."""
        slots: dict[str, int] = {}
        for i, name in enumerate(names):
            slots.setdefault(name, i)
        parts = tuple(slots.get(p.key, p) if isinstance(p, ClaimName) else p for p in failure.parts)
        return cls(replace(failure, parts=(), claim=""), parts, slots.get(failure.claim, failure.claim))

    def render(self, names: Sequence[str]) -> Failure:
        """The failure for the claims `names` (same signature as those it was computed for, so same slots)."""
        parts = tuple(ClaimName(names[p]) if isinstance(p, int) else p for p in self.parts)
        claim = self.claim if isinstance(self.claim, str) else names[self.claim]
        return replace(self.failure, parts=parts, claim=claim)


@dataclass(slots=True)
class _Group:
    """The verdicts of one claims signature, as of change `seq` of the tracker's log."""

    seq: int
    # node -> (node token, a fit without its allocations, or a failure template)
    verdicts: dict[str, tuple[Any, Outcome | FailureTemplate]] = field(default_factory=dict)
    scores: dict[str, tuple[Any, int]] = field(default_factory=dict)  # node -> (node token, /prioritize score)
    # One template object per distinct failure: nodes that fail alike share it, so a
    # call tells each distinct message once, not once per node.
    interned: dict[FailureTemplate, FailureTemplate] = field(default_factory=dict)
    # shape -> the verdict of a fresh node of that shape: the places of a fit's devices, a failure template
    # told of any node of the shape, or None (its message names its node: each node computes its own)
    shared: dict[int, tuple[tuple[int, int], ...] | FailureTemplate | None] = field(default_factory=dict)


SHARED_SHAPES = 256  # shapes whose verdicts a signature keeps (beyond that they are forgotten and computed again)


SIGNATURES_SLACK = 64  # claim signatures kept beyond twice the claims held before the gone ones are dropped


class OutcomeCache:
    def __init__(
        self,
        state: ClusterState,
        allocator: Allocator[Any],  # over whichever selector engine the state has (tracker: SelectorEngine[Any])
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
        # claim key -> (resourceVersion, signature): one entry per claim, dropped once the state no longer holds it.
        self._signatures: dict[str, tuple[str, ClaimSignature]] = {}
        # Fresh nodes alike (shapes.py) share their verdicts; None: every node's is computed (benches' "before").
        self.shapes: NodeShapes | None = NodeShapes(state)
        self.hits = 0
        self.misses = 0
        self.shared = 0  # misses answered by another fresh node's verdict

    def signature(self, claims: Sequence[ResourceClaim]) -> tuple[ClaimSignature, ...]:
        return tuple(self._claim_signature(c) for c in claims)

    def _claim_signature(self, claim: ResourceClaim) -> ClaimSignature:
        if claim.allocation is None and claim.key not in self.state.claims:
            # An extended-resource claim not created yet: its requests are all there is (and differ per node).
            return ("memory", claim.requests)
        rv = claim.meta.resource_version
        held = self._signatures.get(claim.key)
        if held is not None and held[0] == rv:
            return held[1]
        sig: ClaimSignature
        if claim.allocation is not None:
            sig = ("allocated", claim.key, rv)
        else:
            sig = ("new", *spec_signature(claim), claim.meta.annotations.get(TOLERATIONS_ANNOTATION), bool(claim.meta.deletion_timestamp))
        if held is None and len(self._signatures) >= 2 * len(self.state.claims) + SIGNATURES_SLACK:
            self._drop_gone_claims()
        self._signatures[claim.key] = (rv, sig)
        return sig

    def _drop_gone_claims(self) -> None:
        """Forget the signatures of claims the state no longer holds (each keeps its parsed requests alive).

        Called when the map reaches twice the claims held (plus a slack), so
        its cost is spread over as many new entries as it keeps: under churn
        of pods and claims it stays at the size of the cluster's claims, not
        of every claim ever seen.
        """
        claims = self.state.claims
        self._signatures = {k: v for k, v in self._signatures.items() if k in claims}
        if len(self._signatures) >= self.size:
            self._signatures.clear()

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
        group = self._group(signature)
        verdicts = group.verdicts
        names = tuple(c.key for c in claims)
        told: dict[int, Outcome] = {}  # template id -> told with `names`, once per call
        out: list[Outcome] = []
        append = out.append
        get = verdicts.get
        misses = 0
        shape_of = self.shapes.current() if self.shapes is not None and all(s and s[0] == "new" for s in signature) else None
        for node, token in nodes:
            entry = get(node.name)
            if entry is not None and entry[0] == token:
                verdict = entry[1]
                if isinstance(verdict, FailureTemplate):
                    known = told.get(id(verdict))
                    if known is None:
                        known = told[id(verdict)] = Outcome(verdict.render(names))
                    verdict = known
                append(verdict)
                continue
            misses += 1
            try:
                if deadline is not None and time.monotonic() > deadline:
                    raise DeadlineExceeded()
                shape = shape_of(node.name) if shape_of is not None else None
                if shape is not None and not shape.reached_as(node):
                    shape = None  # sent with other labels than the state's: which shared slices reach it may differ
                outcome = self._told(group, shape, names) if shape is not None else None
                if outcome is None:
                    outcome = self._compute(node, claims)
                    if shape is not None:
                        self._share(group, shape, outcome, names)
            except DeadlineExceeded as e:
                e.nodes_done = len(out)
                raise
            self._keep(group, node.name, token, outcome, names, new=entry is None)
            append(outcome)
        self.misses += misses
        self.hits += len(out) - misses
        while self._entries > self.size and len(self._groups) > 1:
            _, dropped = self._groups.popitem(last=False)
            self._entries -= len(dropped.verdicts)
        return out

    def holds(self, signature: tuple[ClaimSignature, ...]) -> bool:
        """Whether verdicts of `signature` are kept (its group not dropped)."""
        return signature in self._groups

    def _group(self, signature: tuple[ClaimSignature, ...]) -> _Group:
        """The signature's verdicts, caught up with the tracker's changes (the most recently used)."""
        group = self._groups.get(signature)
        if group is None:
            group = self._groups[signature] = _Group(self.state.change_seq)
        else:
            self._groups.move_to_end(signature)
            self._catch_up(group)
        return group

    def _compute(self, node: Node, claims: Sequence[ResourceClaim]) -> Outcome:
        outcome = self.state.allocate_on(self.allocator, node, claims)
        self.on_computed(outcome)
        return outcome

    def _told(self, group: _Group, shape: NodeShape, names: tuple[str, ...]) -> Outcome | None:
        """The verdict of a fresh node of `shape` computed before, told of this one (None: none to tell)."""
        known = group.shared.get(shape.key)
        if known is None:
            return None
        self.shared += 1
        # Not an allocation search: `on_computed` (dra_extender_allocation_outcomes) heard of the one it repeats.
        return Outcome(known.render(names)) if isinstance(known, FailureTemplate) else Outcome(None, {}, shape.devices_at(known))

    def _share(self, group: _Group, shape: NodeShape, outcome: Outcome, names: tuple[str, ...]) -> None:
        """Keep a fresh node's computed verdict for the nodes of its shape (in a form without its names)."""
        shared = group.shared
        if shape.key in shared:
            return  # told of every node of the shape as computed before (a message naming its node)
        if len(shared) >= SHARED_SHAPES:
            shared.clear()
        if outcome.failure is None:
            shared[shape.key] = shape.places(outcome.devices)
            return
        failure = outcome.failure
        told = any(shape.names_in(p) for p in failure.parts if isinstance(p, str)) or any(
            shape.names_in(text) for text in (failure.request, failure.device_class)
        )
        shared[shape.key] = None if told else FailureTemplate.of(failure, names)

    def _keep(self, group: _Group, node: str, token: Any, outcome: Outcome, names: tuple[str, ...], *, new: bool) -> None:
        """Store a computed verdict without the claims' names: a fit without its allocations (which
        name them), a failure as a template with slots for the claims its message names."""
        if new:
            self._entries += 1
        verdicts = group.verdicts
        if outcome.failure is None:
            verdicts[node] = (token, Outcome(None, {}, outcome.devices))
            return
        template = FailureTemplate.of(outcome.failure, names)
        interned = group.interned
        if len(interned) > 64 + 2 * len(verdicts):  # messages that name nodes do not share: keep it bounded
            interned.clear()
        verdicts[node] = (token, interned.setdefault(template, template))

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
            group.shared.clear()  # a DeviceClass or a shared pool changed: what a shape's nodes get may have
        else:
            for name in changed:
                if name is not None and group.verdicts.pop(name, None) is not None:
                    self._entries -= 1
                    group.scores.pop(name, None)
        group.seq = self.state.change_seq

    def __len__(self) -> int:
        return self._entries


def spec_signature(claim: ResourceClaim) -> tuple[Any, ...]:
    """What of a claim's spec decides its verdicts: the parsed requests and constraints.

    The parsed values compare by everything allocation reads. A quantity
    compares by its value only, yet a failure message quotes it as written
    ("1Gi", "1024Mi"), so the texts of the capacity requests are part of the
    signature too. `config` is not: it is copied into an allocation, never
    searched, and fits are kept without their allocations.
    """
    texts = tuple(str(q) for r in claim.requests for e in r.subrequests for _, q in e.capacity_requests)
    return claim.requests, claim.constraints, texts
