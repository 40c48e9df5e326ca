"""Which devices are taken: allocated to claims, or in flight while a /bind writes.

The one place that changes `allocated` and `inflight` (upstream's
allocateddevices.go and its in-flight claims play the same part), so every
change can be reported to whoever caches answers that depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

from allocator.types import DeviceID


class Reservation:
    """Devices held in flight for one /bind decision; `release()` is idempotent."""

    __slots__ = ("_ledger", "devices")

    def __init__(self, ledger: AllocationLedger, devices: Mapping[DeviceID, str]) -> None:
        self._ledger = ledger
        self.devices = dict(devices)

    def release(self) -> None:
        self._ledger._release(self.devices)
        self.devices = {}

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release()


class AllocationLedger:
    """`allocated` and `inflight` are read-only views: only the methods below change them."""

    def __init__(self, on_change: Callable[[DeviceID], None] = lambda _did: None) -> None:
        self._allocated: dict[DeviceID, str] = {}  # device -> claim key, from claim statuses
        self._inflight: dict[DeviceID, str] = {}  # device -> claim key, chosen at /bind, not in the view yet
        self._on_change = on_change

    @property
    def allocated(self) -> Mapping[DeviceID, str]:
        return self._allocated

    @property
    def inflight(self) -> Mapping[DeviceID, str]:
        return self._inflight

    def is_taken(self, did: DeviceID) -> bool:
        return did in self._allocated or did in self._inflight

    def holder(self, did: DeviceID) -> str | None:
        return self._allocated.get(did) or self._inflight.get(did)

    def allocate(self, did: DeviceID, claim_key: str) -> None:
        if self._allocated.get(did) != claim_key:
            self._allocated[did] = claim_key
            self._on_change(did)

    def free(self, did: DeviceID, claim_key: str) -> None:
        """Forget `claim_key`'s allocation of `did` (another claim's is left alone)."""
        if self._allocated.get(did) == claim_key:
            del self._allocated[did]
            self._on_change(did)

    def reserve(self, devices: Mapping[DeviceID, str]) -> Reservation:
        """Hold `devices` (device -> claim key) until the reservation is released."""
        for did, claim_key in devices.items():
            self._inflight[did] = claim_key
            self._on_change(did)
        return Reservation(self, devices)

    def _release(self, devices: Mapping[DeviceID, str]) -> None:
        for did, claim_key in devices.items():
            if self._inflight.get(did) == claim_key:
                del self._inflight[did]
                self._on_change(did)
