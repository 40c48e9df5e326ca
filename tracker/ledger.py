"""Which devices are taken: allocated to claims, or in flight while a /bind writes.

The one place that changes `allocated` and `inflight` (upstream's
allocateddevices.go and its in-flight claims play the same part), so every
change can be reported to whoever caches answers that depend on it.

A device that allows multiple allocations (consumable capacity) is held in
*shares*: each result with a `shareID` is one, with the capacity it consumes.
The ledger answers the allocator's three questions (allocator.allocated_state):
held whole, held at all, and the capacity the shares consume together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from types import MappingProxyType, TracebackType

from allocator.quantity import Quantity, format_quantity
from allocator.types import AllocationResult, DeviceID


class _Share:
    __slots__ = ("claim_key", "consumed")

    def __init__(self, claim_key: str, consumed: Mapping[str, Quantity] | None) -> None:
        self.claim_key = claim_key
        self.consumed = consumed


class Reservation:
    """Devices and shares held in flight for one /bind decision; `release()` is idempotent."""

    __slots__ = ("_ledger", "devices", "shares")

    def __init__(
        self,
        ledger: AllocationLedger,
        devices: Mapping[DeviceID, str],
        shares: Mapping[tuple[DeviceID, str], tuple[str, Mapping[str, Quantity] | None]],
    ) -> None:
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


class AllocationLedger:
    """`allocated` and `inflight` are read-only views: only the methods below change them."""

    def __init__(self, on_change: Callable[[DeviceID], None] = lambda _did: None) -> None:
        self._allocated: dict[DeviceID, str] = {}  # device -> claim key, from claim statuses
        self._inflight: dict[DeviceID, str] = {}  # device -> claim key, chosen at /bind, not in the view yet
        # device -> share ID -> share, allocated and in flight alike (a share ID is unique)
        self._shares: dict[DeviceID, dict[str, _Share]] = {}
        self._inflight_shares: set[tuple[DeviceID, str]] = set()
        self._capacity: dict[DeviceID, dict[str, Quantity]] = {}  # summed consumed capacity per shared device
        self._on_change = on_change
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
        return did in self._allocated or did in self._inflight or did in self._shares

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return self._capacity.get(did)

    # ------------------------------------------------------------------ queries

    def holder(self, did: DeviceID) -> str | None:
        held = self._allocated.get(did) or self._inflight.get(did)
        if held is not None:
            return held
        shares = self._shares.get(did)
        return ", ".join(sorted({s.claim_key for s in shares.values()})) if shares else None

    def shares(self, did: DeviceID) -> Mapping[str, str]:
        """share ID -> claim key, for a device held in shares."""
        return {sid: s.claim_key for sid, s in self._shares.get(did, {}).items()}

    def shared_devices(self) -> Mapping[DeviceID, Mapping[str, Quantity]]:
        """Every device held in shares, with the capacity they consume (empty if none is recorded)."""
        return {did: self._capacity.get(did, {}) for did in self._shares}

    # ------------------------------------------------------------------ changes

    def allocate(self, did: DeviceID, claim_key: str) -> None:
        if self._allocated.get(did) != claim_key:
            self._allocated[did] = claim_key
            self._on_change(did)

    def free(self, did: DeviceID, claim_key: str) -> None:
        """Forget `claim_key`'s allocation of `did` (another claim's is left alone)."""
        if self._allocated.get(did) == claim_key:
            del self._allocated[did]
            self._on_change(did)

    def allocate_share(self, did: DeviceID, share_id: str, claim_key: str, consumed: Mapping[str, Quantity] | None) -> None:
        shares = self._shares.setdefault(did, {})
        old = shares.get(share_id)
        if old is not None and old.claim_key == claim_key and old.consumed == consumed:
            self._inflight_shares.discard((did, share_id))  # the in-flight share has landed
            return
        shares[share_id] = _Share(claim_key, consumed)
        self._inflight_shares.discard((did, share_id))
        self._recount(did)

    def free_share(self, did: DeviceID, share_id: str, claim_key: str) -> None:
        shares = self._shares.get(did)
        if shares is None or (did, share_id) in self._inflight_shares:
            return
        share = shares.get(share_id)
        if share is not None and share.claim_key == claim_key:
            del shares[share_id]
            self._recount(did)

    def reserve(
        self,
        devices: Mapping[DeviceID, str],
        shares: Mapping[tuple[DeviceID, str], tuple[str, Mapping[str, Quantity] | None]] | None = None,
    ) -> Reservation:
        """Hold `devices` (device -> claim key) and `shares` ((device, share ID) -> (claim key, capacity))
        until the reservation is released."""
        for did, claim_key in devices.items():
            self._inflight[did] = claim_key
            self._on_change(did)
        for (did, share_id), (claim_key, consumed) in (shares or {}).items():
            self._shares.setdefault(did, {})[share_id] = _Share(claim_key, consumed)
            self._inflight_shares.add((did, share_id))
            self._recount(did)
        return Reservation(self, devices, shares or {})

    def reserve_results(self, allocations: Mapping[str, AllocationResult]) -> Reservation:
        """Hold what an allocation decision takes: whole devices and shares (admin access takes nothing)."""
        devices: dict[DeviceID, str] = {}
        shares: dict[tuple[DeviceID, str], tuple[str, Mapping[str, Quantity] | None]] = {}
        for claim_key, alloc in allocations.items():
            for r in alloc.results:
                if r.admin_access:
                    continue
                if r.share_id is not None:
                    shares[(r.device_id, r.share_id)] = (claim_key, r.consumed_capacity)
                else:
                    devices[r.device_id] = claim_key
        return self.reserve(devices, shares)

    def _release(
        self,
        devices: Mapping[DeviceID, str],
        shares: Mapping[tuple[DeviceID, str], tuple[str, Mapping[str, Quantity] | None]],
    ) -> None:
        for did, claim_key in devices.items():
            if self._inflight.get(did) == claim_key:
                del self._inflight[did]
                self._on_change(did)
        for did, share_id in shares:
            if (did, share_id) not in self._inflight_shares:
                continue  # landed: the claim's allocation holds it now
            self._inflight_shares.discard((did, share_id))
            held = self._shares.get(did)
            if held is not None and held.pop(share_id, None) is not None:
                self._recount(did)

    def _recount(self, did: DeviceID) -> None:
        shares = self._shares.get(did)
        if not shares:
            self._shares.pop(did, None)
            self._capacity.pop(did, None)
        else:
            total: dict[str, Fraction] = {}
            for share in shares.values():
                for name, q in (share.consumed or {}).items():
                    total[name] = total.get(name, Fraction(0)) + q.value
            if total:
                self._capacity[did] = {name: Quantity(v, format_quantity(v)) for name, v in total.items()}
            else:
                self._capacity.pop(did, None)  # as upstream: shares without capacity record none
        self._on_change(did)
