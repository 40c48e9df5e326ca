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
    def __init__(self, on_change: Callable[[DeviceID], None] = lambda _did: None) -> None:
        self.allocated: dict[DeviceID, str] = {}  # device -> claim key, from claim statuses
        self.inflight: dict[DeviceID, str] = {}  # device -> claim key, chosen at /bind, not in the view yet
        self._on_change = on_change

    def is_taken(self, did: DeviceID) -> bool:
        return did in self.allocated or did in self.inflight

    def holder(self, did: DeviceID) -> str | None:
        return self.allocated.get(did) or self.inflight.get(did)

    def allocate(self, did: DeviceID, claim_key: str) -> None:
        if self.allocated.get(did) != claim_key:
            self.allocated[did] = claim_key
            self._on_change(did)

    def free(self, did: DeviceID, claim_key: str) -> None:
        """Forget `claim_key`'s allocation of `did` (another claim's is left alone)."""
        if self.allocated.get(did) == claim_key:
            del self.allocated[did]
            self._on_change(did)

    def reserve(self, devices: Mapping[DeviceID, str]) -> Reservation:
        """Hold `devices` (device -> claim key) until the reservation is released."""
        for did, claim_key in devices.items():
            self.inflight[did] = claim_key
            self._on_change(did)
        return Reservation(self, devices)

    def _release(self, devices: Mapping[DeviceID, str]) -> None:
        for did, claim_key in devices.items():
            if self.inflight.get(did) == claim_key:
                del self.inflight[did]
                self._on_change(did)
