"""Which planned evictions start now: due, past their retry backoff, and within their taints' rate limits.

Evictions run as tasks, as many at once as the buckets have tokens, so the
API's latency does not cap the rate. Each wakes the loop when it ends: its
outcome (done, a retry deadline) is for the loop to take up.
"""

from __future__ import annotations

import asyncio
import logging
import math

from controllers.eviction.intake import Intake
from controllers.eviction.plan import PodEviction
from controllers.eviction.planner import Planner
from controllers.eviction.rate_limit import TaintLimiters
from tracker.clock import Deadlines

log = logging.getLogger("dra_extender.eviction")


class Dispatcher:
    def __init__(self, intake: Intake, planner: Planner, limiters: TaintLimiters, deadlines: Deadlines) -> None:
        self.intake = intake
        self.planner = planner
        self.evictor = planner.evictor
        self.limiters = limiters
        self.deadlines = deadlines
        self.inflight: dict[str, asyncio.Task[None]] = {}  # pod UID -> its eviction under way

    def start_due(self) -> None:
        """Start the planned evictions that are due, earliest first."""
        now = self.deadlines.clock.now()
        for p in sorted(self.planner.plan.values(), key=lambda p: (p.due, p.key)):
            if self.intake.dirty:
                self.deadlines.add(now)  # the cluster changed meanwhile: recompute first
                return
            if p.uid in self.evictor.done or p.uid in self.inflight:
                continue
            if p.due > now:
                self.deadlines.add(p.due)
                break  # sorted: the rest are later
            not_before = self.evictor.backoff.not_before(p.uid)
            if not_before > now:
                self.deadlines.add(not_before)
                continue
            charged, when = self.limiters.acquire(_taints(p), now)
            if charged is None:
                self.deadlines.add(when)
                continue
            self.inflight[p.uid] = asyncio.create_task(self._evict_and_wake(p, charged), name=f"evict-{p.key}")

    async def _evict_and_wake(self, p: PodEviction, charged: str) -> None:
        try:
            if await self.evictor.evict(p, charged):
                self.planner.count_pending()
        except Exception:
            log.exception("eviction failed unexpectedly", extra=p.describe())
        finally:
            self.inflight.pop(p.uid, None)
            self.intake.wake.set()

    def cancel(self) -> None:
        for task in list(self.inflight.values()):
            task.cancel()


def _taints(p: PodEviction) -> list[tuple[str, float, float]]:
    """(id, rate, earliest timeAdded) per taint that evicts `p` (one rule may reach it through several devices)."""
    added: dict[tuple[str, float], float] = {}
    for r in p.reasons:
        added[(r.id, r.rate)] = min(added.get((r.id, r.rate), math.inf), r.time_added)
    return [(i, rate, t) for (i, rate), t in added.items()]
