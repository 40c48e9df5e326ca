"""May this process write now? One answer for every writer (docs/design.md#leadership).

Three things decide it: `--read-only` (never), a Lease (while it is held:
tracker/apiserver/leadership.py, our own election or the followed
kube-scheduler Lease) and its absence (`--standalone`, `--source`, a
scheduler that does not elect: always). The command builds one
`LeadershipGate` from them and hands it to every writer, so no writer
combines them again and none can forget one.

A writer asks `may_write()` right before each write (the `MayWrite`
protocol). A /bind also needs to wait out the hand-over of a fresh Lease
within its deadline (`MayWriteBy.may_write_by`): that wait lives here, once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from tracker.clock import Clock, MonotonicClock

log = logging.getLogger("dra_extender.leadership")

# Seconds of a bind's deadline left for the bind itself after waiting out a hand-over.
LEADERSHIP_RESERVE = 1.0


class MayWrite(Protocol):
    """What a writer needs: whether this process may write now (asked right before each write)."""

    def may_write(self) -> bool: ...


class MayWriteBy(MayWrite, Protocol):
    """What /bind needs besides: whether this process may write by a deadline, having waited for it if it will."""

    async def may_write_by(self, deadline: float) -> bool: ...


class Lease(Protocol):
    """What the gate asks of a Lease (tracker/apiserver/leadership.py's Leadership; kubesim/lease.py's FakeLease in tests)."""

    def is_leader(self) -> bool:
        """Held now (and past any hand-over wait)."""
        ...

    def leading_in(self) -> float | None:
        """Seconds until a fresh Lease's hand-over wait ends, while in it; else None."""
        ...

    async def poll_if_missing(self) -> None:
        """Read the Lease now if the last read found no live holder (rate-limited by the Lease)."""
        ...


class LeadershipGate:
    """The one leadership answer: `--read-only` never writes; a Lease writes while held; no Lease always writes."""

    __slots__ = ("clock", "lease", "read_only")

    def __init__(self, lease: Lease | None, *, read_only: bool = False, clock: Clock | None = None) -> None:
        self.lease = lease
        self.read_only = read_only
        # Deadlines given to may_write_by are on this clock: time.monotonic() unless a test's fake clock.
        self.clock: Clock = clock or MonotonicClock()

    @classmethod
    def always(cls) -> LeadershipGate:
        """The only writer there is (`--standalone`, `--source`, tools and tests)."""
        return cls(None)

    @classmethod
    def never(cls) -> LeadershipGate:
        """A process that never writes (`--read-only`)."""
        return cls(None, read_only=True)

    def may_write(self) -> bool:
        if self.read_only:
            return False
        return self.lease is None or self.lease.is_leader()

    async def may_write_by(self, deadline: float) -> bool:
        """Whether this process may write in time for a bind due by `deadline` (on `clock`), having waited if it will.

        A scheduler that creates its Lease leads at once, while its sidecar
        learns of it at its next read and then waits a little more for any
        earlier holder's sidecar to stop (tracker/apiserver/leadership.py).
        Without this wait the first binds of a fresh start fail as "not
        leader", each a FailedScheduling and a retry with backoff. So when
        the last read found no Lease, read it now; if a fresh Lease's wait
        ends in time (leaving LEADERSHIP_RESERVE for the bind), wait for it,
        then ask again (a read meanwhile may have seen the Lease move on).
        A hand-over from another holder is not waited for.
        """
        if self.may_write():
            return True
        lease = self.lease
        if lease is None or self.read_only:
            return False
        left = lease.leading_in()
        if left is None:
            budget = deadline - LEADERSHIP_RESERVE - self.clock.now()
            if budget <= 0:
                return False
            try:
                async with asyncio.timeout(budget):
                    await lease.poll_if_missing()
            except Exception as e:  # a read that failed or took too long: not leading
                log.info("reading the followed Lease for a bind failed", extra={"err": str(e) or type(e).__name__})
                return False
            if self.may_write():
                return True
            left = lease.leading_in()
        if left is None or self.clock.now() + left > deadline - LEADERSHIP_RESERVE:
            return False
        await self.clock.wait(asyncio.Event(), self.clock.now() + left)
        return self.may_write()
