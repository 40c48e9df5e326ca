"""The NoExecute eviction controller: plan, rate-limit, evict, report on the rules.

One asyncio task, run on the leader only. Tracker events (slices, rules,
patches, classes, claims, pods) mark the plan dirty and wake the loop
(`intake.py`); it recomputes who must leave and when (`planner.py` over
`plan.py` and `volume_plan.py`), starts what is due within each taint's rate
limit (`dispatch.py`, `evictor.py`), stamps `timeAdded` on our CRD rules and
on volume taints (`stamping.py`) and writes the `EvictionInProgress`
condition of the rules it owns (`rule_reports.py`). Every deadline comes
from the injected clock.

The plan is derived from the cluster alone, so a restarted controller (or a
new leader) picks up exactly the pods that are still there: nothing is lost,
and a pod already marked (DisruptionTarget) or deleting is not marked again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from controllers.eviction.dispatch import Dispatcher
from controllers.eviction.events import Events
from controllers.eviction.evictor import Evictor, Remover
from controllers.eviction.intake import Intake
from controllers.eviction.plan import Ownership, PodEviction
from controllers.eviction.planner import Planner
from controllers.eviction.rate_limit import Backoff, TaintLimiters
from controllers.eviction.rule_reports import RuleReports
from controllers.eviction.rule_view import RuleView
from controllers.eviction.stamping import RuleStamps, VolumeStamps
from serving.metrics import Metrics
from tracker.clock import Clock, Deadlines, SystemClock
from tracker.leadership_gate import LeadershipGate, MayWrite
from tracker.source import EvictionSource
from tracker.state import ClusterState

log = logging.getLogger("dra_extender.eviction")


@dataclass(frozen=True, slots=True)
class Settings:
    mode: Literal["delete", "evict"] = "delete"
    ownership: Ownership = field(default_factory=Ownership)
    leader_poll: float = 1.0  # how often a follower checks whether it leads now
    debounce: float = 0.1  # real seconds to gather a burst of tracker events into one recompute (bounds its CPU)
    retry_initial: float = 1.0  # backoff after a refused (429) or failed eviction
    retry_max: float = 60.0


class EvictionController:
    def __init__(
        self,
        state: ClusterState,
        source: EvictionSource,
        settings: Settings = Settings(),
        *,
        leadership: MayWrite | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.leadership: MayWrite = leadership or LeadershipGate.always()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self._leading = False  # as of the last pass: a new term resets the rate limits (rate_limit.py)
        self.idle = False  # waiting for the clock or a tracker event (tests step the fake clock then)
        self.deadlines = Deadlines(self.clock, settings.retry_initial)
        self.events = events = Events(source, self.leadership)
        self.intake = Intake(state, own_write=self._own_write, on_rule=events.unknown_effect, on_rule_gone=self._rule_gone)
        self.rule_stamps = RuleStamps(self.intake, source, self.deadlines)
        self.volume_stamps = VolumeStamps(state, source, self.deadlines)
        self.reports = RuleReports(self.intake, source, settings.ownership, events, self.deadlines, self.rule_stamps.taint_time)
        limiters = TaintLimiters()
        evictor = Evictor(
            Remover(source, settings.mode, self.clock, self.intake.pods, events, self.leadership),
            limiters,
            Backoff(settings.retry_initial, settings.retry_max),
            self.reports,
            self.metrics,
            self.deadlines,
        )
        self.planner = Planner(
            self.intake, settings.ownership, (self.rule_stamps, self.volume_stamps), events, evictor, self.metrics, self.clock
        )
        self.dispatcher = Dispatcher(self.intake, self.planner, limiters, self.deadlines)

    def _own_write(self, uid: str) -> bool:
        """A pod this controller is evicting or has evicted: its event is our own write coming back."""
        return uid in self.dispatcher.inflight or uid in self.planner.evictor.done

    def _rule_gone(self, rule: RuleView) -> None:
        """What is kept per rule goes with the rule: rules come and go all the time (the health controller)."""
        self.rule_stamps.forget(rule.ident)
        self.reports.forget(rule)
        self.events.forget(rule)
        self.metrics.eviction_rule_gone(rule.source)

    @property
    def state(self) -> ClusterState:
        return self.intake.state

    @property
    def plan(self) -> dict[str, PodEviction]:
        return self.planner.plan

    @property
    def dirty(self) -> bool:
        """The cluster changed since the plan was computed."""
        return self.intake.dirty

    @property
    def in_flight(self) -> int:
        """Evictions under way."""
        return len(self.dispatcher.inflight)

    @property
    def woken(self) -> bool:
        """A tracker event arrived that the loop has not taken up yet."""
        return self.intake.wake.is_set()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        log.info(
            "eviction controller started",
            extra={"mode": self.settings.mode, "evict_upstream": self.settings.ownership.evict_upstream},
        )
        try:
            await self._loop()
        finally:
            self.dispatcher.cancel()

    async def _loop(self) -> None:
        while True:
            if not self.state.ready:
                # Acting on a partial view would cancel and re-plan for nothing. Readiness comes
                # with no tracker event of its own (an empty last list), so poll it in real time.
                await asyncio.sleep(0.05)
                continue
            self.intake.wake.clear()
            self.deadlines.times.clear()
            if self.leadership.may_write():
                if not self._leading:
                    self._leading = True
                    self.dispatcher.limiters.began_leading(self.clock.now())
                await self.step()
                # Leadership is polled: a leader that loses it must notice without a tracker event.
                deadline = min(self.deadlines.times, default=self.clock.now() + self.settings.leader_poll)
                deadline = min(deadline, self.clock.now() + self.settings.leader_poll)
            else:
                self._leading = False
                self.planner.drop()
                self.intake.dirty = True
                deadline = self.clock.now() + self.settings.leader_poll
            if deadline <= self.clock.now():
                await asyncio.sleep(0)  # due again at once: still let the tracker and the HTTP servers run
            self.idle = True
            try:
                await self.clock.wait(self.intake.wake, deadline)
            finally:
                self.idle = False

    async def step(self) -> None:
        """One pass: stamp rules, recompute if anything changed, evict what is due, write rule status."""
        if await self.rule_stamps.stamp():
            self.intake.dirty = True  # the taint's time may have moved
        await self.volume_stamps.stamp()
        if self.intake.dirty:
            await asyncio.sleep(self.settings.debounce)
            self.intake.dirty = False
            self.planner.recompute()
        self.dispatcher.start_due()
        if not self.dispatcher.inflight:
            # Counts settle when the evictions under way end (each wakes the loop): writing
            # now would report them pending, and the throttle would keep that for 10 s.
            await self.reports.write(self.planner.pending())
        needed = {r.id for p in self.plan.values() for r in p.reasons}
        self.dispatcher.limiters.drop_idle(needed, self.clock.now())
