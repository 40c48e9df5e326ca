"""How full a node's own devices are: the measure /prioritize packs or spreads by (docs/scoring.md).

A node's node-local devices come in *units*, the things a large claim
wants whole: each shared counter set (a partitionable GPU: its partitions
draw on it) and each device that consumes no counters. A unit is *touched*
when anything on it is allocated or in flight (a partition, a share, the
device); its *use* is the share of it taken (a counter set: the largest
fraction of any of its counters consumed; a device held whole: 1; a shared
device: the largest fraction of its capacity the shares consume).

A node's *fullness* is its touched units plus the mean use of all its
units (< 1): touched units count first, so a node whose GPUs are all
touched is fuller than one with two GPUs used to the brim, and the mean use
orders nodes with the same number of touched units. /prioritize also asks
how many whole units a pod would break: the units its devices touch that
nothing touched before.

The per-node base (what is allocated and in flight) is kept until the
tracker's change log names the node; a pod's own devices, and those of
pods expected on the node, are added per call. On fresh nodes alike
(extender/filter/shapes.py) a pod's one device measures the same at the
same place: measured on the first such node, told to the others
(`NodeFullness.alike`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from allocator.allocated_state import AllocatedState
from allocator.device_view import DeviceView, SliceView
from allocator.quantity import Quantity
from allocator.types import DeviceID
from extender.filter.shapes import NodeShape
from tracker.node_changes_cursor import NodeChangesCursor
from tracker.state import ClusterState

# (driver, pool, counter set), or the device's own id for a device that consumes no counters (a DeviceID never
# equals a tuple): no key of its own per device, ~2.5 MB at 40,000 devices.
UnitKey = tuple[str, str, str] | DeviceID


@dataclass(slots=True)
class _Unit:
    totals: dict[str, float]  # counter (or capacity) -> total; empty: a device held whole or not at all
    used: dict[str, float]  # counter -> consumed by allocated devices
    whole: bool  # a device without counters allocated whole


# The unit of a device held whole or not at all, allocated or free: never changed once built (`_compute` writes
# only the units it makes for counter sets and shared devices), so every node's devices share these two.
_WHOLE_TAKEN = _Unit({}, {}, True)
_WHOLE_FREE = _Unit({}, {}, False)


@dataclass(slots=True)
class NodeUnits:
    """A node's units as of the tracker's state (allocated and in-flight devices)."""

    units: dict[UnitKey, _Unit]
    own: tuple[SliceView, ...]  # the slices of the node's own pools, whose devices (those on the node) make its units
    node: str
    allocated: set[DeviceID]  # already counted in the base
    base_touched: int = 0
    base_use: float = 0.0
    # The last `measure_devices` answer, by the identity of its tuple: a node's cached verdict hands
    # out the same devices tuple to every pod of a shape, so /filter's ranking measures it once.
    _last: tuple[tuple[DeviceView, ...], tuple[int, float]] | None = None

    def __post_init__(self) -> None:
        for unit in self.units.values():
            touched, use = _touched_use(unit, None, False, False)
            self.base_touched += touched
            self.base_use += use

    def measure(self, extra: Iterable[DeviceView] = ()) -> tuple[int, float]:
        """(touched units, mean use of all units), with the `extra` devices (a pod's, pods expected here) taken too."""
        if not self.units:
            return 0, 0.0
        if isinstance(extra, (list, tuple)) and not extra:
            return self.base_touched, self.base_use / len(self.units)
        added: dict[UnitKey, dict[str, float]] = {}
        whole: set[UnitKey] = set()
        shared: set[UnitKey] = set()
        for did in {d.id: d for d in extra if d.id not in self.allocated}:
            view = self._own_view(did)
            if view is None:
                continue  # not one of the node's own devices
            for key, counters in _device_units(view):
                if counters is None:
                    whole.add(key)
                elif not counters:
                    shared.add(key)
                else:
                    into = added.setdefault(key, {})
                    for name, v in counters.items():
                        into[name] = into.get(name, 0.0) + v
        touched = self.base_touched
        use = self.base_use
        for key in {*added, *whole, *shared}:
            unit = self.units.get(key)
            if unit is None:
                continue
            t0, u0 = _touched_use(unit, None, False, False)
            t1, u1 = _touched_use(unit, added.get(key), key in whole, key in shared)
            touched += t1 - t0
            use += u1 - u0
        return touched, use / len(self.units)

    def _own_view(self, did: DeviceID) -> DeviceView | None:
        """The node's own device `did` in its slices now (the last one, should a pool name it twice).

        Looked up by scanning the node's slices rather than kept in a map: a
        ranking measures a pod's one or few devices, and a map per node was
        ~2 KB x every node a first pass looks at.
        """
        node = self.node
        found = None
        for s in self.own:
            if s.pool != did.pool or s.driver != did.driver:
                continue
            local = s.node_name == node
            name = did.device
            for d in s.devices:
                if d.id.device == name and (local or d.node_name == node):
                    found = d
        return found

    def measure_devices(self, devices: tuple[DeviceView, ...]) -> tuple[int, float]:
        """`measure(devices)`, remembered for the last tuple measured (the units never change once built)."""
        last = self._last
        if last is not None and last[0] is devices:
            return last[1]
        result = self.measure(devices)
        self._last = (devices, result)
        return result


def _touched_use(unit: _Unit, more: dict[str, float] | None, whole: bool, shared: bool) -> tuple[int, float]:
    """(1 if touched, its use) of one unit, with `more` counters consumed, taken `whole`, or a `shared` share of it."""
    if unit.whole or whole:
        return 1, 1.0
    fraction = 0.0
    any_use = shared
    for name, total in unit.totals.items():
        used = unit.used.get(name, 0.0) + (more.get(name, 0.0) if more else 0.0)
        if used > 0:
            any_use = True
            if total > 0:
                fraction = max(fraction, used / total)
    return (1, min(1.0, fraction)) if any_use else (0, 0.0)


def _value(q: Quantity) -> float:
    """Floats: fullness only orders nodes, and exact fractions cost ~20x more per /prioritize."""
    v = q.value
    return v.numerator / v.denominator  # what float(Fraction) does, without its generic-number dispatch


ALIKE_KEPT = 4096  # (shape, place) measures kept for fresh nodes alike before they are forgotten


class NodeFullness:
    """Each node's units, kept until the tracker's change log names the node."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._nodes: dict[str, NodeUnits] = {}
        self._changes = NodeChangesCursor(state)
        # (shape, pool place, device) -> (base touched, touched, use) of one device on a fresh node of the shape
        self._alike: dict[tuple[int, int, str], tuple[int, int, float]] = {}
        self._told: dict[str, tuple[tuple[DeviceView, ...], tuple[int, int, float]]] = {}  # node -> its last told measure

    def alike(
        self, units_of: Callable[[str], NodeUnits], shape_of: Callable[[str], NodeShape | None]
    ) -> Callable[[str, tuple[DeviceView, ...]], tuple[int, int, float] | None]:
        """The lookup (node, a pod's devices) -> (base touched, touched, use) shared between fresh nodes alike, or None.

        Only for one device drawing on at most one unit: then the measure is
        one unit's use, the same floats on every node of the shape. Several
        units add up in an order that follows their keys' hashes (which name
        the pool), so those are measured on each node as before.
        """
        kept = self._alike
        nodes = self._nodes
        last = self._told

        def measure(node: str, devices: tuple[DeviceView, ...]) -> tuple[int, int, float] | None:
            told = last.get(node)
            if told is not None and told[0] is devices:
                return told[1]  # the node's cached verdict hands out the same tuple to every pod of a shape
            if len(devices) != 1 or len(devices[0].consumes_counters) > 1 or node in nodes:
                return None  # several units, or the node's own units are known (measured as before, remembered)
            shape = shape_of(node)
            if shape is None:
                return None
            did = devices[0].id
            place = shape.pools.get((did.driver, did.pool))
            if place is None:
                return None  # not one of the node's own devices
            key = (shape.key, place, did.device)
            known = kept.get(key)
            if known is None:
                units = units_of(node)
                known = (units.base_touched, *units.measure_devices(devices))
                if len(kept) >= ALIKE_KEPT:
                    kept.clear()
                kept[key] = known
            last[node] = (devices, known)
            return known

        return measure

    def of(self, node: str) -> NodeUnits:
        return self.current()(node)

    def current(self) -> Callable[[str], NodeUnits]:
        """Caught up with the tracker's changes once: the node -> units lookup for one ranking (no change comes in between)."""
        self._catch_up()
        nodes = self._nodes
        compute = self._compute

        def units_of(node: str) -> NodeUnits:
            units = nodes.get(node)
            if units is None:
                units = nodes[node] = compute(node)
            return units

        return units_of

    def _catch_up(self) -> None:
        changed = self._changes.advance()
        if changed is None:
            self._nodes.clear()
            self._alike.clear()
            self._told.clear()
        else:
            for name in changed:
                self._nodes.pop(name, None)
                self._told.pop(name, None)

    def _compute(self, node: str) -> NodeUnits:
        """The node's units as allocated now, read from its slices in one pass.

        Nothing per device is kept: at 5,000 nodes x 56 partitions a kept
        per-device table was ~180 objects per node, which /filter's first
        pass over the nodes built at ~0.3 ms a node and every full garbage
        collection then scanned (performance.md#partitions-at-5000-nodes).
        """
        ledger: AllocatedState = self.state.allocated_state
        reachable = self.state.queries.slices_for_node(node)
        # The node's own devices: a node-local slice's, or (per-device node selection) a device naming the node.
        pools = {(s.driver, s.pool) for s in reachable if s.node_name == node or any(d.node_name == node for d in s.devices)}
        own = tuple(s for s in reachable if (s.driver, s.pool) in pools)
        units: dict[UnitKey, _Unit] = {}
        for s in own:
            for cs in s.shared_counters:
                key = (s.driver, s.pool, cs.name)
                if key not in units:
                    units[key] = _Unit({c: _value(q) for c, q in cs.counters.items()}, {}, False)
        taken: set[DeviceID] = set()
        is_allocated = ledger.is_allocated
        for s in own:
            local = s.node_name == node
            for d in s.devices:
                if not local and d.node_name != node:
                    continue
                did = d.id
                allocated = is_allocated(did)
                if allocated:
                    taken.add(did)
                if d.consumes_counters:
                    if allocated:
                        for use in d.consumes_counters:
                            unit = units.get((s.driver, s.pool, use.counter_set))
                            if unit is not None and use.counters:
                                used = unit.used
                                for c, q in use.counters.items():
                                    used[c] = used.get(c, 0.0) + _value(q)
                    continue
                if d.allow_multiple_allocations and d.capacity:
                    # Shares: a unit whose counters are the device's capacity, used as far as the shares consume it.
                    unit = _Unit({c: _value(q) for c, q in d.capacity.items()}, {}, False)
                    consumed = ledger.consumed_capacity(did) if allocated else None
                    if consumed:
                        unit.used = {c: _value(q) for c, q in consumed.items()}
                    elif allocated:
                        unit.whole = True
                    units[did] = unit
                else:
                    units[did] = _WHOLE_TAKEN if allocated else _WHOLE_FREE
        return NodeUnits(units, own, node, taken)


Totals = dict[str, float]


def _device_units(d: DeviceView) -> tuple[tuple[UnitKey, Totals | None], ...]:
    """The unit(s) one of a node's own devices takes: (unit, counters it consumes); None: the device whole; {}: a share of it."""
    driver, pool = d.id.driver, d.id.pool
    if d.consumes_counters:
        return tuple(((driver, pool, use.counter_set), {c: _value(q) for c, q in use.counters.items()}) for use in d.consumes_counters)
    if d.allow_multiple_allocations and d.capacity:
        return ((d.id, {}),)  # a pod's share is not known here: counted as touching it
    return ((d.id, None),)
