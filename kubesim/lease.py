"""A Lease the test holds, drops or hands over: what tracker/leadership_gate.py's LeadershipGate asks of one.

The real Lease (tracker/apiserver/leadership.py) is tested against the fake
API server; the writers' tests switch leadership by hand with this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class FakeLease:
    """Held while `held`, and then only from `active_from` (a fresh Lease's hand-over wait) on the `now` clock."""

    def __init__(self, held: bool = True, *, now: Callable[[], float] = time.monotonic) -> None:
        self.held = held
        self.now = now
        self.active_from: float | None = None
        # What a read asked for by a bind finds: (held, seconds of the fresh Lease's wait from then); None: nothing new.
        self.on_read: tuple[bool, float] | None = None
        self.read_error: Exception | None = None  # a read asked for by a bind fails with this
        self.reads = 0

    def is_leader(self) -> bool:
        return self.held and (self.active_from is None or self.now() >= self.active_from)

    def leading_in(self) -> float | None:
        if not self.held or self.active_from is None:
            return None
        left = self.active_from - self.now()
        return left if left > 0 else None

    async def poll_if_missing(self) -> None:
        self.reads += 1
        if self.read_error is not None:
            raise self.read_error
        if self.on_read is not None:
            self.held, wait = self.on_read
            self.active_from = self.now() + wait
