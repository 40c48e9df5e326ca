"""What makes a DeviceTaintRule do less than its author meant, in the field's words.

The extender compiles a rule's CEL selectors with its own engine
(allocator/cel: syntax, type checks, the cost estimate against the 1,000,000
budget, the 10 KiB length); a selector that does not compile selects no
device, and one that fails at run time (a missing attribute) does not select
the device it fails for, each reported as a Warning Event on the rule. An
effect this version does not know taints but acts on nothing. One list for
the rule's `Ready` condition (`rule_status.py`) and for `kubectl dra`.
"""

from __future__ import annotations

from allocator.tolerations import unknown_effect
from allocator.types import DeviceTaintRule
from tracker import events as ev
from tracker.state import ClusterState

INVALID = "invalid: "  # the prefix of a problem that makes the rule select fewer devices than written


def rule_problems(state: ClusterState, rule: DeviceTaintRule) -> list[str]:
    """Why the rule selects no device (or not every device it names) or acts on none; [] for a sound rule.

    "invalid: ..." when a selector (its own, or its DeviceClass's) does not
    compile, fails at run time for a device, or the class does not exist.
    """
    problems = []
    sel = rule.selector
    if sel is not None:
        for i, expression in enumerate(sel.selectors):
            reason = compile_error(state, expression)
            if reason is not None:
                problems.append(f"{INVALID}spec.deviceSelector.selectors[{i}].cel.expression: {reason}; the rule taints no device")
        if sel.device_class_name is not None:
            device_class = state.classes.get(sel.device_class_name)
            if device_class is None:
                problems.append(
                    f"{INVALID}spec.deviceSelector.deviceClassName: DeviceClass {sel.device_class_name} not found; the rule taints no device"
                )
            else:
                for i, expression in enumerate(device_class.selectors):
                    reason = compile_error(state, expression)
                    if reason is not None:
                        problems.append(
                            f"{INVALID}DeviceClass {sel.device_class_name} spec.selectors[{i}]: {reason}; the rule taints no device"
                        )
        at_run_time = state.problem_of(ev.DEVICE_TAINT_RULE, rule.group, rule.meta.name)
        if at_run_time is not None and not problems:
            problems.append(f"{INVALID}spec.deviceSelector: {at_run_time}; the rule does not taint a device its selector fails for")
    plainly = unknown_effect(rule.taint.effect)
    if plainly is not None:
        problems.append(f"spec.taint.effect: {plainly}")
    return problems


def compile_error(state: ClusterState, expression: str) -> str | None:
    try:
        state.cel.compile(expression)
    except ValueError as e:  # CelCompileError
        return f"{short(expression)!r} does not compile: {getattr(e, 'reason', e)}"
    return None


def short(text: str) -> str:
    return text if len(text) <= 120 else text[:120] + "..."
