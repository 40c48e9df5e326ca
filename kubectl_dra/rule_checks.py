"""What makes a DeviceTaintRule do less than its author meant, said before it bites.

The extender compiles a rule's CEL selectors with its own engine
(allocator/cel: syntax, type checks, the cost estimate against the 1,000,000
budget, the 10 KiB length) and a selector that does not compile selects no
device, reported only as a Warning Event on the rule. An effect this version
does not know taints but acts on nothing. `kubectl dra taint` refuses the
first before anything is written; `devices` and `explain-rule` name both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from allocator.allocation import SelectorEngine
from allocator.cel import CelEnvironment
from allocator.tolerations import unknown_effect
from allocator.types import DeviceTaintRule
from tracker.state import ClusterState


def selector_errors(expressions: Sequence[str], cel: SelectorEngine[Any] | None = None) -> list[str]:
    """One line per `--selector` the extender's engine would refuse, naming the flag, the expression and why."""
    engine = cel if cel is not None else CelEnvironment()
    errors = []
    for i, expression in enumerate(expressions):
        try:
            engine.compile(expression)
        except ValueError as e:  # CelCompileError
            errors.append(f"--selector #{i + 1} {_short(expression)!r} does not compile: {getattr(e, 'reason', e)}")
    return errors


def rule_problems(state: ClusterState, rule: DeviceTaintRule) -> list[str]:
    """Why the rule selects no device or acts on none, in the field's words; [] for a sound rule.

    "invalid: ..." when a selector (its own, or its DeviceClass's) does not
    compile or the class does not exist: it then taints no device.
    """
    problems = []
    sel = rule.selector
    if sel is not None:
        for i, expression in enumerate(sel.selectors):
            reason = _compile_error(state, expression)
            if reason is not None:
                problems.append(f"invalid: spec.deviceSelector.selectors[{i}].cel.expression: {reason}; the rule taints no device")
        if sel.device_class_name is not None:
            device_class = state.classes.get(sel.device_class_name)
            if device_class is None:
                problems.append(
                    f"invalid: spec.deviceSelector.deviceClassName: DeviceClass {sel.device_class_name} not found; the rule taints no device"
                )
            else:
                for i, expression in enumerate(device_class.selectors):
                    reason = _compile_error(state, expression)
                    if reason is not None:
                        problems.append(
                            f"invalid: DeviceClass {sel.device_class_name} spec.selectors[{i}]: {reason}; the rule taints no device"
                        )
    plainly = unknown_effect(rule.taint.effect)
    if plainly is not None:
        problems.append(f"spec.taint.effect: {plainly}")
    return problems


def problem_rules(state: ClusterState, sources: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Rule source -> its problems, for every rule (or those named by `sources`) that has some."""
    wanted = set(sources) if sources is not None else None
    out = {}
    for rule in state.rules.values():
        if wanted is not None and rule.source not in wanted:
            continue
        problems = rule_problems(state, rule)
        if problems:
            out[rule.source] = problems
    return dict(sorted(out.items()))


def _compile_error(state: ClusterState, expression: str) -> str | None:
    try:
        state.cel.compile(expression)
    except ValueError as e:  # CelCompileError
        return f"{_short(expression)!r} does not compile: {getattr(e, 'reason', e)}"
    return None


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:120] + "..."
