"""Which devices are taken: allocated to claims, or in flight while a /bind writes.

The one place that changes `allocated` and `inflight` (upstream's
allocateddevices.go and its in-flight claims play the same part), so every
change can be reported to whoever caches answers that depend on it.

A device that allows multiple allocations (consumable capacity) is held in
*shares*. As upstream, every allocation result on the device is one share
with the capacity it consumes, whatever its `shareID`: two results that carry
the same shareID (a foreign allocator's fault) are two shares, reported, and
never free each other's capacity. A negative consumedCapacity counts as zero.

While a device is held (whole, in a share, or in flight) the ledger keeps
what it consumed of its pool's counters: what the claim's record says (the
annotation /bind wrote with the allocation, allocator/counter_record.py,
so the figure survives a restart and a leader change), else what the
device's slice said when it was first held (or, if no slice had it then, the
first time one does); raised per counter by any version of the slice that
says more, so a pool republished without it (or with another
consumesCounters) cannot make its counters look free. A slice that says a
held device consumes less than recorded is told (`on_lowered`, once per
device and figure); a claim without a record whose device consumes counters
is told once (`on_unrecorded`): it is charged what the slice says. The ledger answers the allocator's questions
(allocator.allocated_state): held whole, held at all, the capacity the
shares consume together, and the counters a pool's held devices consume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from types import MappingProxyType, TracebackType

from allocator.allocated_state import Recorded
from allocator.counters import exceeds, larger_consumption
from allocator.quantity import Quantity, format_quantity
from allocator.types import AllocationResult, CounterConsumption, DeviceID, DeviceRequestAllocationResult

ShareHold = tuple[str, Mapping[str, Quantity] | None]  # (claim key, consumed capacity)
# (device, share ID) -> what holds it; one claim reserves each share ID once
InflightShares = Mapping[tuple[DeviceID, str], ShareHold]
# (claim key, share ID of the claim's results, the share's device) -> the claims sharing the ID on the device
DuplicateReporter = Callable[[str, str, DeviceID, tuple[str, ...]], None]
# (device, its holders, what it was charged, what its slice says now)
LoweredReporter = Callable[[DeviceID, str, tuple[CounterConsumption, ...], tuple[CounterConsumption, ...]], None]
# (claim key, one of its devices that consumes counters) for a claim allocated without a record
UnrecordedReporter = Callable[[str, DeviceID], None]
# The counters each device of a claim's allocation was charged, as the claim records them
ClaimRecord = Mapping[DeviceID, tuple[CounterConsumption, ...]]


class _Share:
    __slots__ = ("claim_key", "consumed", "share_id")

    def __init__(self, claim_key: str, share_id: str, consumed: Mapping[str, Quantity] | None) -> None:
        self.claim_key = claim_key
        self.share_id = share_id
        self.consumed = consumed


class Reservation:
    """Devices and shares held in flight for one /bind decision; `release()` is idempotent."""

    __slots__ = ("_ledger", "devices", "shares")

    def __init__(self, ledger: AllocationLedger, devices: Mapping[DeviceID, str], shares: InflightShares) -> None:
        self._ledger = ledger
        self.devices = dict(devices)
        self.shares = dict(shares)

    def release(self) -> None:
        self._ledger._release(self.devices, self.shares)
        self.devices = {}
        self.shares = {}

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release()


def _nothing(did: DeviceID) -> Recorded:
    return None


class AllocationLedger:
    """`allocated` and `inflight` are read-only views: only the methods below change them.

    `lookup` answers what a published device consumes of its pool's counters
    (None: not published); `on_duplicate` hears of a shareID two results use on one
    device, once per claim involved; `on_lowered` of a held device whose slice
    says less than recorded; `on_unrecorded` of a claim without a record.
    """

    def __init__(
        self,
        on_change: Callable[[DeviceID], None] = lambda _did: None,
        *,
        lookup: Callable[[DeviceID], Recorded] = _nothing,
        on_duplicate: DuplicateReporter | None = None,
        on_lowered: LoweredReporter | None = None,
        on_unrecorded: UnrecordedReporter | None = None,
    ) -> None:
        self._allocated: dict[DeviceID, str] = {}  # device -> claim key, from claim statuses
        # device -> further claims whose status also holds it whole (two allocators at fault): the device stays
        # held until the last of them lets it go
        self._also_allocated: dict[DeviceID, set[str]] = {}
        self._inflight: dict[DeviceID, str] = {}  # device -> claim key, chosen at /bind, not in the view yet
        self._claims: dict[str, tuple[DeviceRequestAllocationResult, ...]] = {}  # claim key -> its results that hold devices
        # device -> (claim key, index of the result in the claim) -> share: one per allocation result
        self._shares: dict[DeviceID, dict[tuple[str, int], _Share]] = {}
        # device -> (claim key, share ID) -> share, chosen at /bind
        self._inflight_shares: dict[DeviceID, dict[tuple[str, str], _Share]] = {}
        self._capacity: dict[DeviceID, dict[str, Quantity]] = {}  # summed consumed capacity per shared device
        # Every held device (whole, shared, in flight) -> the counters it consumed (None: never seen)
        self._recorded: dict[DeviceID, Recorded] = {}
        # (driver, pool) -> its held devices that consume counters or whose consumption is unknown, and the unknown ones
        self._pools: dict[tuple[str, str], dict[DeviceID, Recorded]] = {}
        self._unknown: dict[tuple[str, str], set[DeviceID]] = {}
        # held device -> the slice's figure last told as lower than the record (told once per figure)
        self._lowered: dict[DeviceID, tuple[CounterConsumption, ...]] = {}
        # held device -> the claims holding it without a record; the claims told so (until deallocated)
        self._unrecorded: dict[DeviceID, set[str]] = {}
        self._told_unrecorded: set[str] = set()
        self._on_change = on_change
        self._on_lowered = on_lowered
        self._on_unrecorded = on_unrecorded
        self._lookup = lookup
        self._on_duplicate = on_duplicate
        self._allocated_view = MappingProxyType(self._allocated)
        self._inflight_view = MappingProxyType(self._inflight)

    @property
    def allocated(self) -> Mapping[DeviceID, str]:
        return self._allocated_view

    @property
    def inflight(self) -> Mapping[DeviceID, str]:
        return self._inflight_view

    # ------------------------------------------------------------------ allocator.allocated_state.AllocatedState

    def is_taken(self, did: DeviceID) -> bool:
        return did in self._allocated or did in self._inflight

    def is_allocated(self, did: DeviceID) -> bool:
        return did in self._recorded  # one lookup: the allocator asks this of every device of a pool with counters

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return self._capacity.get(did)

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, Recorded]:
        key = (driver, pool)
        held = self._pools.get(key)
        if not held:
            return {}
        for did in list(self._unknown.get(key, ())):
            published = self._lookup(did)
            if published is not None:  # published again (or at last): what it consumes is known from now on
                self.learn(did, published)
        return MappingProxyType(held)

    # ------------------------------------------------------------------ queries

    def holder(self, did: DeviceID) -> str | None:
        held = self._allocated.get(did) or self._inflight.get(did)
        if held is not None:
            return held
        keys = {s.claim_key for s in self._shares.get(did, {}).values()} | {k for k, _ in self._inflight_shares.get(did, {})}
        return ", ".join(sorted(keys)) if keys else None

    def shares(self, did: DeviceID) -> Mapping[str, str]:
        """share ID -> claim key(s), for a device held in shares (a duplicated ID lists every claim using it)."""
        by_id: dict[str, set[str]] = {}
        for s in (*self._shares.get(did, {}).values(), *self._inflight_shares.get(did, {}).values()):
            by_id.setdefault(s.share_id, set()).add(s.claim_key)
        return {sid: ", ".join(sorted(keys)) for sid, keys in by_id.items()}

    def recorded_counters(self, did: DeviceID) -> Recorded:
        """What a held device consumes of its pool's counters as recorded (None: held but never seen, or not held)."""
        return self._recorded.get(did)

    # ------------------------------------------------------------------ changes

    def set_claim(self, claim_key: str, results: Iterable[DeviceRequestAllocationResult], record: ClaimRecord | None = None) -> None:
        """What the claim's status allocates now (nothing once deallocated or deleted); admin access takes nothing.

        `record`: what the claim says its devices were charged (None: it has
        no record); a recorded figure joins the device's record, per counter
        the larger. Devices the claim keeps keep their recorded counter consumption.
        """
        old = self._claims.pop(claim_key, ())
        new = tuple(r for r in results if not r.admin_access)
        if new:
            self._claims[claim_key] = new
        else:
            self._told_unrecorded.discard(claim_key)
        for did, consumption in (record or {}).items():
            if did in self._recorded and any(r.device_id == did for r in new):
                self._charge(did, consumption)
        if old == new:
            self._check_recorded(record)
            return
        touched: set[DeviceID] = set()
        for r in old:
            self._forget_unrecorded(r.device_id, claim_key)
        for i, r in enumerate(old):
            did = r.device_id
            if r.share_id is None:
                if self._drop_whole(did, claim_key):
                    touched.add(did)
            else:
                shares = self._shares.get(did)
                if shares is not None and shares.pop((claim_key, i), None) is not None:
                    touched.add(did)
                    if not shares:
                        del self._shares[did]
        for i, r in enumerate(new):
            did = r.device_id
            recorded = record.get(did) if record is not None else None
            if recorded is not None and did not in self._recorded:
                self._charge(did, recorded)
            self._hold(did)
            if record is None and self._recorded.get(did) != ():  # () consumes no counter: nothing to record
                self._unrecorded.setdefault(did, set()).add(claim_key)
                self._tell_unrecorded(did)
            if r.share_id is None:
                if self._allocated.setdefault(did, claim_key) != claim_key:
                    self._also_allocated.setdefault(did, set()).add(claim_key)
            else:
                self._shares.setdefault(did, {})[(claim_key, i)] = _Share(claim_key, r.share_id, r.consumed_capacity)
            touched.add(did)
        for did in touched:
            self._settle(did)
        self._report_duplicates(claim_key, new)
        self._check_recorded(record)

    def _check_recorded(self, record: ClaimRecord | None) -> None:
        """Tell of each recorded device whose slice now says less than it was charged."""
        for did in record or {}:
            published = self._lookup(did) if did in self._recorded else None
            if published is not None:
                self._tell_lowered(did, published)

    def reserve(self, devices: Mapping[DeviceID, str], shares: InflightShares | None = None) -> Reservation:
        """Hold `devices` (device -> claim key) and `shares` ((device, share ID) -> (claim key, capacity))
        until the reservation is released."""
        for did, claim_key in devices.items():
            self._hold(did)
            self._inflight[did] = claim_key
            self._on_change(did)
        for (did, share_id), (claim_key, consumed) in (shares or {}).items():
            self._hold(did)
            self._inflight_shares.setdefault(did, {})[(claim_key, share_id)] = _Share(claim_key, share_id, consumed)
            self._settle(did)
        return Reservation(self, devices, shares or {})

    def reserve_results(self, allocations: Mapping[str, AllocationResult]) -> Reservation:
        """Hold what an allocation decision takes: whole devices and shares (admin access takes nothing)."""
        devices: dict[DeviceID, str] = {}
        shares: dict[tuple[DeviceID, str], ShareHold] = {}
        for claim_key, alloc in allocations.items():
            for r in alloc.results:
                if r.admin_access:
                    continue
                if r.share_id is not None:
                    shares[(r.device_id, r.share_id)] = (claim_key, r.consumed_capacity)
                else:
                    devices[r.device_id] = claim_key
        return self.reserve(devices, shares)

    def _release(self, devices: Mapping[DeviceID, str], shares: InflightShares) -> None:
        for did, claim_key in devices.items():
            if self._inflight.get(did) == claim_key:
                del self._inflight[did]
                self._settle(did)
        for (did, share_id), (claim_key, _consumed) in shares.items():
            held = self._inflight_shares.get(did)
            if held is not None and held.pop((claim_key, share_id), None) is not None:
                if not held:
                    del self._inflight_shares[did]
                self._settle(did)

    def learn(self, did: DeviceID, consumes: tuple[CounterConsumption, ...]) -> None:
        """A device was published (every version of its slice): if it is held, its record becomes the larger,
        per counter, of the record and what it consumes now (what it consumes now if never seen), so a
        republish that raises it and then lowers it frees nothing while it is held."""
        if did not in self._recorded:
            return
        recorded = self._recorded[did]
        if recorded is None:
            self._record(did, consumes)
        elif consumes is not recorded and consumes != recorded:
            larger = larger_consumption(recorded, consumes)
            if larger is not recorded:
                self._record(did, larger)
            self._tell_lowered(did, consumes)

    # ------------------------------------------------------------------ bookkeeping

    def _hold(self, did: DeviceID) -> None:
        """Record what `did` consumes of its pool's counters when it becomes held (kept until it is not)."""
        if did not in self._recorded:
            self._record(did, self._lookup(did))

    def _charge(self, did: DeviceID, claimed: tuple[CounterConsumption, ...]) -> None:
        """A claim's record of `did`: the device's record becomes the larger of both (with the slice's if never seen)."""
        held = did in self._recorded
        had = self._recorded.get(did)
        now = self._lookup(did) if had is None else None
        base = claimed if had is None else larger_consumption(had, claimed)
        if now is not None:
            base = larger_consumption(base, now)
        if base is not had:
            self._record(did, base)
            if held:
                self._on_change(did)  # a held device charged more: the verdicts that counted it go

    def _tell_lowered(self, did: DeviceID, now: tuple[CounterConsumption, ...]) -> None:
        recorded = self._recorded.get(did)
        if recorded is None or self._on_lowered is None or self._lowered.get(did) == now:
            return
        if exceeds(recorded, now):
            self._lowered[did] = now
            self._on_lowered(did, self.holder(did) or "", recorded, now)
        else:
            self._lowered.pop(did, None)

    def _tell_unrecorded(self, did: DeviceID) -> None:
        """Claims without a record holding `did`, which consumes counters (or may: never seen): told once each."""
        claims = self._unrecorded.get(did)
        if not claims or self._on_unrecorded is None or not self._recorded.get(did):
            return
        for key in sorted(claims - self._told_unrecorded):
            self._told_unrecorded.add(key)
            self._on_unrecorded(key, did)

    def _forget_unrecorded(self, did: DeviceID, claim_key: str) -> None:
        claims = self._unrecorded.get(did)
        if claims is not None:
            claims.discard(claim_key)
            if not claims:
                del self._unrecorded[did]

    def _record(self, did: DeviceID, recorded: Recorded) -> None:
        self._recorded[did] = recorded
        key = (did.driver, did.pool)
        unknown = self._unknown.get(key)
        if recorded is None:
            self._unknown.setdefault(key, set()).add(did)
        elif unknown is not None:
            unknown.discard(did)
            if not unknown:
                del self._unknown[key]
        if recorded is None or recorded:
            self._pools.setdefault(key, {})[did] = recorded
        else:
            self._forget_in_pool(did)
        if recorded and did in self._unrecorded:
            self._tell_unrecorded(did)

    def _forget_in_pool(self, did: DeviceID) -> None:
        key = (did.driver, did.pool)
        held = self._pools.get(key)
        if held is not None and did in held:
            del held[did]
            if not held:
                del self._pools[key]
        unknown = self._unknown.get(key)
        if unknown is not None:
            unknown.discard(did)
            if not unknown:
                del self._unknown[key]

    def _drop_whole(self, did: DeviceID, claim_key: str) -> bool:
        """`claim_key` no longer holds `did` whole; another claim that also holds it keeps it held."""
        also = self._also_allocated.get(did)
        if also is not None and claim_key in also:
            also.discard(claim_key)
        elif self._allocated.get(did) == claim_key:
            if also:
                self._allocated[did] = min(also)
                also.discard(self._allocated[did])
            else:
                del self._allocated[did]
        else:
            return False
        if also is not None and not also:
            del self._also_allocated[did]
        return True

    def _holds(self, did: DeviceID) -> bool:
        return did in self._allocated or did in self._inflight or did in self._shares or did in self._inflight_shares

    def _settle(self, did: DeviceID) -> None:
        """After a change to `did`'s holders: sum its shares' capacity, forget its record if nothing holds it, tell."""
        self._recount(did)
        if not self._holds(did) and did in self._recorded:
            del self._recorded[did]
            self._lowered.pop(did, None)
            self._forget_in_pool(did)
        self._on_change(did)

    def _recount(self, did: DeviceID) -> None:
        allocated = self._shares.get(did, {})
        landed = {(s.claim_key, s.share_id) for s in allocated.values()}
        # An in-flight share whose claim status has it already counts once (it has landed).
        shares = [*allocated.values(), *(s for k, s in self._inflight_shares.get(did, {}).items() if k not in landed)]
        total: dict[str, Fraction] = {}
        for share in shares:
            for name, q in (share.consumed or {}).items():
                total[name] = total.get(name, Fraction(0)) + max(q.value, Fraction(0))  # a negative amount never makes room
        if total:
            self._capacity[did] = {name: Quantity(v, format_quantity(v)) for name, v in total.items()}
        else:
            self._capacity.pop(did, None)  # as upstream: shares without capacity record none

    def _report_duplicates(self, claim_key: str, results: tuple[DeviceRequestAllocationResult, ...]) -> None:
        if self._on_duplicate is None:
            return
        for did, share_id in {(r.device_id, r.share_id) for r in results if r.share_id is not None}:
            users = [s.claim_key for s in self._shares.get(did, {}).values() if s.share_id == share_id]
            if len(users) > 1:
                claims = tuple(sorted(set(users)))
                for key in claims:
                    self._on_duplicate(key, share_id, did, claims)
