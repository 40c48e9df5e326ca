"""Shared counters of partitionable devices (DRAPartitionableDevices), within one allocation call.

Mirrors upstream's incubating allocator (`checkAvailableCounters`,
`deallocateCountersForDevice`), quirks included, so a node fits exactly when
kube-scheduler 1.36's in-tree plugin would say it does:

- What is available in a pool is its counter sets minus what every device of
  the pool that is allocated (whole or shared, in flight included) consumes,
  whichever node that device is on. It can be negative.
- Picks of this call add up; a candidate is charged first, then every
  counter of the pool is compared, so an over-committed pool refuses every
  device that consumes counters.
- Both tallies are keyed by the pool's *name* only (not the driver).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from allocator.allocated_state import AllocatedState
from allocator.device_view import SliceView
from allocator.quantity import Quantity, format_quantity
from allocator.types import CounterConsumption

Number = int | Fraction
Tally = dict[str, dict[str, Number]]  # counter set -> counter -> value
Availability = dict[str, tuple[Tally, bool]]  # pool name -> (counters left, some counter already below zero)


def _n(q: Quantity) -> Number:
    """Whole quantities (the usual case: bytes, cores) as ints, whose arithmetic is ~20x cheaper than Fraction's."""
    v = q.value
    return v.numerator if v.denominator == 1 else v


class CounterTally:
    """Available and consumed counters per pool name for one allocation call.

    `shared` lets the tallies of one call (first fit, candidate lists, the
    search) compute a pool's availability once: it depends only on what is
    allocated, not on the call's own picks.
    """

    __slots__ = ("_available", "_consumed", "_state")

    def __init__(self, state: AllocatedState, shared: Availability | None = None) -> None:
        self._state = state
        self._available: Availability = shared if shared is not None else {}
        self._consumed: dict[str, dict[str, dict[str, Number]]] = {}

    def available(self, pool: str, counter_sets: Mapping[str, Mapping[str, Quantity]], slices: Iterable[SliceView]) -> Tally:
        """The pool's counters left by allocated devices (computed once per pool name, as upstream)."""
        known = self._available.get(pool)
        if known is not None:
            return known[0]
        tally: Tally = {name: {c: _n(q) for c, q in counters.items()} for name, counters in counter_sets.items()}
        is_allocated = self._state.is_allocated
        for s in slices:
            for device in s.devices:
                if device.consumes_counters and is_allocated(device.id):
                    for use in device.consumes_counters:
                        left = tally.get(use.counter_set)
                        if left is None:
                            continue
                        for name, q in use.counters.items():
                            if name in left:
                                left[name] -= _n(q)
        self._available[pool] = (tally, any(v < 0 for counters in tally.values() for v in counters.values()))
        return tally

    def charge(self, pool: str, available: Tally, consumption: tuple[CounterConsumption, ...]) -> bool:
        """Add a candidate's consumption; undo it and answer False if any counter of the pool is then short."""
        consumed = self._consumed.setdefault(pool, {})
        for use in consumption:
            counters = consumed.setdefault(use.counter_set, {})
            for name, q in use.counters.items():
                counters[name] = counters.get(name, 0) + _n(q)
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, value in counters.items():
                if value < used.get(name, 0):
                    self.release(pool, consumption)
                    return False
        return True

    def release(self, pool: str, consumption: tuple[CounterConsumption, ...]) -> None:
        consumed = self._consumed.get(pool, {})
        for use in consumption:
            counters = consumed.get(use.counter_set)
            if counters is None:
                continue
            for name, q in use.counters.items():
                counters[name] = counters.get(name, 0) - _n(q)

    def would_fit_alone(self, pool: str, available: Tally, consumption: tuple[CounterConsumption, ...]) -> bool:
        """Whether the device could be charged with nothing else picked (a device that cannot never will).

        `available` must come from `available(pool, ...)` of this tally.
        """
        known = self._available.get(pool)
        if known is not None and known[1]:
            return False  # every counter of the pool is compared: an over-committed one refuses all
        if len(consumption) == 1:
            use = consumption[0]
            left = available.get(use.counter_set)
            return left is None or all(name not in left or left[name] >= _n(q) for name, q in use.counters.items())
        own: dict[tuple[str, str], Number] = {}
        for use in consumption:
            for name, q in use.counters.items():
                own[(use.counter_set, name)] = own.get((use.counter_set, name), 0) + _n(q)
        return all(key[0] not in available or key[1] not in available[key[0]] or available[key[0]][key[1]] >= v for key, v in own.items())


def describe_short(available: Tally, consumption: tuple[CounterConsumption, ...]) -> str:
    """`counter set gpu-0: memory 0 of ... left`: the counters a device needs that are short."""
    parts = []
    for use in consumption:
        left = available.get(use.counter_set, {})
        for name, q in sorted(use.counters.items()):
            have = left.get(name)
            if have is not None and have < 0:
                parts.append(f"{use.counter_set}/{name}: over-committed by {format_quantity(-have)}, {q} needed")
            elif have is not None and have < q.value:
                parts.append(f"{use.counter_set}/{name}: {format_quantity(have)} left, {q} needed")
    if not parts:
        negative = [f"{s}/{c}" for s, counters in available.items() for c, v in counters.items() if v < 0]
        if negative:
            return f"the pool's counters are over-committed ({', '.join(sorted(negative))})"
        return "the pool's counters are used up"
    return ", ".join(parts)
