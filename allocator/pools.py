"""Which resource pools a node can allocate from (upstream's incubating GatherPools).

Per (driver, pool): the newest generation among the slices that reach the
node. A pool whose reachable slices are fewer than `resourceSliceCount` is
checked against all of the pool's slices: a newer generation anywhere drops
it, the same count makes it complete (the other slices then count for shared
counters only, never for allocation), fewer leaves it incomplete. A complete
pool is invalid when device names repeat, a counter set name repeats, or a
device consumes a counter set or counter that does not exist.

One deliberate difference: upstream treats every slice with shared counters
as relevant to every node; here a counter-set slice joins a node's pool only
through that pool (docs/design.md, "Partitionable devices").

Kubernetes 1.34's alpha shape, `sharedCounters` and the devices consuming
them in one slice, is a device slice that also brings counter sets (its
devices consume only those, checked at parsing). 1.34 scopes a counter set
to its slice, here to the pool: equal while names do not repeat in a pool,
and a pool where they do is invalid, saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from allocator.device_view import SliceView
from allocator.features import DEFAULT_FEATURES, Features
from allocator.quantity import Quantity
from allocator.types import Node

PoolSlices = Callable[[str, str], Sequence[SliceView]]  # (driver, pool) -> every slice of the pool


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices: list[SliceView]  # device slices reaching the node, sorted by name
    other_slices: list[SliceView] = field(default_factory=list)  # of the pool, not reaching the node: counters only
    counter_sets: dict[str, Mapping[str, Quantity]] = field(default_factory=dict)
    incomplete: bool = False
    invalid: str = ""

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def _counters_only(s: SliceView) -> bool:
    """A counter-set slice (1.35+): in every node's view of its pool. A 1.34 slice with devices too is a device slice."""
    return bool(s.shared_counters) and not s.devices


def _relevant(s: SliceView, node: Node, features: Features) -> bool:
    if _counters_only(s):
        return features.partitionable_devices
    if s.per_device_node_selection:
        return features.partitionable_devices and any(d.reachable_from(node) for d in s.devices)
    return s.reachable_from(node)


def gather_pools(
    node: Node, slices: Iterable[SliceView], features: Features = DEFAULT_FEATURES, pool_slices: PoolSlices | None = None
) -> list[Pool]:
    """The node's pools, sorted by driver then pool name (the allocator's first-fit order)."""
    pools: dict[tuple[str, str], Pool] = {}
    for s in slices:
        if not _relevant(s, node, features):
            continue
        key = (s.driver, s.pool)
        pool = pools.get(key)
        if pool is None or s.generation > pool.generation:
            pools[key] = Pool(s.driver, s.pool, s.generation, s.resource_slice_count, [s])
        elif s.generation == pool.generation:
            pool.slices.append(s)
    out: list[Pool] = []
    for pool in sorted(pools.values(), key=lambda p: (p.driver, p.name)):
        others: list[SliceView] = []
        if len(pool.slices) != pool.slice_count:
            if pool_slices is None:
                pool.incomplete = True
                out.append(pool)
                continue
            everything = pool_slices(pool.driver, pool.name)
            if any(s.generation > pool.generation for s in everything):
                continue  # being replaced by a generation that does not reach this node: ignore the old one
            same = [s for s in everything if s.generation == pool.generation]
            if len(same) != pool.slice_count:
                pool.incomplete = True
                out.append(pool)
                continue
            mine = {id(s) for s in pool.slices}
            for s in same:
                if id(s) in mine:
                    continue
                if _counters_only(s) and features.partitionable_devices:
                    pool.slices.append(s)  # counter sets belong to every node's view of the pool
                else:
                    others.append(s)
        _build(pool, others, features)
        out.append(pool)
    # Pools with devices that have binding conditions go last (upstream GatherPools): such a
    # device delays the pod's binding, so every other pool is tried first.
    late = [p for p in out if not p.incomplete and any(d.binding_conditions for s in p.slices for d in s.devices)]
    if late:
        out = [p for p in out if p not in late] + late
    return out


def _build(pool: Pool, others: list[SliceView], features: Features) -> None:
    pool.slices.sort(key=lambda s: s.name)
    counter_slices = [s for s in (*pool.slices, *others) if s.shared_counters] if features.partitionable_devices else []
    pool.slices = [s for s in pool.slices if not _counters_only(s)]
    seen: set[str] = set()
    for s in pool.slices:
        for d in s.devices:
            if d.name in seen:
                pool.invalid = f"duplicate device name {d.name}"
                return
            seen.add(d.name)
    if not features.partitionable_devices:
        return
    for s in counter_slices:
        for cs in s.shared_counters:
            if cs.name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.name}"
                if any(c.devices for c in counter_slices):
                    pool.invalid += (
                        " (Kubernetes 1.34 scopes a counter set to its slice, the extender to the pool:"
                        " not supported, give each slice's counter sets their own names)"
                    )
                return
            pool.counter_sets[cs.name] = cs.counters
    for group in (pool.slices, others):
        problem = _check_consumption(pool.counter_sets, group)
        if problem:
            pool.invalid = problem
            return
    pool.other_slices = others


def _check_consumption(counter_sets: Mapping[str, Mapping[str, Quantity]], slices: Iterable[SliceView]) -> str:
    for s in slices:
        for d in s.devices:
            for use in d.consumes_counters:
                counters = counter_sets.get(use.counter_set)
                if counters is None:
                    return f"counter set {use.counter_set} not found"
                for name in use.counters:
                    if name not in counters:
                        return f"counter {name} not found in counter set {use.counter_set}"
    return ""
