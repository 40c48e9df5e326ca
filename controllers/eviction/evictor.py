"""One eviction: mark the pod, delete or evict it, and account for the outcome.

In `delete` mode (upstream's way) the pod gets an Event and the
`DisruptionTarget` condition, then is deleted with a UID precondition; in
`evict` mode it gets the Event once and goes through the Eviction API, which
a PodDisruptionBudget may refuse (429): the pod is tried again after a
backoff and the refused attempt does not count against the rate limit. A
pod already marked by an earlier controller (before a restart) is not
announced twice. Leadership is asked again before each write of an eviction
under way, so a controller that lost its Lease mid-way leaves the pod to the
new leader instead of deleting it beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

from controllers.eviction.events import Events
from controllers.eviction.plan import PodEviction, TaintKind
from controllers.eviction.rate_limit import Backoff, TaintLimiters
from controllers.eviction.rule_reports import RuleReports
from serving.metrics import Metrics
from tracker.clock import Clock, Deadlines, format_time
from tracker.leadership_gate import MayWrite
from tracker.pod_status import PodStatus
from tracker.source import NotFound, PodEvictionWriter, SourceError

log = logging.getLogger("dra_extender.eviction")

DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByDeviceTaintManager",
    "message": "Device Taint manager: deleting due to NoExecute taint",
}
VOLUME_DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByVolumeTaintManager",
    "message": "Volume Taint manager: deleting due to NoUse taint",
}
_OUR_REASONS = frozenset({DISRUPTION_TARGET["reason"], VOLUME_DISRUPTION_TARGET["reason"]})


class LeadershipLost(Exception):
    """Leadership ended while an eviction was under way: its remaining writes are the new leader's to make."""


class Remover:
    """The API writes that remove one pod."""

    def __init__(
        self,
        source: PodEvictionWriter,
        mode: Literal["delete", "evict"],
        clock: Clock,
        pods: Mapping[str, PodStatus],
        events: Events,
        leadership: MayWrite,
    ) -> None:
        self.source = source
        self.leadership = leadership
        self.mode = mode
        self.clock = clock
        self.pods = pods  # the intake's views
        self.events = events
        self.marked: set[str] = set()  # pod UIDs that got our Event (evict mode: once, however often refused)

    def _already_marked(self, p: PodEviction) -> bool:
        """A previous controller (before a restart) already set the condition: don't announce twice."""
        view = self.pods.get(p.key)
        condition = view.condition("DisruptionTarget", _OUR_REASONS) if view is not None else None
        return condition is not None and condition.status == "True"

    def _still_leading(self) -> None:
        if not self.leadership.may_write():
            raise LeadershipLost

    async def remove(self, p: PodEviction) -> None:
        """Raises what the source raises (NotFound, SourceError), and LeadershipLost before any write past its term."""
        self._still_leading()
        if self.mode == "delete":
            if not self._already_marked(p):
                await self.events.pod_now(p, "Marking for deletion")  # before the delete, as its reason
                target = VOLUME_DISRUPTION_TARGET if p.volume else DISRUPTION_TARGET
                condition = {**target, "lastTransitionTime": format_time(self.clock.now())}
                self._still_leading()
                await self.source.update_pod_status_condition(p.namespace, p.name, condition)
            self._still_leading()
            await self.source.delete_pod(p.namespace, p.name, p.uid)
        else:
            if p.uid not in self.marked and not self._already_marked(p):
                self.marked.add(p.uid)
                await self.events.pod_now(p, "Marking for eviction")
            self._still_leading()
            await self.source.evict_pod(p.namespace, p.name, p.uid)


class Evictor:
    """Evicts one pod at a time (several run at once) and accounts for the outcome."""

    def __init__(
        self, remover: Remover, limiters: TaintLimiters, backoff: Backoff, reports: RuleReports, metrics: Metrics, deadlines: Deadlines
    ) -> None:
        self.remover = remover
        self.limiters = limiters
        self.backoff = backoff
        self.reports = reports
        self.metrics = metrics
        self.deadlines = deadlines
        self.done: set[str] = set()  # pod UIDs this controller deleted or evicted

    def keep(self, planned: set[str], present: set[str]) -> None:
        """Forget the retries of pods no longer `planned`, and the pods no longer `present` in the view."""
        self.backoff.keep(planned)
        self.done &= present  # a pod we evicted stays here only while it is still in the view
        self.remover.marked &= present

    async def evict(self, p: PodEviction, charged: str) -> bool:
        """True when the pod was deleted or evicted now (`charged`: the taint whose token it took)."""
        clock = self.deadlines.clock
        fields = {**p.describe(), "mode": self.remover.mode, "rate_limited_by": charged}
        try:
            await self.remover.remove(p)
        except LeadershipLost:
            self.limiters.give_back(charged)
            log.info("leadership ended during the eviction; the pod is left to the new leader", extra=fields)
            return False
        except NotFound:
            self.done.add(p.uid)
            log.info("pod already gone", extra=fields)
            self._count(p, "gone")
            return False
        except SourceError as e:
            if e.status == 409:  # UID precondition: the pod was replaced by another of the same name
                self.done.add(p.uid)
                log.info("pod was replaced; nothing to evict", extra={**fields, "err": e.message})
                self._count(p, "gone")
                return False
            self._failed(p, charged, e, fields)
            return False
        self.done.add(p.uid)
        self.backoff.succeeded(p.uid)
        latency = max(0.0, clock.now() - p.taint_time)
        self.metrics.eviction_latency.observe(latency)
        self.reports.evicted(p)
        self._count(p, "ok")
        log.info("evicted pod" if self.remover.mode == "evict" else "deleted pod", extra={**fields, "latency_s": round(latency, 3)})
        return True

    def _failed(self, p: PodEviction, charged: str, e: SourceError, fields: dict[str, str]) -> None:
        self.limiters.give_back(charged)
        refused = e.status == 429
        now = self.deadlines.clock.now()
        backoff = self.backoff.failed(p.uid, now)
        self.deadlines.add(self.deadlines.clock.now() + backoff)
        if refused:
            self.reports.refused(p)
            message = f"Eviction refused by a PodDisruptionBudget, retrying in {backoff:g} s: {e.message}"
            self.remover.events.pod(p, message, warning=True)
        log.warning(
            "eviction refused by a PodDisruptionBudget; retrying" if refused else "eviction failed; retrying",
            extra={**fields, "err": e.message, "retry_in_s": backoff},
        )
        self._count(p, "refused" if refused else "error")

    def _count(self, p: PodEviction, result: str) -> None:
        volume = False
        for origin in p.origins:
            if origin.kind is TaintKind.VOLUME:
                volume = True
                label = "volume"
            else:
                label = origin.source if origin.kind is TaintKind.RULE else "slice"
            self.metrics.eviction_deleted(label, result)
        if volume:
            self.metrics.volume_evictions.labels(result).inc()
