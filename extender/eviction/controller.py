"""The NoExecute eviction controller: plan, rate-limit, evict, report on the rules.

One asyncio task, run on the leader only. Tracker events (slices, rules,
patches, classes, claims, pods) mark the plan dirty and wake the loop; it
recomputes who must leave and when (`plan.py`), evicts what is due within
each taint's rate limit, stamps `timeAdded` on our CRD rules
(`rule_time.py`) and writes the `EvictionInProgress` condition of the rules
it owns (`rule_status.py`). Every deadline comes from the injected clock.

The plan is derived from the cluster alone, so a restarted controller (or a
new leader) picks up exactly the pods that are still there: nothing is lost,
and a pod already marked (DisruptionTarget) or deleting is not marked again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from allocator.types import EFFECT_NONE, DeviceID, DeviceTaint
from extender.eviction import rule_status, rule_time
from extender.eviction.clock import Clock, SystemClock, format_time, parse_time
from extender.eviction.plan import OWN_RULE_PREFIX, Ownership, PodEviction, dry_run, plan_evictions
from extender.eviction.rate_limit import TaintLimiters
from extender.eviction.volume_plan import ineffective_no_attach, merge, plan_volume_evictions
from extender.metrics import Metrics
from tracker import events as ev
from tracker.source import NotFound, Source, SourceError
from tracker.state import ClusterState
from tracker.volumes import VolumeTaints, stamp_time_added

log = logging.getLogger("dra_extender.eviction")

EVENT_REASON = "DeviceTaintManagerEviction"
DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByDeviceTaintManager",
    "message": "Device Taint manager: deleting due to NoExecute taint",
}
VOLUME_EVENT_REASON = "VolumeTaintManagerEviction"
UNKNOWN_EFFECT_REASON = "UnknownTaintEffect"
_KNOWN_EFFECTS = frozenset({EFFECT_NONE, "NoSchedule", "NoExecute"})
VOLUME_DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByVolumeTaintManager",
    "message": "Volume Taint manager: deleting due to NoUse taint",
}
_OUR_REASONS = frozenset({DISRUPTION_TARGET["reason"], VOLUME_DISRUPTION_TARGET["reason"]})
# kube-controller-manager's controller name: its field manager on the conditions it writes.
IN_TREE_MANAGER = "device-taint-eviction-controller"
_TRIGGERS = frozenset(
    {ev.POD, ev.RESOURCE_CLAIM, ev.RESOURCE_SLICE, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH, ev.DEVICE_CLASS}
    | {ev.PERSISTENT_VOLUME_CLAIM, ev.PERSISTENT_VOLUME}
)


@dataclass(frozen=True, slots=True)
class Settings:
    mode: Literal["delete", "evict"] = "delete"
    ownership: Ownership = field(default_factory=Ownership)
    leader_poll: float = 1.0  # how often a follower checks whether it leads now
    debounce: float = 0.1  # real seconds to gather a burst of tracker events into one recompute (bounds its CPU)
    retry_initial: float = 1.0  # backoff after a refused (429) or failed eviction
    retry_max: float = 60.0


@dataclass(slots=True)
class _RuleStats:
    evicted: int = 0
    refused: int = 0
    warned_foreign: bool = False
    last_written: tuple[float, dict[str, Any]] | None = None


class EvictionController:
    def __init__(
        self,
        state: ClusterState,
        source: Source,
        settings: Settings = Settings(),
        *,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.state = state
        self.source = source
        self.settings = settings
        self.is_leader = is_leader
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.limiters = TaintLimiters()
        self.plan: dict[str, PodEviction] = {}
        self.done: set[str] = set()  # pod UIDs this controller deleted or evicted
        self.idle = False  # waiting for the clock or a tracker event (tests step the fake clock then)
        self.dirty = True
        self._wake = asyncio.Event()
        self._raw_rules: dict[tuple[str, str], dict[str, Any]] = {}
        self._first_seen: dict[tuple[DeviceID, str], float] = {}
        self._stamps: dict[tuple[str, str, str], rule_time.Stamp] = {}  # (group, name, uid) -> written, not yet seen
        self._rules: dict[str, _RuleStats] = {}  # by uid
        self._marked: set[str] = set()  # pod UIDs that got our Event
        self._retry: dict[str, tuple[float, float]] = {}  # pod UID -> (not before, last backoff)
        self._deadlines: list[float] = []
        # Evictions under way (pod UID -> task): as many run at once as the buckets have
        # tokens, so the API's latency does not cap the rate.
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._unknown_effects: set[tuple[str, object]] = set()  # (rule uid, generation) announced
        # Volume taints: first sight of a NoUse taint without timeAdded, our pending timeAdded
        # writes ((kind, key) -> the annotation we replaced), NoAttachOrMount taints announced.
        self._volume_seen: dict[tuple[str, str, str], float] = {}
        self._volume_stamps: dict[tuple[str, str], str] = {}
        self._announced: set[tuple[str, str, str]] = set()
        state.subscribe(self._on_event)

    # ------------------------------------------------------------------ intake

    def _on_event(self, event: ev.ObjectEvent) -> None:
        if event.kind not in _TRIGGERS:
            return
        if event.kind == ev.POD and self._own_write(event):
            return
        if event.kind == ev.DEVICE_TAINT_RULE:
            ident = (event.group or ev.GROUP_RESOURCE, event.key)
            if event.type == "DELETED":
                self._raw_rules.pop(ident, None)
                for key in [k for k in self._stamps if k[:2] == ident]:
                    del self._stamps[key]
            else:
                self._raw_rules[ident] = event.object
                self._announce_unknown_effect(ident, event.object)
        self.dirty = True
        self._wake.set()

    def _announce_unknown_effect(self, ident: tuple[str, str], raw: dict[str, Any]) -> None:
        """A rule whose effect this version does not know acts like None (as upstream's); say so on
        the rule, once per generation, so a typo such as `Evict-Everything` is not silent."""
        taint = (raw.get("spec") or {}).get("taint") or {}
        effect = taint.get("effect") if isinstance(taint, dict) else None
        if not isinstance(effect, str) or effect in _KNOWN_EFFECTS or not self.is_leader():
            return
        meta = raw.get("metadata") or {}
        seen = (str(meta.get("uid") or ""), meta.get("generation"))
        if seen in self._unknown_effects:
            return
        self._unknown_effects.add(seen)
        group, name = ident
        message = f"spec.taint.effect: unknown effect {effect!r}: treated as None (known: NoExecute, NoSchedule, None)"
        log.warning(
            "DeviceTaintRule has an unknown taint effect",
            extra={"rule": name, "group": group, "field": "spec.taint.effect", "effect": effect},
        )
        involved = {"apiVersion": str(raw.get("apiVersion") or ""), "kind": "DeviceTaintRule", "name": name, "uid": seen[0]}
        event = {"type": "Warning", "reason": UNKNOWN_EFFECT_REASON, "message": message, "involvedObject": involved}
        task = asyncio.ensure_future(self.source.create_event(event))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _own_write(self, event: ev.ObjectEvent) -> bool:
        """A pod this controller is evicting or has evicted: the event is our own write coming
        back (condition, deletion). It changes no plan, so it must not restart the wait."""
        uid = str((event.object.get("metadata") or {}).get("uid") or "")
        return bool(uid) and (uid in self._inflight or uid in self.done)

    @property
    def in_flight(self) -> int:
        """Evictions under way."""
        return len(self._inflight)

    @property
    def woken(self) -> bool:
        """A tracker event arrived that the loop has not taken up yet."""
        return self._wake.is_set()

    # ------------------------------------------------------------------ time of a taint

    def _taint_time(self, did: DeviceID, taint: DeviceTaint, source: str) -> float:
        """timeAdded as epoch seconds: our pending stamp for CRD rules, first sight for a slice taint without one."""
        if source.startswith(OWN_RULE_PREFIX):
            name = source[len(OWN_RULE_PREFIX) :]
            raw = self._raw_rules.get((ev.GROUP_EXTENDER, name))
            if raw is not None:
                uid = str((raw.get("metadata") or {}).get("uid") or "")
                stamp = self._stamps.get((ev.GROUP_EXTENDER, name, uid))
                if stamp is not None:
                    return parse_time(stamp.effective) or self.clock.now()
        t = parse_time(taint.time_added)
        if t is not None:
            return t
        return self._first_seen.setdefault((did, str(taint)), self.clock.now())

    def _volume_taint_time(self, volume: VolumeTaints, taint: DeviceTaint) -> float:
        """timeAdded of a volume taint; before our write of it comes back, the time we wrote."""
        t = parse_time(taint.time_added)
        if t is not None:
            return t
        return self._volume_seen.setdefault((volume.kind, volume.key, str(taint)), self.clock.now())

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        log.info(
            "eviction controller started",
            extra={"mode": self.settings.mode, "evict_upstream": self.settings.ownership.evict_upstream},
        )
        try:
            await self._loop()
        finally:
            for task in list(self._inflight.values()):
                task.cancel()

    async def _loop(self) -> None:
        while True:
            if not self.state.ready:
                # Acting on a partial view would cancel and re-plan for nothing. Readiness comes
                # with no tracker event of its own (an empty last list), so poll it in real time.
                await asyncio.sleep(0.05)
                continue
            self._wake.clear()
            self._deadlines = []
            if self.is_leader():
                await self.step()
                # Leadership is polled: a leader that loses it must notice without a tracker event.
                deadline = min(self._deadlines, default=self.clock.now() + self.settings.leader_poll)
                deadline = min(deadline, self.clock.now() + self.settings.leader_poll)
            else:
                if self.plan:
                    log.info("not leading: pending evictions are left to the leader", extra={"pending": len(self.plan)})
                self.plan = {}
                self.dirty = True
                self.metrics.evictions_pending.set(0)
                deadline = self.clock.now() + self.settings.leader_poll
            if deadline <= self.clock.now():
                await asyncio.sleep(0)  # due again at once: still let the tracker and the HTTP servers run
            self.idle = True
            try:
                await self.clock.wait(self._wake, deadline)
            finally:
                self.idle = False

    async def step(self) -> None:
        """One pass: stamp rules, recompute if anything changed, evict what is due, write rule status."""
        await self._stamp_rules()
        await self._stamp_volumes()
        if self.dirty:
            await asyncio.sleep(self.settings.debounce)
            self.dirty = False
            self._recompute()
        await self._evict_due()
        if not self._inflight:
            # Counts settle when the evictions under way end (each wakes the loop): writing
            # now would report them pending, and the throttle would keep that for 10 s.
            await self._write_statuses()
        needed = {r.id for p in self.plan.values() for r in p.reasons}
        self.limiters.drop_idle(needed, self.clock.now())

    def _recompute(self) -> None:
        new = merge(
            plan_evictions(self.state, self.settings.ownership, self._taint_time),
            plan_volume_evictions(self.state, self._volume_taint_time),
        )
        self._announce_ineffective()
        for key, old in self.plan.items():
            if key in new or old.uid in self.done:
                continue
            pod = self.state.pods.get(key)
            if pod is None or pod.meta.uid != old.uid or pod.meta.deletion_timestamp:
                continue  # gone: nothing to cancel
            log.info("cancelling eviction: the taint, rule or reservation went away", extra=old.describe())
            self._event(old, "Cancelling deletion")
        for key, p in new.items():
            if key not in self.plan and p.uid not in self.done:
                delay = max(0.0, p.due - self.clock.now())
                log.info("pod will be evicted", extra={**p.describe(), "in_s": round(delay, 3)})
        self.plan = new
        live = {p.uid for p in new.values()}
        self._retry = {uid: r for uid, r in self._retry.items() if uid in live}
        present = {pod.meta.uid for pod in self.state.pods.values()}
        self.done &= present  # a pod we evicted stays here only while it is still in the view
        self._marked &= present
        self.metrics.evictions_pending.set(sum(1 for p in new.values() if p.uid not in self.done))

    async def _evict_due(self) -> None:
        now = self.clock.now()
        order = sorted(self.plan.values(), key=lambda p: (p.due, p.key))
        for p in order:
            if self.dirty:
                self._deadlines.append(now)  # the cluster changed meanwhile: recompute first
                return
            if p.uid in self.done or p.uid in self._inflight:
                continue
            if p.due > now:
                self._deadlines.append(p.due)
                break  # sorted: the rest are later
            not_before = self._retry.get(p.uid, (0.0, 0.0))[0]
            if not_before > now:
                self._deadlines.append(not_before)
                continue
            charged, when = self.limiters.acquire({(r.id, r.rate) for r in p.reasons}, now)
            if charged is None:
                self._deadlines.append(when)
                continue
            self._inflight[p.uid] = asyncio.create_task(self._evict_and_wake(p, charged), name=f"evict-{p.key}")

    async def _evict_and_wake(self, p: PodEviction, charged: str) -> None:
        try:
            await self._evict(p, charged)
        except Exception:
            log.exception("eviction failed unexpectedly", extra=p.describe())
        finally:
            self._inflight.pop(p.uid, None)
            self._wake.set()  # its outcome (done, a retry deadline) is for the loop to take up

    # ------------------------------------------------------------------ one eviction

    @staticmethod
    def _pod_event(p: PodEviction, message: str, *, warning: bool = False) -> dict[str, Any]:
        return {
            "type": "Warning" if warning else "Normal",
            "reason": VOLUME_EVENT_REASON if p.volume else EVENT_REASON,
            "message": message,
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": p.namespace, "name": p.name, "uid": p.uid},
        }

    def _event(self, p: PodEviction, message: str, *, warning: bool = False) -> None:
        """Fire and forget (the source logs a failure): a cancellation must not wait on it."""
        task = asyncio.ensure_future(self.source.create_event(self._pod_event(p, message, warning=warning)))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _event_now(self, p: PodEviction, message: str) -> None:
        await self.source.create_event(self._pod_event(p, message))

    def _already_marked(self, p: PodEviction) -> bool:
        """A previous controller (before a restart) already set the condition: don't announce twice."""
        raw = self.state.raw_pods.get(p.key) or {}
        for c in (raw.get("status") or {}).get("conditions") or ():
            if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("reason") in _OUR_REASONS:
                return c.get("status") == "True"
        return False

    async def _evict(self, p: PodEviction, charged: str) -> None:
        fields = {**p.describe(), "mode": self.settings.mode, "rate_limited_by": charged}
        try:
            if self.settings.mode == "delete":
                if not self._already_marked(p):
                    await self._event_now(p, "Marking for deletion")  # before the delete, as its reason
                    target = VOLUME_DISRUPTION_TARGET if p.volume else DISRUPTION_TARGET
                    condition = {**target, "lastTransitionTime": format_time(self.clock.now())}
                    await self.source.update_pod_status_condition(p.namespace, p.name, condition)
                await self.source.delete_pod(p.namespace, p.name, p.uid)
            else:
                if p.uid not in self._marked and not self._already_marked(p):
                    self._marked.add(p.uid)
                    await self._event_now(p, "Marking for eviction")
                await self.source.evict_pod(p.namespace, p.name, p.uid)
        except NotFound:
            self.done.add(p.uid)
            log.info("pod already gone", extra=fields)
            self._count(p, "gone")
            return
        except SourceError as e:
            if e.status == 409:  # UID precondition: the pod was replaced by another of the same name
                self.done.add(p.uid)
                log.info("pod was replaced; nothing to evict", extra={**fields, "err": e.message})
                self._count(p, "gone")
                return
            self.limiters.give_back(charged)
            refused = e.status == 429
            _, backoff = self._retry.get(p.uid, (0.0, 0.0))
            backoff = min(self.settings.retry_max, backoff * 2 if backoff else self.settings.retry_initial)
            self._retry[p.uid] = (self.clock.now() + backoff, backoff)
            self._deadlines.append(self.clock.now() + backoff)
            if refused:
                for source in p.sources:
                    self._stats_for_source(source).refused += 1
                self._event(p, f"Eviction refused by a PodDisruptionBudget, retrying in {backoff:g} s: {e.message}", warning=True)
            log.warning(
                "eviction refused by a PodDisruptionBudget; retrying" if refused else "eviction failed; retrying",
                extra={**fields, "err": e.message, "retry_in_s": backoff},
            )
            self._count(p, "refused" if refused else "error")
            return
        self.done.add(p.uid)
        self._retry.pop(p.uid, None)
        latency = max(0.0, self.clock.now() - p.taint_time)
        self.metrics.eviction_latency.observe(latency)
        for source in p.sources:
            self._stats_for_source(source).evicted += 1
        self._count(p, "ok")
        self.metrics.evictions_pending.set(sum(1 for q in self.plan.values() if q.uid not in self.done))
        log.info("evicted pod" if self.settings.mode == "evict" else "deleted pod", extra={**fields, "latency_s": round(latency, 3)})

    def _count(self, p: PodEviction, result: str) -> None:
        volume = False
        for source in sorted(p.sources):
            if source.startswith(("PersistentVolume/", "PersistentVolumeClaim/")):
                volume = True
                label = "volume"
            else:
                label = source if source.startswith("DeviceTaintRule/") else "slice"
            self.metrics.eviction_deletions.labels(label, result).inc()
        if volume:
            self.metrics.volume_evictions.labels(result).inc()

    def _stats_for_source(self, source: str) -> _RuleStats:
        group, _, name = source.removeprefix("DeviceTaintRule/").partition("/")
        raw = self._raw_rules.get((group, name)) or {}
        uid = str((raw.get("metadata") or {}).get("uid") or source)
        return self._rules.setdefault(uid, _RuleStats())

    # ------------------------------------------------------------------ volume taints

    async def _stamp_volumes(self) -> None:
        """Write timeAdded into NoUse volume taints that lack it, so a restart keeps the clock."""
        index = self.state.volumes
        if not index.has_taints() and not self._volume_stamps:
            return
        live = set()
        for volume in index.tainted():
            ident = (volume.kind, volume.key)
            live.add(ident)
            missing = [t for t in volume.taints if t.effect == "NoUse" and not t.time_added]
            if not missing or self._volume_stamps.get(ident) == volume.raw_annotation:
                continue  # nothing to stamp, or written and the watch has not brought it back yet
            when = {str(t): self._volume_taint_time(volume, t) for t in missing}
            text = stamp_time_added(volume.raw_annotation, {k: format_time(v) for k, v in when.items()})
            if text is None:
                continue
            namespace, _, name = volume.key.rpartition("/")
            try:
                await self.source.update_volume_taints(volume.kind, namespace, name, text)
            except NotFound:
                continue
            except SourceError as e:
                self._deadlines.append(self.clock.now() + self.settings.retry_initial)
                log.warning("could not stamp timeAdded on a volume taint; retrying", extra={"volume": volume.label, "err": e.message})
                continue
            self._volume_stamps[ident] = volume.raw_annotation
            log.info("stamped timeAdded on volume taints", extra={"volume": volume.label, "taints": ",".join(when)})
        for ident in [i for i in self._volume_stamps if i not in live]:
            del self._volume_stamps[ident]
        self._volume_seen = {k: t for k, t in self._volume_seen.items() if k[:2] in live}

    def _announce_ineffective(self) -> None:
        """One Event per NoAttachOrMount taint that pods already using the volume ignore.

        A taint removed and added again is announced again.
        """
        found = ineffective_no_attach(self.state)
        self._announced &= {(v.uid or v.key, v.kind, str(t)) for v, t, _ in found}
        for volume, taint, pods in found:
            ident = (volume.uid or volume.key, volume.kind, str(taint))
            if ident in self._announced:
                continue
            self._announced.add(ident)
            message = (
                f"taint {taint} is not effective for pods already using the volume: {', '.join(pods)} "
                "(NoAttachOrMount only keeps new pods off; use NoUse to evict)"
            )
            log.info(
                "volume taint not effective for running pods", extra={"volume": volume.label, "taints": str(taint), "pods": ",".join(pods)}
            )
            namespace, _, name = volume.key.rpartition("/")
            involved = {"apiVersion": "v1", "kind": volume.kind, "name": name, **({"namespace": namespace} if namespace else {})}
            if volume.uid:
                involved["uid"] = volume.uid
            event = {"type": "Normal", "reason": "VolumeTaintNotEffective", "message": message, "involvedObject": involved}
            task = asyncio.ensure_future(self.source.create_event(event))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # ------------------------------------------------------------------ our CRD rules' timeAdded

    async def _stamp_rules(self) -> None:
        now = format_time(self.clock.now())
        for (group, name), raw in list(self._raw_rules.items()):
            if group != ev.GROUP_EXTENDER:
                continue  # upstream's API server stamps its own rules
            uid = str((raw.get("metadata") or {}).get("uid") or "")
            decision = rule_time.decide(raw, now)
            key = (group, name, uid)
            if decision is None:
                self._stamps.pop(key, None)
                continue
            pending = self._stamps.get(key)
            if pending is not None and pending.record["effect"] == decision.record["effect"]:
                continue  # written; the watch has not brought it back yet
            self._stamps[key] = decision
            self.dirty = True  # the taint's time may have moved
            try:
                if decision.time_added is not None:
                    await self.source.update_rule_time_added(group, name, decision.time_added)
                    log.info(
                        "stamped timeAdded on rule",
                        extra={"rule": name, "group": group, "timeAdded": decision.time_added, "effect": decision.record["effect"]},
                    )
                await self.source.update_rule_status(group, name, {rule_time.STAMP_FIELD: decision.record})
            except NotFound:
                self._stamps.pop(key, None)
            except SourceError as e:
                self._stamps.pop(key, None)
                self._deadlines.append(self.clock.now() + self.settings.retry_initial)
                log.warning("could not stamp timeAdded on rule; retrying", extra={"rule": name, "group": group, "err": e.message})

    # ------------------------------------------------------------------ rule status

    def _foreign_conditions(self, raw: dict[str, Any]) -> bool:
        for entry in (raw.get("metadata") or {}).get("managedFields") or ():
            if isinstance(entry, dict) and entry.get("manager") == IN_TREE_MANAGER and entry.get("subresource") == "status":
                return True
        return False

    async def _write_statuses(self) -> None:
        now = self.clock.now()
        counts: dict[str, list[Any]] = {}
        for p in self.plan.values():
            if p.uid in self.done:
                continue
            for source in p.sources:
                c = counts.setdefault(source, [0, set()])
                c[0] += 1
                c[1].add(p.namespace)
        for (group, name), raw in list(self._raw_rules.items()):
            rule = self.state.rules.get((group, name))
            if rule is None or not self.settings.ownership.owns(rule.source):
                continue
            stats = self._rules.setdefault(rule.meta.uid or rule.source, _RuleStats())
            if group != ev.GROUP_EXTENDER and not stats.warned_foreign and self._foreign_conditions(raw):
                stats.warned_foreign = True
                self._warn_foreign(rule.meta.name, rule.meta.uid, group)
            status = raw.get("status") or {}
            current = rule_status.existing(status)
            last = (
                stats.last_written if stats.last_written and stats.last_written[1]["observedGeneration"] == rule.meta.generation else None
            )
            if last is not None and rule.taint.effect == EFFECT_NONE and last[1]["reason"] == "NoEffect":
                continue  # the dry run of this generation is written; the watch has not brought it back yet
            when = rule_status.next_write(current, rule.taint.effect, rule.meta.generation, last[0] if last else None)
            if when is None:
                continue
            if when > now:
                self._deadlines.append(when)
                continue
            pending, namespaces = counts.get(rule.source, (0, set()))
            dry = dry_run(self.state, rule.source, self._taint_time) if rule.taint.effect == EFFECT_NONE else None
            counted = rule_status.RuleCounts(pending, len(namespaces), stats.evicted, stats.refused)
            desired = rule_status.condition(rule.taint.effect, counted, dry, rule.meta.generation)
            if rule_status.same(current, desired) or (last is not None and rule_status.same(last[1], desired)):
                continue
            desired["lastTransitionTime"] = format_time(now)
            try:
                await self.source.update_rule_status(group, name, {"conditions": rule_status.with_condition(status, desired)})
            except NotFound:
                continue
            except SourceError as e:
                log.warning("could not write rule status", extra={"rule": name, "group": group, "err": e.message})
                self._deadlines.append(now + self.settings.retry_initial)
                continue
            stats.last_written = (now, desired)
            self._deadlines.append(now + rule_status.STATUS_PERIOD)
            log.info("rule status", extra={"rule": name, "group": group, "reason": desired["reason"], "note": desired["message"]})

    def _warn_foreign(self, name: str, uid: str, group: str) -> None:
        message = (
            "kube-controller-manager's device-taint-eviction controller also writes this rule's status: with "
            "--evict-upstream both controllers evict for it; disable one of them"
        )
        log.warning(message, extra={"rule": name, "group": group})
        task = asyncio.ensure_future(
            self.source.create_event(
                {
                    "type": "Warning",
                    "reason": "TwoEvictionControllers",
                    "message": message,
                    "involvedObject": {
                        "apiVersion": self.source.api_version("DeviceTaintRule", group),
                        "kind": "DeviceTaintRule",
                        "name": name,
                        "uid": uid,
                    },
                }
            )
        )
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
