"""The binds in progress, and /filter held back while there are too many: backpressure on kube-scheduler.

kube-scheduler runs one scheduling cycle at a time but binds in goroutines
without a limit. Each /bind here costs three API writes; /filter costs none.
When the machine cannot keep up (a loaded API server, CPU taken by another
process), /filter still answers at once, kube-scheduler keeps starting
binds, and the binds in progress pile up (hundreds, measured) until each
waits out its --bind-timeout: every one of them is then undone and its pod
retried, which costs more writes than it saves. Throughput falls to a few
pods per second for a minute and more.

So while `limit` binds are in progress, a /filter of a pod that has devices
to allocate first waits (at most --placement-wait, within its budget) for
that number to fall below the limit. kube-scheduler's cycle is serial, so
this slows it to the rate binds complete. Far below the limit (a bind takes
a few milliseconds to tens of them, so a few are in progress at a time) no
/filter waits.
"""

from __future__ import annotations

import asyncio
import time

DEFAULT_MAX_BINDS_IN_FLIGHT = 32


class BindBacklog:
    """Counts the binds in progress; `wait` returns once they are below the limit (or the time is up)."""

    def __init__(self, limit: int = DEFAULT_MAX_BINDS_IN_FLIGHT) -> None:
        if limit < 0:
            raise ValueError(f"max binds in flight {limit}: must be 0 (no limit) or more")
        self.limit = limit
        self.in_flight = 0
        self._below = asyncio.Event()
        self._below.set()

    def begin(self) -> None:
        self.in_flight += 1
        if self.limit and self.in_flight >= self.limit:
            self._below.clear()

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight < self.limit or not self.limit:
            self._below.set()

    async def wait(self, seconds: float) -> float:
        """Seconds waited for the binds in progress to fall below the limit (at most `seconds`; 0 when they are)."""
        if self._below.is_set() or seconds <= 0:
            return 0.0
        start = time.monotonic()
        try:
            async with asyncio.timeout(seconds):
                await self._below.wait()
        except TimeoutError:
            pass
        return time.monotonic() - start
