"""A clock that moves only when the test moves it, for every deadline the extender keeps.

It satisfies the eviction controller's `Clock` protocol (`tracker/clock.py`: `now`
and `wait`), and `now` alone is the `Callable[[], float]` the binder's binding timeout reads,
so races around a deadline are driven by the test, never by sleeping through it.
"""

from __future__ import annotations

import asyncio
from typing import Any

JAN_1_2026 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class FakeClock:
    """Seconds since the epoch, moved only by `advance`/`advance_to`, which release the waiters whose deadline passed."""

    def __init__(self, start: float = JAN_1_2026) -> None:
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
