"""The scheduler's verbs come first: optional background work waits for a quiet moment between them.

The CEL warm-up (tracker/views/warmup.py) only fills a cache that /filter
would otherwise fill itself, for the devices it looks at. Run in slices
between verbs regardless of them, it made every verb that arrived during a
slice wait for its end, and took the CPU the scheduler and the API server
needed while pods were being scheduled: on 500 nodes x 8 GPUs x 7
partitions, with the load generator on the same two cores, /filter's p99
over 200 pods was 11.9 ms with the warm-up running beside the first pods and
7.0-7.6 ms without it (docs/performance.md#background-work-waits-for-quiet).

So such work asks `quiet()` before each slice: it goes on once no verb is
in flight and none has ended for QUIET_GAP_SECONDS, and in any case after
MAX_DEFER_SECONDS, so that it never stalls for good under a scheduler that
never pauses (one slice per MAX_DEFER_SECONDS then). Work that decides
allocation (a device view recomputed after a rule or class change) never
waits here.

The verbs are counted on the HTTP thread and read on the main loop: the
counter changes under a lock; a stale read only moves a slice by a poll.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

QUIET_GAP_SECONDS = 0.005  # no verb for this long: the scheduler is busy with its own work, or idle
MAX_DEFER_SECONDS = 1.0  # background work waits at most this long for a quiet moment before a slice
POLL_SECONDS = 0.005  # how often a waiting slice looks again (and whether it was interrupted)


class Foreground:
    """How many verbs are in flight and when the last one ended; when background work may run."""

    __slots__ = ("_clock", "_gap", "_in_flight", "_last_end", "_lock", "_max_defer")

    def __init__(
        self,
        *,
        gap: float = QUIET_GAP_SECONDS,
        max_defer: float = MAX_DEFER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gap = gap
        self._max_defer = max_defer
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._last_end = -math.inf  # no verb yet: quiet

    def begin(self) -> None:
        """A verb arrived (any thread)."""
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        """A verb was answered, or given up (any thread); every begin() has one end()."""
        with self._lock:
            self._in_flight -= 1
            self._last_end = self._clock()

    def delay(self, now: float) -> float:
        """Seconds background work should still wait at `now`; 0 when it may run."""
        if self._in_flight > 0:
            return self._gap
        return max(0.0, self._last_end + self._gap - now)

    async def quiet(self, interrupted: Callable[[], bool] = lambda: False) -> None:
        """Return once quiet, once `interrupted()` (work that must not wait arrived), or after the longest deferral."""
        clock = self._clock
        give_up = clock() + self._max_defer
        while (wait := self.delay(clock())) > 0 and not interrupted():
            left = give_up - clock()
            if left <= 0:
                return
            await asyncio.sleep(min(wait, left, POLL_SECONDS))
