"""Which nodes are fresh and alike: the same verdict for the same claims, with their own devices in the same places.

A node is *fresh* when nothing is allocated, shared or in flight on any
device of its own pools and no counter of them is consumed, and
*shareable* when each slice it reaches is either one of its own node-local
slices with a content digest (tracker/views/digests.py), every slice of
its pool being its own, or a slice shared with other nodes (no nodeName)
in a pool of only such slices. Two shareable fresh nodes whose slices line
up in the allocator's order (pools by driver and name, slices by name
within a pool: allocator/pools.py gather_pools), their own with the same
digests, the shared ones the very same objects reaching both or neither
by their labels, differ only in the names of the node, its pools and its
slices. Allocation reads nothing else of such a node: reachability (by
name for its own, by labels for the shared ones, the same for both), the
devices' effective views, the ledger (empty for their own pools, the same
for the shared ones), the classes and the selectors. So their verdicts are
the same, a fit taking the devices at the same places
(extender/filter/outcomes.py tells them).

A node's shape is kept until the tracker's change log names the node (a
slice of it, an allocation or reservation on it, the Node object); a change
that concerns every node (a shared slice, a device of a shared pool, a
DeviceClass) drops them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.device_view import SliceView
from allocator.types import DeviceID, Node
from tracker.node_changes_cursor import NodeChangesCursor
from tracker.state import ClusterState

# per slice in the allocator's order: (driver, the pool's place, digest) for the node's own,
# (driver, the slice, whether it reaches the node) for one shared with other nodes
ShapeKey = tuple[tuple[str, int, bytes] | tuple[str, SliceView, bool], ...]
KEPT_KEYS = 8192  # distinct shapes numbered before the numbering starts over (with new numbers: a shape is never misnumbered)


@dataclass(frozen=True, slots=True, eq=False)
class NodeShape:
    """A fresh, shareable node's slices in the allocator's order, with what names it."""

    key: int  # the same number for the same slices' digests in the same order (NodeShapes numbers them)
    slices: tuple[SliceView, ...]  # in the allocator's order
    pools: dict[tuple[str, str], int]  # (driver, pool) -> the pool's place in the allocator's order
    names: tuple[str, ...]  # the node's, its own pools' and slices' names: a message naming one is not shared
    # With slices shared with other nodes: the node's labels their reach was decided by (a verdict for the node
    # as the scheduler sent it with other labels is computed); None: only its own slices.
    labels: Mapping[str, str] | None = None

    def reached_as(self, node: Node) -> bool:
        """Whether the shape holds for `node` as the caller has it (its labels decide which shared slices reach it)."""
        return self.labels is None or node.labels == self.labels

    def places(self, devices: tuple[Any, ...]) -> tuple[tuple[int, int], ...] | None:
        """(slice, device) index of each of `devices` (DeviceViews of this node), None if one is not here."""
        where: dict[DeviceID, tuple[int, int]] = {}
        for si, s in enumerate(self.slices):
            for di, d in enumerate(s.devices):
                where[d.id] = (si, di)
        out = []
        for d in devices:
            place = where.get(d.id)
            if place is None or self.slices[place[0]].devices[place[1]] is not d:
                return None
            out.append(place)
        return tuple(out)

    def devices_at(self, places: tuple[tuple[int, int], ...]) -> tuple[Any, ...]:
        slices = self.slices
        return tuple(slices[si].devices[di] for si, di in places)

    def names_in(self, text: str) -> bool:
        """Whether `text` names this node, one of its pools or slices (then it is not told of another node)."""
        return any(name in text for name in self.names)


class NodeShapes:
    """Each node's shape (None: not fresh or not shareable), kept until the change log names the node."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._nodes: dict[str, NodeShape | None] = {}
        self._changes = NodeChangesCursor(state)
        # Each distinct ShapeKey's number: the caches key by a small int rather than hash the digests per lookup.
        self._numbers: dict[ShapeKey, int] = {}
        self._next = 0

    def current(self) -> Callable[[str], NodeShape | None]:
        """Caught up with the tracker's changes once: the node -> shape lookup for one call (no change comes in between)."""
        self._catch_up()
        nodes = self._nodes
        compute = self._compute

        def shape_of(node: str) -> NodeShape | None:
            if node in nodes:
                return nodes[node]
            shape = nodes[node] = compute(node)
            return shape

        return shape_of

    def _catch_up(self) -> None:
        changed = self._changes.advance()
        if changed is None:
            self._nodes.clear()
            self._numbers.clear()  # numbers are never reused; this lets go of the shared slices the keys hold
        else:
            for name in changed:
                self._nodes.pop(name, None)

    def _compute(self, node: str) -> NodeShape | None:
        queries = self.state.queries
        reachable = queries.slices_for_node(node)
        if not reachable:
            return None  # nothing to allocate from: cheap to decide, nothing to share
        digests: dict[str, bytes] = {}
        by_pool: dict[tuple[str, str], list[SliceView]] = {}
        shared_pools: dict[tuple[str, str], list[SliceView]] = {}
        shareable: list[DeviceID] = []  # devices that allow several allocations
        for s in reachable:
            if s.node_name is None:
                if s.per_device_node_selection:
                    return None  # each device reaches nodes of its own
                shared_pools.setdefault((s.driver, s.pool), []).append(s)
                continue
            if s.node_name != node:
                return None
            kept = queries.slice_digest(s.name)
            if kept is None:
                return None
            digests[s.name] = kept[0]
            shareable.extend(kept[1])
            by_pool.setdefault((s.driver, s.pool), []).append(s)
        if not by_pool:
            return None  # only slices shared with other nodes: nothing of its own to tell apart
        labels: Mapping[str, str] = {}
        reach: dict[str, bool] = {}
        if shared_pools:
            # The very same slices for every node (a change to one concerns every node): what differs is
            # which of them reach this node, by its labels; a pool that also has node-local slices is not shared.
            known = self.state.node(node)
            labels = known.labels if known is not None else {}
            as_node = known if known is not None else Node(node)
            for (driver, pool), members in shared_pools.items():
                if len(queries.pool_slices(driver, pool)) != len(members) or (driver, pool) in by_pool:
                    return None
                for s in members:
                    reach[s.name] = s.reachable_from(as_node)
        state = self.state
        if state.taken_on_node(node):
            return None  # a device of its own allocated whole or in flight: not fresh
        ledger = state.allocated_state
        for (driver, pool), own in by_pool.items():
            every = queries.pool_slices(driver, pool)
            if len(every) != len(own) or any(not any(o is s for o in own) for s in every):
                return None  # the pool has slices elsewhere (or not yet in view): not the node's alone
            if ledger.counters_held(driver, pool):
                return None  # a device of the pool that consumes counters is held: not fresh
        if any(ledger.is_allocated(did) for did in shareable):
            return None  # shares of a device held: not fresh
        order = sorted(by_pool)
        pools = {p: i for i, p in enumerate(order)}
        everything = {**by_pool, **shared_pools}
        slices = tuple(s for p in sorted(everything) for s in sorted(everything[p], key=lambda s: s.name))
        # A node's own slice by its pool's place and digest; a shared one as itself (the same object for every
        # node) and whether it reaches this node. In the allocator's order: where the shared pools sort among
        # the node's own (their names) is part of the shape.
        key = tuple(
            (s.driver, pools[(s.driver, s.pool)], digests[s.name]) if s.node_name is not None else (s.driver, s, reach[s.name])
            for s in slices
        )
        number = self._numbers.get(key)
        if number is None:
            if len(self._numbers) >= KEPT_KEYS:
                self._numbers.clear()  # numbers are never reused: a shape numbered again only shares less
            number = self._numbers[key] = self._next
            self._next += 1
        names = (node, *(p for _, p in order), *(s.name for s in slices if s.node_name is not None))
        return NodeShape(number, slices, pools, names, labels if shared_pools else None)
