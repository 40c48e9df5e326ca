"""The plan the controller works through: recomputed from the cluster when it changed, compared with the last one.

A pod that left the plan before its time gets the Event "Cancelling
deletion"; one that joined it is logged with its delay. What the last plan
pruned (done, marked, retries) is forgotten once its pod is gone.
"""

from __future__ import annotations

import logging

from controllers.eviction.events import Events
from controllers.eviction.evictor import Evictor
from controllers.eviction.intake import Intake
from controllers.eviction.plan import Ownership, PodEviction, plan_evictions
from controllers.eviction.stamping import RuleStamps, VolumeStamps
from controllers.eviction.volume_plan import ineffective_no_attach, merge, plan_volume_evictions
from serving.metrics import Metrics
from tracker.clock import Clock

log = logging.getLogger("dra_extender.eviction")


class Planner:
    def __init__(
        self,
        intake: Intake,
        ownership: Ownership,
        stamps: tuple[RuleStamps, VolumeStamps],
        events: Events,
        evictor: Evictor,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self.intake = intake
        self.ownership = ownership
        self.stamps = stamps
        self.events = events
        self.evictor = evictor
        self.metrics = metrics
        self.clock = clock
        self.plan: dict[str, PodEviction] = {}

    def pending(self) -> list[PodEviction]:
        """The planned pods not evicted yet."""
        return [p for p in self.plan.values() if p.uid not in self.evictor.done]

    def count_pending(self) -> None:
        """The pending gauges: how many, and when the earliest fell due (a due of 0.0 fell due at its taint's timeAdded)."""
        pending = self.pending()
        self.metrics.evictions_pending.set(len(pending))
        self.metrics.eviction_oldest_due.set(min((p.due or p.taint_time for p in pending), default=0.0))

    def recompute(self) -> None:
        state, (rules, volumes) = self.intake.state, self.stamps
        new = merge(
            plan_evictions(state, self.ownership, rules.taint_time),
            plan_volume_evictions(state, self.intake.pods, volumes.taint_time),
        )
        rules.forget_gone_taints()
        self.events.not_effective(ineffective_no_attach(state, self.intake.pods))
        done = self.evictor.done
        for key, old in self.plan.items():
            if key in new or old.uid in done:
                continue
            pod = state.pods.get(key)
            if pod is None or pod.meta.uid != old.uid or pod.meta.deletion_timestamp:
                continue  # gone: nothing to cancel
            log.info("cancelling eviction: the taint, rule or reservation went away", extra=old.describe())
            self.events.pod(old, "Cancelling deletion")
        for key, p in new.items():
            if key not in self.plan and p.uid not in done:
                delay = max(0.0, p.due - self.clock.now())
                log.info("pod will be evicted", extra={**p.describe(), "in_s": round(delay, 3)})
        self.plan = new
        self.evictor.keep({p.uid for p in new.values()}, {pod.meta.uid for pod in state.pods.values()})
        self.count_pending()

    def drop(self) -> None:
        """Not leading: pending evictions are the leader's."""
        if self.plan:
            log.info("not leading: pending evictions are left to the leader", extra={"pending": len(self.plan)})
        self.plan = {}
        self.metrics.evictions_pending.set(0)
        self.metrics.eviction_oldest_due.set(0)
