"""What other claims already hold, as the allocator asks it (upstream's AllocatedState).

Three questions, because consumable capacity lets several claims share one
device: is a device held whole (dedicated), is it held at all (whole or a
share: its counters are spent), and how much of its capacity do the shares
use. Allocations in flight (a /bind writing them) count as held.

A fourth, `counters_held`, answers what the held devices of a pool consume
of its counters as recorded when they were allocated, so a driver that
republishes its pool without an allocated device (or with another
consumesCounters for it) cannot make its counters look free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from allocator.quantity import Quantity
from allocator.types import CounterConsumption, DeviceID

# What a held device consumes of its pool's counters, recorded when it was allocated; None: never seen.
Recorded = tuple[CounterConsumption, ...] | None


@runtime_checkable
class AllocatedState(Protocol):
    def is_taken(self, did: DeviceID) -> bool:
        """Held whole by another claim: a result without a shareID."""

    def is_allocated(self, did: DeviceID) -> bool:
        """Held whole or shared (upstream `IsDeviceAllocated`): its counters are in use."""

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        """The capacity all shares of `did` consume together; None when no share records any."""

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, Recorded]:
        """The pool's held devices that consume counters, or whose consumption is unknown (None)."""


class DedicatedOnly:
    """An AllocatedState from a plain "is this device taken" test (no shares)."""

    __slots__ = ("_taken",)

    def __init__(self, taken: Callable[[DeviceID], bool]) -> None:
        self._taken = taken

    def is_taken(self, did: DeviceID) -> bool:
        return self._taken(did)

    def is_allocated(self, did: DeviceID) -> bool:
        return self._taken(did)

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return None

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, Recorded]:
        return {}  # nothing recorded: the current slices say what allocated devices consume, as upstream


class SharesFolded:
    """With DRAConsumableCapacity off upstream folds shared results into dedicated ones."""

    __slots__ = ("_state",)

    def __init__(self, state: AllocatedState) -> None:
        self._state = state

    def is_taken(self, did: DeviceID) -> bool:
        return self._state.is_allocated(did)

    def is_allocated(self, did: DeviceID) -> bool:
        return self._state.is_allocated(did)

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return None

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, Recorded]:
        return self._state.counters_held(driver, pool)


class AlsoHeld:
    """Another state with some more devices held whole: those of pods expected on a node but not bound yet.

    /prioritize scores a pod on a node where earlier pods are aimed as if
    their devices were taken (extender/prioritize/scores.py). Held whole,
    their counters are spent (the current slice says how much), as for any
    allocated device.
    """

    __slots__ = ("_held", "_state")

    def __init__(self, state: AllocatedState, held: frozenset[DeviceID]) -> None:
        self._state = state
        self._held = held

    def is_taken(self, did: DeviceID) -> bool:
        return did in self._held or self._state.is_taken(did)

    def is_allocated(self, did: DeviceID) -> bool:
        return did in self._held or self._state.is_allocated(did)

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return self._state.consumed_capacity(did)

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, Recorded]:
        return self._state.counters_held(driver, pool)
