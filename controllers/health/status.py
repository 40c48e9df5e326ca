"""What a DeviceHealthPolicy shows: its status subresource and its Events.

A condition keeps its lastTransitionTime while its status holds, across
restarts and leader changes: the time is read back from the policy object
the informer holds, as upstream's meta.SetStatusCondition does. A policy's
status is written only when it changed, by one task per policy, off the
delivery's path (a failure is retried by the controller's next pass); an
invalid policy is warned about once per generation; Events are best effort.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controllers.health import ladder
from controllers.health.failures import WriteFailures
from controllers.health.ladder import DeviceState
from controllers.health.policy import DEFAULT_GUARD, GROUP, KIND, VERSION, Policy, PolicyError
from tracker.clock import Clock, format_time
from tracker.source import EventWriter, NotFound, PolicyStatusWriter, SourceError

log = logging.getLogger("dra_extender.health")


class Writes(PolicyStatusWriter, EventWriter, Protocol):
    """What the policies' status needs of the API server (the tracker's writes): the status subresource and Events."""


@dataclass
class Unmatched:
    """A rule's alerts that named no device of it: how many, and the last one (shown in the status)."""

    count: int = 0
    last: dict[str, Any] = field(default_factory=dict)


class PolicyStatus:
    """The policies' status subresources and Events, as the leader writes them."""

    def __init__(
        self,
        source: Writes,
        clock: Clock,
        current: Callable[[str], Mapping[str, Any] | None] = lambda _name: None,
        failures: WriteFailures | None = None,
    ) -> None:
        self.source = source
        self.clock = clock
        self.failures = failures or WriteFailures(1.0)
        self.current = current  # policy name -> the object as the informer last saw it
        self.written: dict[str, dict[str, Any]] = {}  # policy -> the status the API has
        # (policy, condition) -> (status, time) this leadership wrote: the informer may not have it back yet.
        self._transitions: dict[tuple[str, str], tuple[str, str]] = {}
        self._warned: set[tuple[str, int, str]] = set()
        self._events: set[asyncio.Task[None]] = set()
        self._pending: dict[str, dict[str, Any]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def event(self, policy: Policy, type_: str, reason: str, message: str) -> None:
        """Best effort and off the delivery's path: a failed Event is logged by the writer, never retried."""
        self._task(self._post(policy.name, policy.uid, type_, reason, message))

    def _task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    async def _post(self, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        await self.source.create_event(
            {
                "type": type_,
                "reason": reason,
                "message": message,
                "involvedObject": {"kind": KIND, "name": name, "uid": uid, "apiVersion": f"{GROUP}/{VERSION}"},
            }
        )

    async def invalid(self, name: str, obj: Mapping[str, Any], err: PolicyError) -> None:
        """Warn about an invalid policy (once per generation and error) and say so in its status."""
        gen = int(obj["metadata"].get("generation") or 0)
        if (name, gen, str(err)) not in self._warned:
            self._warned.add((name, gen, str(err)))
            log.warning("invalid DeviceHealthPolicy", extra={"object": name, "field": err.field, "err": str(err)})
            await self.source.create_event(
                {
                    "type": "Warning",
                    "reason": "InvalidPolicy",
                    "message": str(err),
                    "involvedObject": {
                        "kind": KIND,
                        "name": name,
                        "uid": obj["metadata"].get("uid", ""),
                        "apiVersion": f"{GROUP}/{VERSION}",
                    },
                }
            )
        if self.failures.due(_status_key(name), self.clock.now()):
            await self._patch(
                name,
                {"observedGeneration": gen, "conditions": [self._condition(name, "Ready", "False", "Invalid", str(err))]},
                obj["metadata"].get("uid", ""),
            )

    def forget(self) -> None:
        """Leadership ended: what this process wrote may be overwritten by the next leader; read the objects back."""
        self.written.clear()
        self._transitions.clear()

    def _observed(self, policy: str, type_: str) -> tuple[str, str] | None:
        """The condition's (status, lastTransitionTime) on the policy object, if it has one."""
        obj = self.current(policy)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
        for c in conditions:
            if isinstance(c, dict) and c.get("type") == type_ and isinstance(c.get("lastTransitionTime"), str):
                return str(c.get("status")), c["lastTransitionTime"]
        return None

    def _condition(self, policy: str, type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
        prev = self._transitions.get((policy, type_)) or self._observed(policy, type_)
        since = prev[1] if prev is not None and prev[0] == status and prev[1] else format_time(self.clock.now())
        self._transitions[(policy, type_)] = (status, since)
        return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}

    def render(
        self,
        policy: Policy,
        states: Mapping[tuple[str, str], Mapping[str, DeviceState]],
        unmatched: Mapping[tuple[str, str], Unmatched],
        waiting: Mapping[tuple[str, str], tuple[str, ...]],
        last_signal: Mapping[tuple[str, str], float],
    ) -> dict[str, Any]:
        """The policy's status from the controller's memory (per rule: devices by effect, waiting, unmatched alerts)."""
        rules = []
        waiting_all: list[str] = []
        for rule in policy.rules:
            ident = (policy.name, rule.name)
            rule_states = states.get(ident, {})
            steps: dict[str, int] = {"None": 0, "NoSchedule": 0, "NoExecute": 0}  # all three: a merge patch keeps absent keys
            for st in rule_states.values():
                e = ladder.effect_of(rule, st.step)
                steps[e] = steps.get(e, 0) + 1
            u = unmatched.get(ident, Unmatched())
            rule_waiting = list(waiting.get(ident, ()))
            waiting_all += rule_waiting
            entry: dict[str, Any] = {"name": rule.name, "devices": steps, "waiting": rule_waiting, "unmatchedAlerts": u.count}
            if u.last:
                entry["lastUnmatched"] = u.last
            if ident in last_signal:
                entry["lastSignal"] = format_time(last_signal[ident])
            guard_in_force = rule.guard_status()
            if guard_in_force is not None:
                entry["guard"] = guard_in_force
            rules.append(entry)
        guard = (
            self._condition(
                policy.name,
                "GuardTripped",
                "True",
                "DevicesWaiting",
                f"{len(waiting_all)} device(s) held below NoExecute: {', '.join(waiting_all[:20])}",
            )
            if waiting_all
            else self._condition(policy.name, "GuardTripped", "False", "WithinLimits", "No device is held by the guard.")
        )
        ready = self._condition(policy.name, "Ready", "True", "DryRun" if policy.dry_run else "Enforcing", f"mode {policy.mode}")
        conditions = [ready, guard, self._guarded(policy), self._written(policy)]
        # The sums over the rules, for `kubectl get`'s columns (a column's JSONPath shows one value, not a list).
        devices = {e: sum(r["devices"].get(e, 0) for r in rules) for e in ("None", "NoSchedule", "NoExecute")}
        unmatched_alerts = sum(r["unmatchedAlerts"] for r in rules)
        return {
            "observedGeneration": policy.generation,
            "conditions": conditions,
            "devices": devices,
            "unmatchedAlerts": unmatched_alerts,
            "rules": rules,
        }

    def _guarded(self, policy: Policy) -> dict[str, Any]:
        """Guarded: False while a rule that can reach NoExecute has a guard with no limit (a Warning Event once per generation)."""
        unlimited = [r.name for r in policy.rules if r.guard_origin == "unlimited"]
        defaulted = [r.name for r in policy.rules if r.guard_origin == "default"]
        if unlimited:
            message = (
                f"rule(s) {', '.join(unlimited)} set a guard with no limit: a mass failure can put every device "
                "they cover at NoExecute at once"
            )
            if (policy.name, policy.generation, "unlimited") not in self._warned:
                self._warned.add((policy.name, policy.generation, "unlimited"))
                log.warning("DeviceHealthPolicy guard sets no limit", extra={"object": policy.name, "rules": ",".join(unlimited)})
                self.event(policy, "Warning", "GuardUnlimited", message)
            return self._condition(policy.name, "Guarded", "False", "GuardUnlimited", message)
        if defaulted:
            return self._condition(
                policy.name,
                "Guarded",
                "True",
                "DefaultGuard",
                f"rule(s) {', '.join(defaulted)} set no guard and have the default: {DEFAULT_GUARD.describe()}",
            )
        if all(r.guard_origin == "unused" for r in policy.rules):
            return self._condition(policy.name, "Guarded", "True", "NoNoExecute", "No rule of the policy reaches NoExecute.")
        return self._condition(policy.name, "Guarded", "True", "PolicyGuard", "Every rule that can reach NoExecute has its own guard.")

    def _written(self, policy: Policy) -> dict[str, Any]:
        """RulesWritten: False while the API server refuses a write of one of the policy's rules (retried with backoff)."""
        failed = [f for f in self.failures.of_policy(policy.name) if f.what != "status"]
        if not failed:
            return self._condition(policy.name, "RulesWritten", "True", "Written", "Every rule of the policy is written.")
        first = failed[0]
        return self._condition(
            policy.name,
            "RulesWritten",
            "False",
            "RuleWriteFailed",
            f"{len(failed)} write(s) failing, retried with backoff; {first.what}: {first.error}",
        )

    def write(self, name: str, status: dict[str, Any], uid: str = "") -> None:
        """Off the delivery's path: the latest status is written by one task per policy (a failure is retried by a later pass)."""
        if self.written.get(name) == status or not self.failures.due(_status_key(name), self.clock.now()):
            return
        self._pending[name] = status
        if name not in self._tasks:
            self._tasks[name] = asyncio.create_task(self._flush(name, uid))

    async def _flush(self, name: str, uid: str) -> None:
        try:
            while name in self._pending:
                await self._patch(name, self._pending.pop(name), uid)
        finally:
            self._tasks.pop(name, None)

    async def _patch(self, name: str, status: dict[str, Any], uid: str) -> None:
        """Patch the status subresource; a failure is logged, told once per streak in an Event, and retried with backoff."""
        if self.written.get(name) == status:
            return
        key = _status_key(name)
        try:
            await self.source.update_policy_status(name, status)
        except NotFound:
            self.failures.forget(key)
            return
        except (SourceError, OSError, TimeoutError) as e:
            f = self.failures.failed(key, name, "status", e, self.clock.now())
            log.warning("policy status write failed", extra={"object": name, "err": str(e), "attempts": f.attempts})
            if f.attempts == 1:
                self._task(self._post(name, uid, "Warning", "StatusWriteFailed", f"status: {e}"))
            return
        self.failures.succeeded(key)
        self.written[name] = status


def _status_key(name: str) -> str:
    """The failure key of a policy's status write (rules are keyed by their own names, which hold dots)."""
    return f"{KIND}/{name}/status"
