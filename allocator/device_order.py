"""Device order within a node under `--device-placement spread` (docs/scoring.md); the default keeps upstream's first fit.

Upstream's allocator takes devices in pool order, so partitions fill the
first GPU with room before the next one is cut: binpack within the node.
`--device-placement spread` reorders each request's candidates, stably, so the search tries
first the devices whose counter sets have the most left (an untouched GPU
before a cut one), then shared devices whose shares consume the least;
devices without counters or shares keep their order. Which devices fit is
unchanged: only which of them a claim gets. One stricter answer: spread
takes the full pass for a lone request too, so a selector's runtime error on
a device first fit would never have reached fails the node (docs/design.md,
Allocation).
"""

from __future__ import annotations

from fractions import Fraction

from allocator.allocated_state import AllocatedState
from allocator.candidates import Candidate, Slot
from allocator.counters import Availability

BINPACK, SPREAD = "binpack", "spread"  # device placements: upstream's first fit (the default, which packs) or spread


def spread_candidates(slots: list[Slot], avail: Availability, state: AllocatedState) -> None:
    """Reorder every alternative's candidates, in place: the emptiest counter set or shared device first."""
    for slot in slots:
        for alt in slot.alternatives:
            alt.candidates.sort(key=lambda c: _fullness(c, avail, state))


def _fullness(c: Candidate, avail: Availability, state: AllocatedState) -> Fraction:
    """How much of what the device draws on is taken already (0: untouched), for ordering only."""
    device = c.device
    if c.pool is not None and device.consumes_counters:
        left = avail.get(c.pool.name)
        if left is None:
            return Fraction(0)
        worst = Fraction(0)
        for use in device.consumes_counters:
            totals = c.pool.counter_sets.get(use.counter_set) or {}
            remaining = left[0].get(use.counter_set) or {}
            for name, total in totals.items():
                if total.value > 0 and name in remaining:
                    worst = max(worst, 1 - Fraction(remaining[name]) / total.value)
        return worst
    if c.shared:
        consumed = state.consumed_capacity(device.id)
        if consumed:
            return max(
                (
                    Fraction(q.value) / device.capacity[n].value
                    for n, q in consumed.items()
                    if n in device.capacity and device.capacity[n].value > 0
                ),
                default=Fraction(0),
            )
    return Fraction(0)


def order_name(value: str) -> str:
    """The order's name, checked (a wrong one is an operator's mistake, never a silent first fit)."""
    if value not in (BINPACK, SPREAD):
        raise ValueError(f"device placement {value!r}: must be {BINPACK} or {SPREAD}")
    return value
