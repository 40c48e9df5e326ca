"""Time for the eviction controller, injectable so tests run on a fake clock.

Every deadline the controller keeps (tolerationSeconds, rate-limit tokens,
status throttling, 429 backoff) is read from a `Clock` and waited for with
`Clock.wait`, so a test can jump straight to the next deadline instead of
sleeping through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

from tracker.timestamps import parse_rfc3339, rfc3339


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
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
        timeout = None if deadline is None else max(0.0, deadline - time.time())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)


class FakeClock:
    """A clock that moves only when told: `advance_to` releases the waiters whose deadline passed."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = start
        self._waiters: list[tuple[float | None, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def next_deadline(self) -> float | None:
        """The earliest deadline anyone waits for (None when nobody waits with one)."""
        deadlines = [d for d, f in self._waiters if d is not None and not f.done()]
        return min(deadlines) if deadlines else None

    def advance_to(self, t: float) -> None:
        self._now = max(self._now, t)
        for deadline, fut in self._waiters:
            if deadline is not None and deadline <= self._now and not fut.done():
                fut.set_result(None)

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)

    async def wait(self, wake: asyncio.Event, deadline: float | None) -> None:
        if wake.is_set() or (deadline is not None and deadline <= self._now):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (deadline, fut)
        self._waiters.append(entry)
        woken = asyncio.ensure_future(wake.wait())
        try:
            either: list[asyncio.Future[Any]] = [fut, woken]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            self._waiters.remove(entry)


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
