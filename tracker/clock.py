"""Time for the controllers and the leadership gate, injectable so tests run on a fake clock (kubesim/clock.py).

Every deadline the controller keeps (tolerationSeconds, rate-limit tokens,
status throttling, 429 backoff) is read from a `Clock` and waited for with
`Clock.wait`, so a test can jump straight to the next deadline instead of
sleeping through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

from tracker.timestamps import parse_rfc3339, rfc3339


class Clock(Protocol):
    def now(self) -> float:
        """Seconds: since the epoch (SystemClock), or on the monotonic clock (MonotonicClock)."""
        ...

    async def wait(self, wake: asyncio.Event, deadline: float | None) -> None:
        """Return when `wake` is set or the clock reaches `deadline` (None: only `wake`)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def wait(self, wake: asyncio.Event, deadline: float | None) -> None:
        if wake.is_set():
            return
        timeout = None if deadline is None else max(0.0, deadline - self.now())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation
                await wake.wait()


class MonotonicClock(SystemClock):
    """time.monotonic(): for deadlines kept within the process (a bind's), which a step of the wall clock must not move."""

    def now(self) -> float:
        return time.monotonic()


def format_time(t: float) -> str:
    """RFC 3339 with second resolution, as the API server stores metav1.Time."""
    return rfc3339(int(t))


def parse_time(value: str) -> float | None:
    """RFC 3339 (with or without fractional seconds) to epoch seconds; None if unparseable."""
    parsed = parse_rfc3339(value)
    return parsed.timestamp() if parsed is not None else None


class Deadlines:
    """The times one pass of the controller must wake again at, as each part of it finds them."""

    def __init__(self, clock: Clock, retry_initial: float) -> None:
        self.clock = clock
        self.retry_initial = retry_initial  # a failed write is tried again this much later
        self.times: list[float] = []

    def add(self, t: float) -> None:
        self.times.append(t)

    def retry(self, now: float | None = None) -> None:
        """A write failed: try again `retry_initial` after `now` (default: the clock's now)."""
        self.add((self.clock.now() if now is None else now) + self.retry_initial)
