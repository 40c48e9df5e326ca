"""The pure ladder: tables of single transitions, and a property over any order of signals and restarts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.types import DeviceID
from controllers.health import ladder
from controllers.health.ladder import DeviceState, decide, effect_of
from controllers.health.policy import parse_policy
from controllers.health.rules import decode, rule_object

T0 = 1_000_000.0


def make_rule(**over: Any) -> Any:
    rule: dict[str, Any] = {
        "name": "xid",
        "signal": {"alert": {"matchLabels": {"alertname": "X"}}},
        "match": {"nodeLabel": "Hostname", "deviceLabel": "gpu"},
        "devices": {"driver": "gpu.example.com"},
        "taint": {"key": "health.example.com/xid"},
        "steps": [{"effect": "NoSchedule"}, {"effect": "NoExecute", "after": "5m", "occurrences": 3, "within": "1h"}],
        "clearAfter": "15m",
    }
    rule.update(over)
    return parse_policy({"metadata": {"name": "p"}, "spec": {"rules": [rule]}}).rules[0]


RULE = make_rule()


def run(
    states: dict[str, DeviceState], now: float, rule: Any = RULE, fleet: int = 100, pinned: frozenset[str] = frozenset()
) -> ladder.Decision:
    return decide(rule, states, now, node_of=lambda k: k.split("/")[0], fleet=fleet, fleet_on=lambda n: 8, pinned=lambda k: k in pinned)


@dataclass(frozen=True)
class Row:
    name: str
    events: tuple[tuple[float, str, str], ...]  # (seconds after T0, fire|resolve, signal key)
    at: float
    step_effect: str | None  # None: cleared


ROWS = [
    Row("first firing: NoSchedule at once", ((0, "fire", "a"),), 0, "NoSchedule"),
    Row("not yet 5 minutes", ((0, "fire", "a"),), 299, "NoSchedule"),
    Row("5 minutes firing: NoExecute", ((0, "fire", "a"),), 300, "NoExecute"),
    Row("repeat deliveries are not occurrences", ((0, "fire", "a"), (10, "fire", "a"), (20, "fire", "a")), 30, "NoSchedule"),
    Row(
        "3 occurrences within the hour: NoExecute",
        ((0, "fire", "a"), (10, "resolve", "a"), (20, "fire", "b"), (30, "resolve", "b"), (40, "fire", "c")),
        41,
        "NoExecute",
    ),
    Row("resolved: no escalation during the hold-down", ((0, "fire", "a"), (60, "resolve", "a")), 400, "NoSchedule"),
    Row("resolved for the hold-down: cleared", ((0, "fire", "a"), (60, "resolve", "a")), 60 + 900, None),
    Row("one of two signals resolved: not cleared", ((0, "fire", "a"), (1, "fire", "b"), (60, "resolve", "a")), 2000, "NoExecute"),
    Row("resolve of an unknown signal: nothing", ((0, "fire", "a"), (5, "resolve", "zz")), 10, "NoSchedule"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_one_device(row: Row) -> None:
    state: DeviceState | None = None
    states: dict[str, DeviceState] = {}
    for t, op, key in row.events:
        state = ladder.fire(state, key, T0 + t, "c") if op == "fire" else ladder.resolve(state, key, T0 + t)
        assert state is not None
        states = {"n/gpu-0": state}
        states = run(states, T0 + t).states
        state = states.get("n/gpu-0")
    d = run(states, T0 + row.at)
    got = d.states.get("n/gpu-0")
    assert (effect_of(RULE, got.step) if got else None) == row.step_effect


def test_firing_again_within_the_hold_down_resumes_at_the_rung_held() -> None:
    s = ladder.fire(None, "a", T0, "c")
    s = run({"d": s}, T0 + 300).states["d"]
    assert effect_of(RULE, s.step) == "NoExecute"
    r = ladder.resolve(s, "a", T0 + 310)
    assert r is not None
    s = run({"d": r}, T0 + 600).states["d"]
    s = ladder.fire(s, "a", T0 + 601, "c")
    assert effect_of(RULE, run({"d": s}, T0 + 601).states["d"].step) == "NoExecute"


def test_a_pinned_device_is_not_cleared() -> None:
    s = ladder.resolve(ladder.fire(None, "a", T0, "c"), "a", T0 + 1)
    assert s is not None
    assert "n/gpu-0" in run({"n/gpu-0": s}, T0 + 5000, pinned=frozenset({"n/gpu-0"})).states


@dataclass(frozen=True)
class GuardRow:
    name: str
    guard: dict[str, Any]
    devices: tuple[str, ...]
    fleet: int
    at_no_execute: int


GUARD_ROWS = [
    GuardRow("absolute 2 of 3", {"maxNoExecute": 2}, ("a/0", "b/0", "c/0"), 100, 2),
    GuardRow("2 % of 100", {"maxNoExecutePercent": 2}, ("a/0", "b/0", "c/0"), 100, 2),
    GuardRow("2 % of 40 rounds down to 0", {"maxNoExecutePercent": 2}, ("a/0", "b/0"), 40, 0),
    GuardRow("per node 1", {"maxNoExecutePerNode": 1}, ("a/0", "a/1", "b/0"), 100, 2),
    GuardRow("per node 25 % of 8", {"maxNoExecutePerNodePercent": 25}, ("a/0", "a/1", "a/2"), 100, 2),
    GuardRow("1 new per minute", {"maxNewNoExecutePerMinute": 1}, ("a/0", "b/0", "c/0"), 100, 1),
    GuardRow("tighter of absolute and percent", {"maxNoExecute": 5, "maxNoExecutePercent": 1}, ("a/0", "b/0"), 100, 1),
]


@pytest.mark.parametrize("row", GUARD_ROWS, ids=[r.name for r in GUARD_ROWS])
def test_the_guard(row: GuardRow) -> None:
    rule = make_rule(guard=row.guard)
    states = {k: ladder.fire(None, "s", T0 + i, "c") for i, k in enumerate(row.devices)}
    d = run(states, T0 + 400, rule=rule, fleet=row.fleet)
    held = [k for k, s in d.states.items() if effect_of(rule, s.step) == "NoExecute"]
    assert len(held) == row.at_no_execute
    assert sorted(d.waiting) == sorted(k for k in row.devices if k not in held)
    for k in d.waiting:
        assert effect_of(rule, d.states[k].step) == "NoSchedule"


def test_the_rate_guard_lets_the_next_one_in_a_minute_later() -> None:
    rule = make_rule(guard={"maxNewNoExecutePerMinute": 1})
    states = {k: ladder.fire(None, "s", T0, "c") for k in ("a/0", "b/0")}
    d = run(states, T0 + 300, rule=rule)
    assert len(d.waiting) == 1 and d.next_at == T0 + 360
    d = run(d.states, T0 + 360, rule=rule)
    assert d.waiting == () and all(effect_of(rule, s.step) == "NoExecute" for s in d.states.values())


# ---------------------------------------------------------------------- the property

DEVICES = ("a/0", "a/1", "b/0", "b/1", "c/0")
GUARD = {"maxNoExecute": 2, "maxNoExecutePerNode": 1, "maxNewNoExecutePerMinute": 1}
PROP_RULE = make_rule(guard=GUARD, clearAfter="10m")

step = st.one_of(
    st.tuples(st.just("fire"), st.sampled_from(DEVICES), st.sampled_from(("x", "y"))),
    st.tuples(st.just("resolve"), st.sampled_from(DEVICES), st.sampled_from(("x", "y"))),
    st.tuples(st.just("wait"), st.integers(1, 900), st.just("")),
    st.tuples(st.just("restart"), st.just(""), st.just("")),
)


def restart(states: dict[str, DeviceState]) -> dict[str, DeviceState]:
    """What a new process reads back: each state through its DeviceTaintRule's annotation."""
    out = {}
    for key, s in states.items():
        node, dev = key.split("/")
        obj = rule_object(
            policy="p",
            policy_uid="u",
            rule="xid",
            did=DeviceID("gpu.example.com", node, dev),
            node=node,
            key="k",
            value="",
            effect="None",
            state=s,
        )
        owned = decode(obj)
        assert owned is not None
        out[f"{owned.did.pool}/{owned.did.device}"] = owned.state
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
def test_any_order_of_signals_and_restarts_keeps_the_guard_and_clears_what_resolved(steps: list[tuple[str, Any, str]]) -> None:
    now = T0
    states: dict[str, DeviceState] = {}
    entered: list[float] = []
    resolved_since: dict[str, float] = {}
    for op, arg, sig in steps:
        if op == "fire":
            states[arg] = ladder.fire(states.get(arg), sig, now, "c")
            resolved_since.pop(arg, None)
        elif op == "resolve":
            s = ladder.resolve(states.get(arg), sig, now)
            if s is not None:
                states[arg] = s
                if not s.firing:
                    resolved_since.setdefault(arg, now)
        elif op == "wait":
            end = now + arg
            while True:  # the controller wakes at every deadline on the way
                d = run(states, now, rule=PROP_RULE)
                before = {k for k, s in states.items() if effect_of(PROP_RULE, s.step) == "NoExecute"}
                states = d.states
                entered += [now for k, s in states.items() if effect_of(PROP_RULE, s.step) == "NoExecute" and k not in before]
                if d.next_at is None or d.next_at > end:
                    break
                now = d.next_at
            now = end
        else:
            states = restart(states)
        d = run(states, now, rule=PROP_RULE)
        before = {k for k, s in states.items() if effect_of(PROP_RULE, s.step) == "NoExecute"}
        states = d.states
        entered += [now for k, s in states.items() if effect_of(PROP_RULE, s.step) == "NoExecute" and k not in before]
        at_ne = [k for k, s in states.items() if effect_of(PROP_RULE, s.step) == "NoExecute"]
        assert len(at_ne) <= GUARD["maxNoExecute"]
        for node in "abc":
            assert sum(1 for k in at_ne if k.startswith(node)) <= GUARD["maxNoExecutePerNode"]
        assert sum(1 for t in entered if t > now - 60) <= GUARD["maxNewNoExecutePerMinute"]
        for key, since in resolved_since.items():
            if now - since >= 600:
                assert key not in states, f"{key} resolved since {since - T0}, still held at {now - T0}"
