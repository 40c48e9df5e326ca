"""The ladder, the hold-down and the guard: a pure state machine over injected time.

Per (policy, rule, device) a `DeviceState` records when the device was first
seen failing, which signals fire now, when each new firing happened, the
rung reached, and when everything resolved. `fire`/`resolve` apply one
signal; `decide` takes every device of one rule at one instant and says the
rung each holds, which are cleared, which wait at the guard, and when to
look again. No I/O, no clock of its own: tables and hypothesis drive it.

Semantics (docs/health.md):
- a step is reached once the device has been failing for `after` seconds
  (from the first firing of the episode) or has had `occurrences` new
  firings within `within`; rungs only go up during an episode;
- a device fires while any of its signals does; past `ACTIVE_KEPT` signals at
  once the rest are only counted (`overflow`), and only the newest
  `OCCURRENCES_KEPT` firings are kept, so a state stays bounded whatever the
  alert traffic (docs/health.md, Bounded state);
- while every signal is resolved nothing escalates; the device is cleared
  `clear_after` seconds after the last signal resolved, unless pinned;
  firing again before that resumes the ladder at the rung it held;
- the guard: a device enters NoExecute only while the rule holds fewer than
  its limits at NoExecute (absolute, percent of the fleet rounded down, as
  a Deployment's maxUnavailable; cluster-wide and per node) and fewer than
  `max_new_per_minute` entered in the last 60 s (a rule that can reach
  NoExecute and sets no guard has policy.DEFAULT_GUARD); otherwise it stays at the
  strongest rung below NoExecute and is reported as waiting. Devices already
  at NoExecute keep it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from controllers.health.policy import Guard, Rule

RATE_WINDOW = 60.0
KEEP = 86400.0  # occurrences older than this are forgotten
# The CRD's maximum for a step's `occurrences`: keeping this many newest firings answers every
# step's "`occurrences` new firings within `within`" exactly (the count reaches the threshold
# exactly when the threshold-th newest firing is inside the window).
OCCURRENCES_KEPT = 1000
# Signals tracked one by one; past this many at once a device's further signals are only counted.
# With OCCURRENCES_KEPT this keeps a state's annotation under 32 KiB (tests/health/test_bounded_state.py).
ACTIVE_KEPT = 128
CAUSE_KEPT = 256  # characters of the cause (built from alert labels) kept


@dataclass(frozen=True, slots=True)
class DeviceState:
    first_seen: float
    active: frozenset[str] = frozenset()  # signal keys firing now (alert fingerprints, taint/condition keys), at most ACTIVE_KEPT
    occurrences: tuple[float, ...] = ()  # when each new firing came: the newest OCCURRENCES_KEPT of the last KEEP seconds
    step: int = -1  # the rung held (-1: none yet)
    resolved_at: float | None = None  # every signal resolved since then (None: something fires)
    no_execute_at: float | None = None  # when NoExecute was applied (the guard's rate)
    cause: str = ""  # the last firing signal, for people
    last_signal: float = 0.0
    overflow: int = 0  # firings of signals not tracked (the set was full), net of resolutions of untracked signals
    retired: frozenset[str] = frozenset()  # tracked signals resolved while overflow > 0: a repeat of their resolution is known

    @property
    def firing(self) -> bool:
        return bool(self.active) or self.overflow > 0


def apply(state: DeviceState | None, changes: Sequence[tuple[str, str | None]], now: float) -> tuple[DeviceState | None, list[bool]]:
    """Signals of one device at one instant, in order: (key, cause) fires `key`, (key, None) resolves it.

    One new state for all of them, in time linear in `changes` (a delivery of
    20,000 alerts for one device copies the state once, not per alert), and
    for each change whether it changed anything (a repeat or an unknown
    resolution does not). Nothing changed: the same state object.
    """
    done = [False] * len(changes)
    if state is None and all(cause is None for _, cause in changes):
        return None, done
    active = set(state.active) if state is not None else set()
    retired = set(state.retired) if state is not None else set()
    overflow = state.overflow if state is not None else 0
    fired: list[float] = []
    cause_now: str | None = None
    resolved_at = state.resolved_at if state is not None else None
    for i, (key, cause) in enumerate(changes):
        if cause is not None:
            if key in active:
                continue  # Alertmanager's repeat_interval or a retry: the same firing, nothing changes
            retired.discard(key)
            if len(active) + len(retired) < ACTIVE_KEPT:
                active.add(key)
            else:
                overflow += 1  # untracked: a repeat of it cannot be told from a new one (fail closed: counted)
            fired.append(now)
            cause_now, resolved_at = cause[:CAUSE_KEPT], None
        else:
            if key in active:
                active.discard(key)
                if overflow:
                    retired.add(key)
            elif overflow and key not in retired:
                overflow -= 1  # one of the untracked signals
                if not overflow:
                    retired.clear()
            else:
                continue  # unknown, or resolved already
            if not active and not overflow:
                resolved_at = now
        done[i] = True
    if not any(done):
        return state, done
    base = state if state is not None else DeviceState(first_seen=now)
    occurrences = base.occurrences
    if fired:
        occurrences = (*(t for t in occurrences if t > now - KEEP), *fired)[-OCCURRENCES_KEPT:]
    new = replace(
        base,
        active=frozenset(active),
        retired=frozenset(retired),
        overflow=overflow,
        occurrences=occurrences,
        resolved_at=resolved_at,
        cause=cause_now if cause_now is not None else base.cause,
        last_signal=now,
    )
    return new, done


def fire(state: DeviceState | None, key: str, now: float, cause: str) -> DeviceState:
    """Signal `key` fires: a new occurrence, unless it is firing already (then nothing changes)."""
    new, _ = apply(state, ((key, cause),), now)
    assert new is not None
    return new


def resolve(state: DeviceState | None, key: str, now: float) -> DeviceState | None:
    """Signal `key` resolved; the hold-down starts when the last one does."""
    return apply(state, ((key, None),), now)[0]


def reached(rule: Rule, state: DeviceState, now: float) -> int:
    """The strongest rung whose condition holds now (never below the rung held)."""
    best = state.step
    if not state.firing:
        return best
    for i, step in enumerate(rule.steps):
        if i <= best:
            continue
        by_time = step.after is not None and now - state.first_seen >= step.after
        by_count = step.occurrences is not None and sum(1 for t in state.occurrences if t > now - step.within) >= step.occurrences
        if by_time or by_count:
            best = i
    return best


def effect_of(rule: Rule, step: int) -> str:
    """The rung's effect; a rung the policy no longer has reads as its strongest one."""
    return rule.steps[min(step, len(rule.steps) - 1)].effect if step >= 0 else "None"


def _below_no_execute(rule: Rule, step: int) -> int:
    """The strongest rung at or below `step` that is not NoExecute."""
    while step >= 0 and rule.steps[step].effect == "NoExecute":
        step -= 1
    return step


def limit(count: int | None, percent: float | None, fleet: int) -> float:
    """The tighter of an absolute and a percent limit (percent of `fleet`, rounded down); inf when neither is set."""
    out = math.inf
    if count is not None:
        out = count
    if percent is not None:
        out = min(out, math.floor(fleet * percent / 100))
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    states: dict[str, DeviceState]  # key -> state after this instant (cleared devices removed)
    cleared: tuple[str, ...]
    waiting: tuple[str, ...]  # want NoExecute, held below by the guard
    escalated: tuple[str, ...]  # rung went up at this instant
    next_at: float | None  # when something can change without a new signal


def decide(
    rule: Rule,
    states: Mapping[str, DeviceState],
    now: float,
    *,
    node_of: Callable[[str], str],
    fleet: int,
    fleet_on: Callable[[str], int],
    pinned: Callable[[str], bool] = lambda _k: False,
) -> Decision:
    """Every device of one rule at `now`: rungs, clears, the guard, and the next instant worth waking for."""
    out: dict[str, DeviceState] = {}
    cleared: list[str] = []
    times: list[float] = []
    wanted: dict[str, int] = {}
    top = len(rule.steps) - 1
    for key, st in states.items():
        if st.step > top:
            st = replace(st, step=top)  # the policy lost rungs since: the strongest one left
        if not st.firing and st.resolved_at is not None:
            due = st.resolved_at + rule.clear_after
            if now >= due and not pinned(key):
                cleared.append(key)
                continue
            if now < due:
                times.append(due)
        wanted[key] = reached(rule, st, now)
        if st.firing:
            times.extend(st.first_seen + s.after for s in rule.steps[wanted[key] + 1 :] if s.after is not None)
        out[key] = st
    guard: Guard = rule.guard
    total_limit = max(limit(guard.max_no_execute, guard.max_no_execute_percent, fleet), guard.min_no_execute)
    held_total = 0
    held_node: dict[str, int] = {}
    recent: list[float] = []
    for key, st in out.items():
        if effect_of(rule, st.step) == "NoExecute":
            held_total += 1
            held_node[node_of(key)] = held_node.get(node_of(key), 0) + 1
            if st.no_execute_at is not None and st.no_execute_at > now - RATE_WINDOW:
                recent.append(st.no_execute_at)
    rate_left = math.inf if guard.max_new_per_minute is None else guard.max_new_per_minute - len(recent)
    waiting: list[str] = []
    escalated: list[str] = []
    # Oldest failure first, then by name: the order is the same on every replica and after a restart.
    rising = [k for k, want in wanted.items() if want > out[k].step]
    for key in sorted(rising, key=lambda k: (out[k].first_seen, k)):
        st, want = out[key], wanted[key]
        if effect_of(rule, want) == "NoExecute" and effect_of(rule, st.step) != "NoExecute":
            node = node_of(key)
            node_limit = limit(guard.max_per_node, guard.max_per_node_percent, fleet_on(node))
            if held_total < total_limit and held_node.get(node, 0) < node_limit and rate_left > 0:
                held_total += 1
                held_node[node] = held_node.get(node, 0) + 1
                rate_left -= 1
                recent.append(now)
                out[key] = replace(st, step=want, no_execute_at=now)
                escalated.append(key)
                continue
            waiting.append(key)
            want = _below_no_execute(rule, want)
            if want <= st.step:
                continue
        out[key] = replace(out[key], step=want)
        escalated.append(key)
    if waiting and rate_left <= 0 and recent:
        times.append(min(recent) + RATE_WINDOW)  # a token comes back
    future = [t for t in times if t > now]
    return Decision(out, tuple(cleared), tuple(waiting), tuple(escalated), min(future) if future else None)
