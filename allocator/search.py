"""The second half of upstream's allocator: depth-first search with backtracking.

Slots (allocator/candidates.py) are filled in pod order, devices tried in
pool order; counters, shared capacity and constraints are tracked as picks
are made and taken back, in upstream's order: in use, capacity, counters
(charged), taints, constraints. The first complete solution wins; a budget
bounds the steps so a pathological constraint set cannot hold the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from allocator import capacity as cap
from allocator import constraints as cons
from allocator.allocated_state import AllocatedState
from allocator.candidates import Alternative, Candidate, Slot
from allocator.counters import Availability, CounterTally, Tally
from allocator.failures import (
    REASON_ALLOCATED,
    REASON_CAPACITY,
    REASON_CONSTRAINTS,
    REASON_COUNTERS,
    REASON_NO_DEVICES,
    REASON_SEARCH_LIMIT,
    ClaimName,
    Failure,
    of_claim,
)
from allocator.types import ALLOCATION_RESULTS_MAX_SIZE, DeviceClass, DeviceID, ExactRequest, ResourceClaim


@dataclass(slots=True)
class Pick:
    result_name: str
    candidate: Candidate
    request: ExactRequest


@dataclass(slots=True)
class _Taken:
    """What taking a candidate changed, to be taken back when the search backtracks."""

    fresh: bool  # the device was not picked before in this call (taken whole)
    charged: bool  # its pool's counters were charged


class Search:
    """Depth-first search with backtracking over all slots of all pending claims."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        slots: list[Slot],
        budget: int,
        state: AllocatedState,
        counters_in_play: bool,
        avail: Availability,
    ) -> None:
        self.claims = claims
        self.slots = slots
        self.budget = budget
        self.state = state
        self.steps = 0
        self.picks: list[list[Pick]] = [[] for _ in claims]
        self.classes_used: list[list[tuple[str, DeviceClass]]] = [[] for _ in claims]
        self.picked: dict[DeviceID, int] = {}  # device taken whole -> claim index
        self.constraints = [cons.build(c.constraints) for c in claims]
        self.counters = CounterTally(state, avail)
        self.available: dict[int, Tally] = {}  # id(pool) -> its availability
        self.allocating: dict[DeviceID, dict[str, Fraction]] = {}  # shared device -> capacity taken in this call
        # With counters, every candidate is tried (upstream has no early cut-off, and charges leak).
        self.exhaustive = counters_in_play
        self.constraint_blocked = 0
        self.counter_blocked = 0
        self.counter_unknown = ""  # why a pool took no counter-consuming device (an allocated one's consumption is unknown)
        self.capacity_blocked = 0
        self.shortage: tuple[Slot, Alternative] | None = None
        self.exhausted = False

    def run(self) -> list[list[Pick]] | None:
        return [list(p) for p in self.picks] if self._slot(0) else None

    def _slot(self, i: int) -> bool:
        if i == len(self.slots):
            return True
        slot = self.slots[i]
        for alt in slot.alternatives:
            self.classes_used[slot.claim_index].append((alt.result_name, alt.device_class))
            if self._pick(i, slot, alt, 0, 0):
                return True
            self.classes_used[slot.claim_index].pop()
            if self.exhausted:
                return False
        return False

    def _pick(self, i: int, slot: Slot, alt: Alternative, n: int, start: int) -> bool:
        if n == alt.count:
            return self._slot(i + 1)
        ci = slot.claim_index
        picks = self.picks[ci]
        if len(picks) >= ALLOCATION_RESULTS_MAX_SIZE:
            return False
        candidates = alt.candidates
        # Without counters, stop where too few candidates are left to finish the request.
        end = len(candidates) if self.exhaustive else len(candidates) - (alt.count - n) + 1
        for pos in range(start, end):
            self.steps += 1
            if self.steps > self.budget:
                self.exhausted = True
                return False
            candidate = candidates[pos]
            taken = self._take(ci, alt, candidate)
            if taken is None:
                continue
            picks.append(Pick(alt.result_name, candidate, alt.request))
            if self._pick(i, slot, alt, n + 1, pos + 1):
                return True
            picks.pop()
            self._give_back(ci, alt, candidate, taken)
            if self.exhausted:
                return False
        if self.shortage is None and not self.constraint_blocked:
            self.shortage = (slot, alt)
        return False

    def _take(self, ci: int, alt: Alternative, candidate: Candidate) -> _Taken | None:
        """Take `candidate` for claim `ci` if it is free, fits and keeps the constraints; None if not."""
        device = candidate.device
        did = device.id
        shared = candidate.shared
        owner = None if shared else self.picked.get(did)
        if owner is not None and (not alt.request.admin_access or owner == ci):
            return None
        allocating = self.allocating.get(did) if shared else None
        if candidate.amounts is not None and allocating is not None:
            committed = self.state.consumed_capacity(did)
            if not cap.fits(candidate.amounts, device.capacity, device.capacity_policies, committed, allocating):
                self.capacity_blocked += 1
                return None
        charged = False
        pool = candidate.pool
        if pool is not None and not (shared and (allocating is not None or self.state.consumed_capacity(did) is not None)):
            available = self.available.get(id(pool))
            if available is None:
                available = self.available[id(pool)] = self.counters.available(
                    pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices], pool.driver
                )
            if not self.counters.charge(pool.name, available, device.consumes_counters):
                self.counter_blocked += 1
                self.counter_unknown = self.counter_unknown or self.counters.unknown(pool.name)
                return None
            charged = True
        if candidate.blocked:
            return None  # tainted: its counters stay charged for the rest of the call, as upstream's do
        if not self._constrain(ci, alt, candidate):
            self.constraint_blocked += 1
            return None  # counters charged above stay charged, as upstream's do
        fresh = not shared and owner is None
        if fresh:
            self.picked[did] = ci
        if shared:
            taken = self.allocating.setdefault(did, {})
            for name, amount in (candidate.amounts or {}).items():
                taken[name] = taken.get(name, Fraction(0)) + amount
        return _Taken(fresh, charged)

    def _constrain(self, ci: int, alt: Alternative, candidate: Candidate) -> bool:
        """Add the device to claim `ci`'s constraints; all or none of them take it."""
        parent, _, sub = alt.result_name.partition("/")
        constraints = self.constraints[ci]
        added = 0
        for c in constraints:
            if not c.add(parent, sub, candidate.device):
                break
            added += 1
        if added == len(constraints):
            return True
        for c in constraints[:added]:
            c.remove(parent, sub, candidate.device)
        return False

    def _give_back(self, ci: int, alt: Alternative, candidate: Candidate, taken: _Taken) -> None:
        device = candidate.device
        did = device.id
        parent, _, sub = alt.result_name.partition("/")
        for c in self.constraints[ci]:
            c.remove(parent, sub, device)
        if taken.fresh:
            del self.picked[did]
        if candidate.shared:
            if candidate.amounts:  # upstream leaves an empty entry behind for a device without capacity
                left = self.allocating[did]
                for name, amount in candidate.amounts.items():
                    left[name] -= amount
                if all(v == 0 for v in left.values()):
                    del self.allocating[did]
        elif taken.charged and candidate.pool is not None:
            self.counters.release(candidate.pool.name, device.consumes_counters)

    def failure(self) -> Failure:
        if self.exhausted:
            names: list[str | ClaimName] = []
            for i, c in enumerate(self.claims):
                names += [", ", ClaimName(c.key)] if i else [ClaimName(c.key)]
            return Failure(
                REASON_SEARCH_LIMIT,
                (
                    f"gave up after {self.budget} allocation steps: the constraints of ",
                    *names,
                    " admit too many combinations on this node",
                ),
            )
        constrained = [c for c in self.claims if c.constraints]
        if self.constraint_blocked and constrained:
            c = constrained[0]
            what = "; ".join(
                f"{'matchAttribute' if k.match_attribute else 'distinctAttribute'} "
                f"{k.match_attribute or k.distinct_attribute}" + (f" on requests {', '.join(k.requests)}" if k.requests else "")
                for k in c.constraints
            )
            return of_claim(REASON_CONSTRAINTS, c.key, f": no combination of available devices satisfies the constraints ({what})")
        if self.shortage is not None:
            return self._shortage_failure(*self.shortage)
        return Failure(REASON_NO_DEVICES, ("no allocation found for the pod's claims on this node",))

    def _shortage_failure(self, slot: Slot, alt: Alternative) -> Failure:
        claim = self.claims[slot.claim_index]
        where = f", request {alt.result_name}: {alt.usable} devices usable, but"
        if self.counter_blocked:
            code = REASON_COUNTERS
            why = f"the shared counters of their pools do not cover {alt.count} of them together with the other picks of this pod"
            if self.counter_unknown:
                why = f"{why} ({self.counter_unknown})"
        elif self.capacity_blocked:
            code = REASON_CAPACITY
            why = f"not enough capacity is left on them for {alt.count} together with the other picks of this pod"
        else:
            code = REASON_ALLOCATED
            why = f"not enough left for {alt.count} after the devices picked for other requests of this pod"
        return of_claim(code, claim.key, f"{where} {why}", alt.result_name)
