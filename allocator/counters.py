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

Deliberate differences (docs/design.md, "Counters and shares as allocated"):

- An allocated device is charged what it consumed when it was allocated
  (the allocated state's record, kept on the claim across restarts:
  allocator/counter_record.py), and the maximum of that and what its
  current slice says per counter; upstream reads the current slices only, so
  a pool republished without an allocated device frees its counters.
- A held device whose consumption was never seen (not in the current slices,
  nothing recorded) makes the pool refuse every counter-consuming device.
- A negative consumption never makes room: it counts as zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from allocator.allocated_state import AllocatedState
from allocator.device_view import SliceView
from allocator.quantity import Quantity, format_quantity
from allocator.types import CounterConsumption, DeviceID

Number = int | Fraction
Tally = dict[str, dict[str, Number]]  # counter set -> counter -> value
# pool name -> (counters left, some counter already below zero, why the pool takes no counter-consuming device)
Availability = dict[str, tuple[Tally, bool, str]]


def _value(q: Quantity) -> Number:
    v = q.value
    return v.numerator if v.denominator == 1 else v


def _n(q: Quantity) -> Number:
    """Whole quantities (the usual case: bytes, cores) as ints, whose arithmetic is ~20x cheaper than Fraction's.

    A negative amount counts as zero: a consumption never makes room (such a
    device is refused anyway, allocator/parse/slices.py).
    """
    v = q.value
    if v.denominator == 1:
        n = v.numerator
        return n if n > 0 else 0
    return v if v > 0 else 0


def _sums(consumption: tuple[CounterConsumption, ...]) -> dict[tuple[str, str], Number]:
    """A device's consumption per (counter set, counter)."""
    own: dict[tuple[str, str], Number] = {}
    for use in consumption:
        for name, q in use.counters.items():
            key = (use.counter_set, name)
            own[key] = own.get(key, 0) + _n(q)
    return own


def larger_consumption(recorded: tuple[CounterConsumption, ...], now: tuple[CounterConsumption, ...]) -> tuple[CounterConsumption, ...]:
    """The larger, per counter, of a held device's record and what its slice says now (negatives as zero).

    `recorded` itself when `now` takes no counter beyond it, so an unchanged
    record stays the same object.
    """
    was, is_now = _sums(recorded), _sums(now)
    if all(v <= was.get(key, 0) for key, v in is_now.items()):
        return recorded
    merged: dict[str, dict[str, Quantity]] = {}
    for key in (*was, *(k for k in is_now if k not in was)):
        v = max(was.get(key, 0), is_now.get(key, 0))
        merged.setdefault(key[0], {})[key[1]] = Quantity(Fraction(v), format_quantity(v))
    return tuple(CounterConsumption(set_name, counters) for set_name, counters in merged.items())


def exceeds(recorded: tuple[CounterConsumption, ...], now: tuple[CounterConsumption, ...]) -> bool:
    """Whether `recorded` takes more of some counter than `now` does (negatives as zero): a held device's
    slice now says it consumes less than it was charged."""
    is_now = _sums(now)
    return any(v > is_now.get(key, 0) for key, v in _sums(recorded).items())


def describe_consumption(consumption: tuple[CounterConsumption, ...]) -> str:
    """`gpu-0/memory 20Gi, gpu-0/cores 2`: a device's consumption per counter, for messages ("" for none)."""
    return ", ".join(f"{s}/{name} {format_quantity(v)}" for (s, name), v in sorted(_sums(consumption).items()))


def _subtract(tally: Tally, consumption: tuple[CounterConsumption, ...]) -> None:
    for use in consumption:
        left = tally.get(use.counter_set)
        if left is None:
            continue
        for name, q in use.counters.items():
            if name in left:
                left[name] -= _n(q)


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

    def available(self, pool: str, counter_sets: Mapping[str, Mapping[str, Quantity]], slices: Sequence[SliceView], driver: str) -> Tally:
        """The pool's counters left by allocated devices (computed once per pool name, as upstream).

        Each allocated device is charged the larger, per counter, of what its
        current slice says and what was recorded when it was allocated
        (`counters_held` of the pool `driver`/`pool`).
        """
        known = self._available.get(pool)
        if known is not None:
            return known[0]
        tally: Tally = {name: {c: _value(q) for c, q in counters.items()} for name, counters in counter_sets.items()}
        current: dict[DeviceID, tuple[CounterConsumption, ...]] = {}
        is_allocated = self._state.is_allocated
        for s in slices:
            for device in s.devices:
                if device.consumes_counters and is_allocated(device.id):
                    current[device.id] = device.consumes_counters
                    _subtract(tally, device.consumes_counters)
        unknown: list[DeviceID] = []
        held = self._state.counters_held(driver, pool) if counter_sets else {}
        published: set[DeviceID] | None = None
        for did, recorded in held.items():
            now = current.get(did)
            if recorded is None:
                if now is None:
                    if published is None:
                        published = {d.id for s in slices for d in s.devices}
                    if did not in published:
                        unknown.append(did)
                continue
            if now is recorded or now == recorded:
                continue  # the usual case: the slice still says what it said when allocated
            # Charged the larger of both, per counter: add what the record holds beyond the current slice.
            was, is_now = _sums(recorded), _sums(now or ())
            for (set_name, name), v in was.items():
                extra = v - is_now.get((set_name, name), 0)
                left = tally.get(set_name)
                if extra > 0 and left is not None and name in left:
                    left[name] -= extra
        why = ""
        if unknown:
            names = ", ".join(str(d) for d in sorted(unknown, key=str)[:3])
            why = (
                f"allocated device {names} is no longer published and what it consumes was never seen: "
                f"pool {pool} takes no device that consumes counters until it is deallocated"
            )
        self._available[pool] = (tally, any(v < 0 for counters in tally.values() for v in counters.values()), why)
        return tally

    def unknown(self, pool: str) -> str:
        """Why the pool takes no counter-consuming device (an allocated device's consumption is unknown), or ""."""
        known = self._available.get(pool)
        return known[2] if known is not None else ""

    def charge(self, pool: str, available: Tally, consumption: tuple[CounterConsumption, ...]) -> bool:
        """Add a candidate's consumption; undo it and answer False if any counter of the pool is then short."""
        if self.unknown(pool):
            return False
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
        if known is not None and (known[1] or known[2]):
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


def describe_short(available: Tally, consumption: tuple[CounterConsumption, ...], unknown: str = "") -> str:
    """`counter set gpu-0: memory 0 of ... left`: the counters a device needs that are short."""
    if unknown:
        return unknown
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
