"""The health controller: signals in, one DeviceTaintRule per failing device out (leader only).

It watches DeviceHealthPolicies itself (a reflector of its own), takes
alerts from the webhook receiver (`deliver`) and driver taints from the
tracker's device views, runs the pure ladder (ladder.py) for every rule at
the injected clock's time, and writes the difference: create, re-rung or
delete each device's rule, Events, the policy's status, metrics.

What it knows lives in the API: every device's ladder state is in its
rule's annotation (rules.py), read back with one list whenever this process
becomes leader, so a restart or a failover resumes each device at its rung
and never escalates it twice. Memory holds that state while leading, what
the API was last told (to write only differences), and what deliveries
changed since: the loop writes it right after their 200 (docs/health.md, Writes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.device_view import DeviceView
from allocator.types import DeviceID
from controllers.health import ladder
from controllers.health.alerts import Alert, Delivery
from controllers.health.delivery import ALERTS_PER_SLICE, Change, Matching, Pending
from controllers.health.failures import WriteFailures
from controllers.health.ladder import DeviceState
from controllers.health.policy import GROUP, KIND, POLICIES, Policy, PolicyError, Rule, parse_policy
from controllers.health.resolver import device_key
from controllers.health.rules import PIN, POLICY_LABEL, STATE, decode, encode_state, label_value, rule_name, rule_object
from controllers.health.sinks import NodeSink, ObjectSink
from controllers.health.status import PolicyStatus, Unmatched
from serving.metrics import Metrics
from tracker import events as ev
from tracker.apiserver.discovery import served
from tracker.apiserver.reflector import Freshness, Reflector, WatchTransport
from tracker.apiserver.source import OPTIONAL_RECHECK_SECONDS
from tracker.clock import Clock, SystemClock, format_time
from tracker.leadership_gate import LeadershipGate, MayWrite
from tracker.resources import KIND_RESOURCES, Resource
from tracker.source import Conflict, HealthSource, NotFound, SourceError
from tracker.state import ClusterState

log = logging.getLogger("dra_extender.health")

WRITERS = 64  # API writes in flight at once
WRITES_PER_TURN = 64  # devices one writer looks at between two turns of the event loop (an unchanged one costs a comparison)
Taint = tuple[str, str, str]  # key, value, effect


class SelectorFailed(Exception):
    """A rule's selector `index` failed at run time on a device (CEL's error)."""

    def __init__(self, index: int, error: str) -> None:
        super().__init__(error)
        self.index, self.error = index, error


@dataclass(frozen=True, slots=True)
class Answer:
    """What the receiver answers a delivery."""

    status: int
    body: dict[str, Any]


class HealthController:
    def __init__(
        self,
        state: ClusterState,
        source: HealthSource,
        *,
        feed: WatchTransport | None = None,
        leadership: MayWrite | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        leader_poll: float = 1.0,
        retry: float = 1.0,
        policy_recheck: float = OPTIONAL_RECHECK_SECONDS,
    ) -> None:
        self.state = state
        self.source = source
        self.feed: WatchTransport = feed if feed is not None else source  # type: ignore[assignment]  # ApiSource is both
        self.leadership: MayWrite = leadership or LeadershipGate.always()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.leader_poll = leader_poll
        self.retry = retry
        self.policy_recheck = policy_recheck
        self.wake = asyncio.Event()
        self.lock = asyncio.Lock()
        self.idle = False
        self.policies = ObjectSink(self._changed)
        self.nodes = NodeSink(self._changed)  # Node objects with their conditions, watched while a rule needs them
        self._node_task: asyncio.Task[None] | None = None
        self._parsed: dict[str, tuple[str, Policy | PolicyError]] = {}  # name -> (resourceVersion, parsed)
        self.loaded = False  # the rules' states read back since leadership began
        self.states: dict[tuple[str, str], dict[str, DeviceState]] = {}
        self.where: dict[str, tuple[DeviceID, str]] = {}  # device key -> (id, node)
        self.written: dict[str, tuple[Taint, str]] = {}  # rule name -> (taint, state annotation) the API has
        self.waiting: dict[tuple[str, str], tuple[str, ...]] = {}
        self.unmatched: dict[tuple[str, str], Unmatched] = {}
        self.last_signal: dict[tuple[str, str], float] = {}
        self.failures = WriteFailures(retry)  # per object, with backoff; and whether the API server is down
        self.status = PolicyStatus(source, self.clock, lambda name: self.policies.objects.get(name), self.failures)
        self.dirty: set[tuple[str, str]] = set()  # policy rules whose devices deliveries changed, to write
        self._pins: dict[str, bool] = {}  # rule key -> pinned, as the tracker's events last said
        self._full = True  # a tracker or policy change: the next pass looks at every rule
        self._fleets: dict[tuple[str, tuple[str, ...]], tuple[int, int, dict[str, int], tuple[int, DeviceID, str] | None]] = {}
        self._failing_selectors: dict[str, PolicyError] = {}  # policy -> its selector that fails at run time
        self._names: dict[tuple[str, str, str], str] = {}
        self._same: dict[str, tuple[DeviceState, Taint]] = {}  # rule name -> the state and taint `written` holds
        state.subscribe(self._tracker_event)

    # ------------------------------------------------------------------ inputs

    def _changed(self) -> None:
        self._full = True
        self.wake.set()

    def _tracker_event(self, event: ev.ObjectEvent) -> None:
        if event.kind == ev.RESOURCE_SLICE:
            self._changed()  # a driver taint may have come or gone
        elif event.kind == ev.DEVICE_TAINT_RULE:
            meta = event.object.get("metadata") or {}
            if POLICY_LABEL not in (meta.get("labels") or {}):
                return
            # Our own writes (and the eviction controller's status on them) change nothing here: a pass over
            # every rule for each would cost a thousand passes in a mass failure. A pin, or a deletion, does.
            pinned = (meta.get("annotations") or {}).get(PIN, "").lower() == "true"
            if event.type == "DELETED":
                self._pins.pop(event.key, None)
                self._changed()
            elif self._pins.get(event.key, False) != pinned:
                self._pins[event.key] = pinned
                self._changed()

    def valid_policies(self) -> list[Policy]:
        """The policies that parse and whose selectors evaluate on the rules' devices, in name order."""
        out = []
        for name, obj in sorted(self.policies.objects.items()):
            rv = obj["metadata"].get("resourceVersion", "")
            cached = self._parsed.get(name)
            if cached is None or cached[0] != rv:
                try:
                    parsed: Policy | PolicyError = parse_policy(obj)
                    self._validate_cel(parsed)  # type: ignore[arg-type]  # a Policy here
                except PolicyError as e:
                    parsed = e
                self._parsed[name] = cached = (rv, parsed)
            if isinstance(cached[1], Policy):
                failed = self._runtime_error(cached[1])
                if failed is None:
                    self._failing_selectors.pop(name, None)
                    out.append(cached[1])
                else:
                    self._failing_selectors[name] = failed
            else:
                self._failing_selectors.pop(name, None)
        return out

    def _runtime_error(self, policy: Policy) -> PolicyError | None:
        """A selector that fails at run time on a device of its rule's driver makes the policy invalid, as upstream
        DRA makes a claim's allocation fail rather than read the error as false (docs/health.md, Selectors)."""
        for i, rule in enumerate(policy.rules):
            failed = self._fleet_error(rule)
            if failed is not None:
                j, did, err = failed
                return PolicyError(
                    f"spec.rules[{i}].devices.selectors[{j}].cel.expression",
                    f"{rule.selectors[j]!r} fails at run time on device {did}: {err}",
                )
        return None

    def _validate_cel(self, policy: Policy) -> None:
        for i, rule in enumerate(policy.rules):
            for j, expr in enumerate(rule.selectors):
                try:
                    self.state.cel.compile(expr)
                except ValueError as e:
                    raise PolicyError(f"spec.rules[{i}].devices.selectors[{j}].cel.expression", str(e)) from None

    def policy_error(self, name: str) -> PolicyError | None:
        cached = self._parsed.get(name)
        if cached is not None and isinstance(cached[1], PolicyError):
            return cached[1]
        return self._failing_selectors.get(name)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        log.info("device health controller started")
        policy_task = asyncio.create_task(self._follow_policies(), name="health-policies")
        loop_task = asyncio.create_task(self._loop(), name="health-loop")
        try:
            # A reflector that ends has failed for good: so does the controller (the process exits and restarts).
            done, _ = await asyncio.wait([policy_task, loop_task], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
        finally:
            tasks = [policy_task, loop_task, *([self._node_task] if self._node_task is not None else [])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._node_task = None

    @property
    def ready(self) -> bool:
        return self.state.ready and self.policies.synced

    async def _loop(self) -> None:
        """The writer: a pass over every rule at each change and deadline, and over the delivered ones in between."""
        full_at = 0.0
        while True:
            if not self.ready:
                await asyncio.sleep(0.05)
                continue
            self.wake.clear()
            now = self.clock.now()
            self._follow_nodes()
            if self.leadership.may_write():
                full = self._full or now >= full_at
                only, self.dirty, self._full = (None if full else self.dirty), set(), False
                async with self.lock:
                    nxt = await self.reconcile(now, only=only)
                if full:
                    full_at = now + self.leader_poll
                if nxt is not None:
                    full_at = min(full_at, nxt)
            else:
                self._drop()
                full_at = now + self.leader_poll
            self.idle = True
            try:
                await self.clock.wait(self.wake, full_at)
            finally:
                self.idle = False

    async def _follow_policies(self) -> None:
        """Watch DeviceHealthPolicies once the CRD is served; until then there is no policy (asked again every minute).

        As the tracker's optional APIs: a cluster without the CRD is told once in the log and never hammered.
        """
        reported = False
        while True:
            plurals = await served(self.feed, POLICIES.group, POLICIES.version)
            if plurals is not None and POLICIES.plural in plurals:
                await self._reflector(POLICIES, self.policies).run()
                return  # a reflector that ends has failed for good
            if plurals is not None:  # known not served: no policy, and that view is complete
                if not reported:
                    log.info("DeviceHealthPolicy CRD not installed: no device health policy; checking again periodically")
                    reported = True
                if self.policies.objects or not self.policies.synced:
                    self.policies.replace(KIND, GROUP, [])
                    self.policies.mark_synced(KIND, GROUP)
            await asyncio.sleep(self.policy_recheck)

    def _reflector(self, res: Resource, sink: ObjectSink) -> Reflector:
        stats = dict.fromkeys(("lists", "watch_events", "relists_410", "watch_restarts", "errors"), 0)
        return Reflector(
            res, sink, self.feed, freshness=Freshness(3600.0), stats=stats, last_resource_versions={}, watch_timeout_seconds=290
        )

    def _follow_nodes(self) -> None:
        """Watch Nodes (their conditions) while some valid policy has a nodeCondition rule; the tracker keeps no conditions."""
        wanted = any(r.kind == "nodeCondition" for p in self.valid_policies() for r in p.rules)
        if wanted and self._node_task is None:
            self._node_task = asyncio.create_task(self._reflector(KIND_RESOURCES[ev.NODE], self.nodes).run(), name="health-nodes")
        elif not wanted and self._node_task is not None:
            self._node_task.cancel()
            self._node_task = None
            self.nodes.objects.clear()
            self.nodes.synced = False

    def _drop(self) -> None:
        """Not the leader: forget everything; the next leadership reads it back from the API."""
        self.loaded = False
        self.states.clear()
        self.written.clear()
        self._same.clear()
        self.status.forget()
        self.dirty.clear()
        self.failures.clear()
        # The leader's gauges are the fleet's: a follower's would keep its last leadership's figures (and an alert on them firing).
        self.metrics.health_devices.clear()
        self.metrics.health_guard_waiting.clear()

    @property
    def failing(self) -> str | None:
        """The write error while the API server as a whole cannot be written: deliveries get 503 (failures.py)."""
        return self.failures.down

    async def _load(self) -> None:
        """Every rule we own, listed fresh from the API (not the tracker's cache, which may lag a hand-over)."""
        rules = await self.source.list_own_rules(POLICY_LABEL)
        self.states.clear()
        self.written.clear()
        self._same.clear()
        for obj in rules:
            owned = decode(obj)
            if owned is None:
                continue
            self.states.setdefault((owned.policy, owned.rule), {})[device_key(owned.did)] = owned.state
            self.where[device_key(owned.did)] = (owned.did, owned.node)
            t = obj["spec"]["taint"]
            self.written[owned.name] = ((t["key"], t.get("value") or "", t["effect"]), obj["metadata"]["annotations"][STATE])
        self.loaded = True
        log.info("device health state read back", extra={"devices": sum(len(s) for s in self.states.values())})

    # ------------------------------------------------------------------ alerts

    async def deliver(self, delivery: Delivery) -> Answer:
        """One webhook delivery, applied to the ladder's state in memory and answered at once; the loop writes it.

        Written from the loop's queue (`dirty`, at most one write per device however many
        deliveries name it), so a mass failure's thousand rules never hold the answer. 503 when
        this process cannot act (not the leader, not synced, the rules not read back) or while
        the API server refuses the writes: Alertmanager then retries, and the retry is idempotent.
        The window between the 200 and the write is in docs/health.md (Limits).
        """
        if not self.leadership.may_write():
            return Answer(503, {"error": "not the leader: retry"})
        if not self.ready:
            return Answer(503, {"error": "not synced with the API server yet: retry"})
        if not self.loaded:
            async with self.lock:  # only at the start of a leadership: the loop holds it to read the rules back too
                try:
                    if not self.loaded:
                        await self._load()
                except (SourceError, OSError, TimeoutError) as e:
                    log.warning("could not read the health rules back; the delivery will be retried", extra={"err": str(e)})
                    return Answer(503, {"error": f"API server read failed: {e}"})
        if self.failing is not None:
            return Answer(503, {"error": f"API server write failed: {self.failing}: retry"})
        counts: dict[str, int] = {}
        touched = await self._apply_alerts(delivery, self.clock.now(), counts)
        if touched:
            self.dirty |= touched
            self.wake.set()
        return Answer(200, {"alerts": counts})

    async def _apply_alerts(self, delivery: Delivery, now: float, counts: dict[str, int]) -> set[tuple[str, str]]:
        """Match every alert to its device, then apply each device's signals together; a turn of the loop every ALERTS_PER_SLICE.

        Linear in the alerts: a device named by 20,000 alerts gets a new state per slice of them, not one per alert
        copying a growing state (docs/health.md, Bounded state). A pass of the loop between two slices sees the
        device as if the delivery had come in parts, in order.
        """
        policies = [p for p in self.valid_policies() if any(r.kind == "alert" for r in p.rules)]
        touched: set[tuple[str, str]] = set()
        by_policy: dict[tuple[str, str], int] = {}

        def count(policy: str, outcome: str, n: int = 1) -> None:
            counts[outcome] = counts.get(outcome, 0) + n
            by_policy[(policy, outcome)] = by_policy.get((policy, outcome), 0) + n

        def unmatched(ident: tuple[str, str], reason: str, alert: Alert, outcome: str) -> str:
            touched.add(ident)  # its status reports the unmatched alert
            return self._unmatched(ident, reason, alert.labels, now, outcome=outcome)

        matching = Matching(self.state, self._selected, unmatched, count)
        await matching.run(delivery.alerts, policies)
        applied = 0
        for p, changes in matching.slices():
            if applied >= ALERTS_PER_SLICE:
                await asyncio.sleep(0)
                applied = 0
            applied += len(changes)
            for outcome, n in self._apply_device(p, changes, now, touched).items():
                count(p.policy.name, outcome, n)
        for (name, outcome), n in by_policy.items():
            self.metrics.health_signals.labels(name, outcome).inc(n)
        return touched

    def _apply_device(self, p: Pending, changes: list[Change], now: float, touched: set[tuple[str, str]]) -> dict[str, int]:
        """Signals of one device applied at once (synchronously: a pass sees them all or none): outcome -> alerts."""
        ident = (p.policy.name, p.rule.name)
        self.where.setdefault(p.key, (p.did, p.node))
        states = self.states.setdefault(ident, {})  # read again after every turn of the loop: a pass replaces it
        old = states.get(p.key)
        new, done = ladder.apply(old, changes, now)
        out: dict[str, int] = {}
        for (_, cause), changed in zip(changes, done, strict=True):
            outcome = "repeat" if not changed else "firing" if cause is not None else "resolved"
            out[outcome] = out.get(outcome, 0) + 1
        if new is old:
            if old is not None and not self._unchanged(p.policy, p.rule, p.key, old):
                touched.add(ident)  # a repeat of a device whose write failed before: retried with it
            return out
        assert new is not None
        touched.add(ident)
        states[p.key] = new
        self.last_signal[ident] = now
        return out

    def _unmatched(self, ident: tuple[str, str], reason: str, labels: Mapping[str, str], now: float, outcome: str = "unmatched") -> str:
        u = self.unmatched.setdefault(ident, Unmatched())
        u.count += 1
        u.last = {"reason": reason, "labels": dict(labels), "time": format_time(now)}
        log.warning("alert names no device of the rule", extra={"policy": ident[0], "rule": ident[1], "err": reason})
        return outcome

    def _selected(self, rule: Rule, device: DeviceView) -> bool:
        """Whether the rule covers the device; a selector that fails on it does not (and makes its policy invalid)."""
        try:
            return device.id.driver == rule.driver and self._matches(rule, device)
        except SelectorFailed:
            return False

    def _matches(self, rule: Rule, device: DeviceView) -> bool:
        for j, expr in enumerate(rule.selectors):
            try:
                if not self.state.cel.evaluate(self.state.cel.compile(expr), device):
                    return False
            except ValueError as e:
                raise SelectorFailed(j, getattr(e, "reason", str(e))) from None
        return True

    # ------------------------------------------------------------------ driver taints

    def _driver_taints(self, policy: Policy, rule: Rule, now: float) -> None:
        sig = rule.taint_signal
        assert sig is not None
        ident = (policy.name, rule.name)
        states = self.states.setdefault(ident, {})
        firing: dict[str, set[str]] = {}
        for did, view in self.state.devices.items():
            if did.driver != rule.driver:
                continue
            for taint, origin in zip(view.taints, view.taint_sources, strict=False):
                if origin == "slice" and sig.matches(taint.key, taint.value, taint.effect) and self._selected(rule, view):
                    key = device_key(did)
                    firing.setdefault(key, set()).add(f"taint:{taint.key}={taint.value}:{taint.effect}")
                    self.where.setdefault(key, (did, view.node_name or ""))
        for key, signals in firing.items():
            for s in sorted(signals):
                new = ladder.fire(states.get(key), s, now, f"driver taint {s[6:]}")
                if new != states.get(key):
                    states[key] = new
                    self.last_signal[ident] = now
        for key, st in list(states.items()):
            for s in st.active:
                if s.startswith("taint:") and s not in firing.get(key, ()):
                    resolved = ladder.resolve(states[key], s, now)
                    assert resolved is not None
                    states[key] = resolved
                    self.last_signal[ident] = now

    # ------------------------------------------------------------------ node conditions

    def _node_conditions(self, policy: Policy, rule: Rule, now: float) -> None:
        cond = rule.condition
        assert cond is not None
        ident = (policy.name, rule.name)
        states = self.states.setdefault(ident, {})
        signal = f"condition:{cond.type}"
        firing: set[str] = set()
        for name, obj in self.nodes.objects.items():
            conditions = (obj.get("status") or {}).get("conditions") or ()
            if not any(c.get("type") == cond.type and c.get("status") == cond.status for c in conditions if isinstance(c, dict)):
                continue
            for s in self.state.queries.slices_for_node(name):
                if s.driver != rule.driver or s.node_name != name:
                    continue
                for view in s.devices:
                    if self._selected(rule, view):
                        key = device_key(view.id)
                        firing.add(key)
                        self.where.setdefault(key, (view.id, name))
        for key in sorted(firing):
            new = ladder.fire(states.get(key), signal, now, f"node condition {cond.type}={cond.status}")
            if new != states.get(key):
                states[key] = new
                self.last_signal[ident] = now
        for key, st in list(states.items()):
            if signal in st.active and key not in firing:
                resolved = ladder.resolve(st, signal, now)
                assert resolved is not None
                states[key] = resolved
                self.last_signal[ident] = now

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, now: float, only: set[tuple[str, str]] | None = None) -> float | None:
        """Decide every rule (or `only` these) at `now` and write what changed; the next instant to look again."""
        if not self.policies.objects and not self.written:
            # No policy and no rule of ours known: nothing to read back or write (a policy's arrival wakes the loop;
            # the rules of a policy deleted meanwhile go with it, by their owner reference).
            return None
        if not self.loaded:
            try:
                await self._load()
            except (SourceError, OSError, TimeoutError) as e:
                log.warning("could not read the health rules back", extra={"err": str(e)})
                return now + self.retry
        policies = self.valid_policies()
        times: list[float] = []
        for policy in policies:
            for rule in policy.rules:
                ident = (policy.name, rule.name)
                if only is not None and ident not in only:
                    continue
                if rule.kind == "driverTaint":
                    self._driver_taints(policy, rule, now)
                elif rule.kind == "nodeCondition":
                    if not self.nodes.synced:
                        continue  # no node list yet: a condition not seen is not a resolution
                    self._node_conditions(policy, rule, now)
                nxt = await self._reconcile_rule(policy, rule, now)
                if nxt is not None:
                    times.append(nxt)
            self.status.write(
                policy.name, self.status.render(policy, self.states, self.unmatched, self.waiting, self.last_signal), policy.uid
            )
        if only is None:
            await self._remove_orphans(policies)
            self._forget_devices_without_state()
        for name in sorted(self.policies.objects):
            err = self.policy_error(name)
            self.metrics.health_invalid_policy.labels(name).set(0 if err is None else 1)
            if err is not None:
                await self.status.invalid(name, self.policies.objects[name], err)
        self.failures.look()
        retry = self.failures.next_at(now)
        if retry is not None:
            times.append(retry)
        return min(times) if times else None

    def _fleet(self, rule: Rule) -> tuple[int, dict[str, int]]:
        """The rule's devices, cluster-wide and per node; recounted only when the tracker's state changed."""
        cached = self._fleet_entry(rule)
        return cached[1], cached[2]

    def _fleet_error(self, rule: Rule) -> tuple[int, DeviceID, str] | None:
        """The first selector (its index) that fails at run time on a device of the rule's driver, the device and the error."""
        return self._fleet_entry(rule)[3]

    def _fleet_entry(self, rule: Rule) -> tuple[int, int, dict[str, int], tuple[int, DeviceID, str] | None]:
        key = (rule.driver, rule.selectors)
        cached = self._fleets.get(key)
        if cached is None or cached[0] != self.state.generation:
            cached = self._fleets[key] = (self.state.generation, *self._count_fleet(rule))
        return cached

    def _count_fleet(self, rule: Rule) -> tuple[int, dict[str, int], tuple[int, DeviceID, str] | None]:
        total, per_node = 0, dict[str, int]()
        failed: tuple[int, DeviceID, str] | None = None
        for view in self.state.devices.values():
            if view.id.driver != rule.driver:
                continue
            try:
                if not self._matches(rule, view):
                    continue
            except SelectorFailed as e:
                if failed is None or device_key(view.id) < device_key(failed[1]):  # the same one on every replica
                    failed = (e.index, view.id, e.error)
                continue
            total += 1
            node = view.node_name or ""
            per_node[node] = per_node.get(node, 0) + 1
        return total, per_node, failed

    async def _reconcile_rule(self, policy: Policy, rule: Rule, now: float) -> float | None:
        ident = (policy.name, rule.name)
        states = self.states.get(ident, {})
        total, per_node = self._fleet(rule)

        def pinned(key: str) -> bool:
            r = self.state.rules.get((GROUP, rule_name(policy.name, rule.name, self.where[key][0])))
            return r is not None and r.meta.annotations.get(PIN, "").lower() == "true"

        d = ladder.decide(
            rule,
            states,
            now,
            node_of=lambda k: self.where[k][1],
            fleet=total,
            fleet_on=lambda n: per_node.get(n, 0),
            pinned=pinned,
        )
        self.states[ident] = d.states
        escalated = set(d.escalated)
        cleared = []
        for key in d.cleared:
            if self.failures.due(self._name(policy, rule, key), now):
                cleared.append((key, states[key]))
            else:
                d.states.setdefault(key, states[key])  # its delete failed before: still there, tried again when due
        todo = iter([*((key, None) for key, _ in cleared), *d.states.items()])
        before = dict(cleared)

        async def writer() -> None:
            """One of WRITERS: takes the next device, writes it if the API lacks it; a turn of the loop every WRITES_PER_TURN looks."""
            for looked, (key, st) in enumerate(todo, 1):
                if not looked % WRITES_PER_TURN:
                    await asyncio.sleep(0)
                if st is None:
                    await self._clear(policy, rule, key, before[key])
                elif not self._unchanged(policy, rule, key, st) and self.failures.due(self._name(policy, rule, key), now):
                    await self._put(policy, rule, key, st, key in escalated)

        await asyncio.gather(*(writer() for _ in range(min(WRITERS, len(d.states) + len(cleared)))))
        await self._guard(policy, rule, d.waiting)
        for effect in ("None", "NoSchedule", "NoExecute"):
            n = sum(1 for st in d.states.values() if ladder.effect_of(rule, st.step) == effect)
            self.metrics.health_devices.labels(policy.name, rule.name, effect).set(n)
        return d.next_at

    def _name(self, policy: Policy, rule: Rule, key: str) -> str:
        name = self._names.get((policy.name, rule.name, key))
        if name is None:
            name = self._names[(policy.name, rule.name, key)] = rule_name(policy.name, rule.name, self.where[key][0])
        return name

    def _unchanged(self, policy: Policy, rule: Rule, key: str, st: DeviceState) -> bool:
        """What the API has already: most devices of a rule at every pass (no task, no encoding)."""
        name = self._name(policy, rule, key)
        return self._same.get(name) == (st, self._taint(policy, rule, st)) and name in self.written

    @staticmethod
    def _taint(policy: Policy, rule: Rule, st: DeviceState) -> Taint:
        """The taint the device's rule carries: the policy's key and value, the rung's effect (None in dry run)."""
        return (rule.taint_key, rule.taint_value, "None" if policy.dry_run else ladder.effect_of(rule, st.step))

    async def _put(self, policy: Policy, rule: Rule, key: str, st: DeviceState, escalated: bool) -> None:
        name = self._name(policy, rule, key)
        taint = self._taint(policy, rule, st)
        effect = taint[2]
        did, node = self.where[key]
        annotation = encode_state(st, node)
        have = self.written.get(name)
        if have == (taint, annotation):
            self._same[name] = (st, taint)
            return
        try:
            if have is None:
                obj = rule_object(
                    policy=policy.name,
                    policy_uid=policy.uid,
                    rule=rule.name,
                    did=did,
                    node=node,
                    key=rule.taint_key,
                    value=rule.taint_value,
                    effect=effect,
                    state=st,
                )
                try:
                    await self.source.create_own_rule(obj)
                except Conflict:  # there already (written by an earlier leadership): brought to what it should be
                    await self._patch(name, taint, annotation)
                else:
                    self.status.event(policy, "Normal", "DeviceTainted", f"{did} ({node}): {rule.name} {effect} ({st.cause})")
            else:
                await self._patch(name, taint, annotation)
                if have[0][2] != effect:
                    self.status.event(
                        policy, "Normal", "DeviceEscalated", f"{did} ({node}): {rule.name} {have[0][2]} -> {effect} ({st.cause})"
                    )
        except (SourceError, OSError, TimeoutError) as e:
            self._write_failed(policy, name, e)
            return
        self.failures.succeeded(name)
        self.written[name] = (taint, annotation)
        self._same[name] = (st, taint)
        log.info("health rule written", extra={"object": name, "device": str(did), "effect": effect, "step": st.step})

    async def _patch(self, name: str, taint: Taint, annotation: str) -> None:
        key, value, effect = taint
        patch = {
            "metadata": {"annotations": {STATE: annotation}},
            "spec": {"taint": {"key": key, "value": value or None, "effect": effect}},
        }
        try:
            await self.source.patch_own_rule(name, patch)
        except NotFound:
            self.written.pop(name, None)
            raise

    async def _clear(self, policy: Policy, rule: Rule, key: str, st: DeviceState) -> None:
        did, node = self.where[key]
        name = rule_name(policy.name, rule.name, did)
        try:
            await self.source.delete_own_rule(name)
        except NotFound:
            pass
        except (SourceError, OSError, TimeoutError) as e:
            self._write_failed(policy, name, e)
            self.states.setdefault((policy.name, rule.name), {}).setdefault(key, st)  # still there: try again (unless fired anew)
            return
        self._forget_rule(name, (policy.name, rule.name, key))
        self.status.event(policy, "Normal", "DeviceCleared", f"{did} ({node}): {rule.name} cleared after {rule.clear_after:g}s resolved")

    def _write_failed(self, policy: Policy, name: str, err: BaseException) -> None:
        """A rule write failed: retried with backoff; its policy's status says so, and an Event once per streak."""
        f = self.failures.failed(name, policy.name, f"DeviceTaintRule {name}", err, self.clock.now())
        log.warning(
            "health rule write failed",
            extra={"object": name, "policy": policy.name, "err": str(err), "attempts": f.attempts, "retry_at": format_time(f.next_at)},
        )
        if f.attempts == 1:
            self.status.event(policy, "Warning", "RuleWriteFailed", f"DeviceTaintRule {name}: {err}")

    async def _guard(self, policy: Policy, rule: Rule, waiting: tuple[str, ...]) -> None:
        ident = (policy.name, rule.name)
        before = self.waiting.get(ident, ())
        self.waiting[ident] = waiting
        self.metrics.health_guard_waiting.labels(policy.name, rule.name).set(len(waiting))
        new = [k for k in waiting if k not in before]
        if new:
            self.metrics.health_guard_trips.labels(policy.name, rule.name).inc(len(new))
            self.status.event(
                policy,
                "Warning",
                "GuardTripped",
                f"{rule.name}: {len(waiting)} device(s) held at NoSchedule by the guard: {', '.join(waiting[:10])}",
            )
            log.warning(
                "health guard holds devices below NoExecute", extra={"policy": policy.name, "rule": rule.name, "devices": ",".join(waiting)}
            )

    async def _remove_orphans(self, policies: Iterable[Policy]) -> None:
        """Rules whose policy or policy rule is gone (the API server's GC does the same for a deleted policy)."""
        live = {(label_value(p.name), label_value(r.name)) for p in policies for r in p.rules}
        invalid = {label_value(n) for n in self.policies.objects if self.policy_error(n) is not None}
        for ident in list(self.states):
            lp, lr = label_value(ident[0]), label_value(ident[1])
            if (lp, lr) in live or lp in invalid:
                continue
            for key in list(self.states[ident]):
                did = self.where[key][0]
                name = rule_name(ident[0], ident[1], did)
                if not self.failures.due(name, self.clock.now()):
                    continue
                try:
                    await self.source.delete_own_rule(name)
                except NotFound:
                    pass
                except (SourceError, OSError, TimeoutError) as e:
                    f = self.failures.failed(name, ident[0], f"DeviceTaintRule {name}", e, self.clock.now())
                    log.warning("orphaned health rule delete failed", extra={"object": name, "err": str(e), "attempts": f.attempts})
                    continue
                self.failures.succeeded(name)
                self._forget_rule(name, (*ident, key))
                del self.states[ident][key]
            if not self.states[ident]:
                del self.states[ident]

    def _forget_rule(self, name: str, named: tuple[str, str, str]) -> None:
        """Our rule `name` (of (policy, rule, device key) `named`) is deleted: what is kept per rule goes with it."""
        self.written.pop(name, None)
        self._same.pop(name, None)
        self._names.pop(named, None)
        self.failures.forget(name)

    def _forget_devices_without_state(self) -> None:
        """A device no rule has a state for is no longer placed (`where`): devices come and go with alerts.

        Synchronous, at the end of a full pass: an alert applied meanwhile sets a
        device's place and its state together, so every device a state names keeps its place.
        """
        live = {key for states in self.states.values() for key in states}
        for key in [k for k in self.where if k not in live]:
            del self.where[key]
