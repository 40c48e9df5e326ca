"""The `EvictionInProgress` condition the controller keeps on the rules it owns (wording: `rule_status.py`).

Counts pending pods from the plan and evictions and refusals since the
start, writes at most once per `rule_status.STATUS_PERIOD` per generation,
and warns once per rule when kube-controller-manager's eviction controller
writes the same rule's status.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from allocator.types import EFFECT_NONE, DeviceTaintRule
from controllers.eviction import rule_status
from controllers.eviction.events import Events
from controllers.eviction.intake import Intake
from controllers.eviction.plan import RULE_KIND, Ownership, PodEviction, TaintKind, TaintOrigin, TaintTime, dry_run
from controllers.eviction.rule_checks import rule_problems
from controllers.eviction.rule_view import RuleView
from tracker import events as ev
from tracker.clock import Deadlines, format_time
from tracker.source import NotFound, RuleStatusWriter, SourceError

log = logging.getLogger("dra_extender.eviction")


@dataclass(slots=True)
class _RuleStats:
    evicted: int = 0
    refused: int = 0
    warned_foreign: bool = False
    last_written: tuple[float, dict[str, Any]] | None = None
    last_ready: dict[str, Any] | None = None


class RuleReports:
    def __init__(
        self, intake: Intake, source: RuleStatusWriter, ownership: Ownership, events: Events, deadlines: Deadlines, taint_time: TaintTime
    ) -> None:
        self.intake = intake
        self.source = source
        self.ownership = ownership
        self.events = events
        self.deadlines = deadlines
        self.taint_time = taint_time  # for the dry run of an `effect: None` rule
        self._stats: dict[str, _RuleStats] = {}  # by rule uid (source when it has none)

    def _stats_of(self, origin: TaintOrigin) -> _RuleStats:
        rule = self.intake.rules.get(origin.rule) if origin.rule is not None else None
        if rule is None:
            return _RuleStats()  # deleted while its pod was evicted: no status left to count into
        return self._stats.setdefault(rule.uid or origin.source, _RuleStats())

    def forget(self, rule: RuleView) -> None:
        """The rule was deleted: its counts go with it (a rule created again under its name starts from zero)."""
        self._stats.pop(rule.uid or f"{RULE_KIND}/{rule.group}/{rule.name}", None)

    def evicted(self, p: PodEviction) -> None:
        for origin in p.origins:
            if origin.kind is TaintKind.RULE:
                self._stats_of(origin).evicted += 1

    def refused(self, p: PodEviction) -> None:
        for origin in p.origins:
            if origin.kind is TaintKind.RULE:
                self._stats_of(origin).refused += 1

    async def write(self, pending: Iterable[PodEviction]) -> None:
        """Write the condition of every owned rule whose condition is due and changed (`pending`: the plan, less what is done)."""
        now = self.deadlines.clock.now()
        counts: dict[tuple[str, str], tuple[int, set[str]]] = {}
        for p in pending:
            for origin in p.origins:
                if origin.rule is not None:
                    n, namespaces = counts.get(origin.rule, (0, set()))
                    namespaces.add(p.namespace)
                    counts[origin.rule] = (n + 1, namespaces)
        state = self.intake.state
        for view in list(self.intake.rules.values()):
            rule = state.rules.get(view.ident)
            if rule is None or not self.ownership.owns(TaintOrigin.of_rule(rule)):
                continue
            n, namespaces = counts.get(view.ident, (0, set()))
            await self._write_one(view, rule, rule_status.RuleCounts(n, len(namespaces)), now)

    async def _write_one(self, view: RuleView, rule: DeviceTaintRule, counts: rule_status.RuleCounts, now: float) -> None:
        group, name = view.ident
        stats = self._stats.setdefault(rule.meta.uid or rule.source, _RuleStats())
        if group != ev.GROUP_EXTENDER and not stats.warned_foreign and view.in_tree_status:
            stats.warned_foreign = True
            self.events.two_controllers(rule.meta.name, rule.meta.uid, group)
        ready = self._ready_due(view, rule, stats)  # at once, whatever the throttle: it is news of the rule itself
        evicting = self._evicting_due(view, rule, counts, stats, now)
        if evicting is None and ready is None:
            return
        written = [c for c in (ready, evicting) if c is not None]
        for c in written:
            c["lastTransitionTime"] = format_time(now)
        try:
            await self.source.update_rule_status(group, name, {"conditions": rule_status.with_conditions(view.status, *written)})
        except NotFound:
            return
        except SourceError as e:
            log.warning("could not write rule status", extra={"rule": name, "group": group, "err": e.message})
            self.deadlines.retry(now)
            return
        if evicting is not None:
            stats.last_written = (now, evicting)
            self.deadlines.add(now + rule_status.STATUS_PERIOD)
        if ready is not None:
            stats.last_ready = ready
        for c in written:
            log.info(
                "rule status", extra={"rule": name, "group": group, "condition": c["type"], "reason": c["reason"], "note": c["message"]}
            )

    def _ready_due(self, view: RuleView, rule: DeviceTaintRule, stats: _RuleStats) -> dict[str, Any] | None:
        """The `Ready` condition when it differs from the rule's and from our last write; else None."""
        desired = rule_status.ready(rule_problems(self.intake.state, rule), rule.meta.generation)
        if rule_status.same(rule_status.existing(view.status, rule_status.READY), desired):
            return None
        if stats.last_ready is not None and rule_status.same(stats.last_ready, desired):
            return None  # written; the watch has not brought it back yet
        return desired

    def _evicting_due(
        self, view: RuleView, rule: DeviceTaintRule, counts: rule_status.RuleCounts, stats: _RuleStats, now: float
    ) -> dict[str, Any] | None:
        """The `EvictionInProgress` condition when it is due (the throttle) and changed; else None."""
        current = rule_status.existing(view.status)
        last = stats.last_written if stats.last_written and stats.last_written[1]["observedGeneration"] == rule.meta.generation else None
        if last is not None and rule.taint.effect == EFFECT_NONE and last[1]["reason"] == "NoEffect":
            return None  # the dry run of this generation is written; the watch has not brought it back yet
        when = rule_status.next_write(current, rule.taint.effect, rule.meta.generation, last[0] if last else None)
        if when is None:
            return None
        if when > now:
            self.deadlines.add(when)
            return None
        dry = dry_run(self.intake.state, rule.source, self.taint_time) if rule.taint.effect == EFFECT_NONE else None
        counted = rule_status.RuleCounts(counts.pending_pods, counts.pending_namespaces, stats.evicted, stats.refused)
        desired = rule_status.condition(rule.taint.effect, counted, dry, rule.meta.generation)
        if rule_status.same(current, desired) or (last is not None and rule_status.same(last[1], desired)):
            return None
        return desired
