"""What makes a DeviceTaintRule do less than its author meant, said before it bites.

The checks themselves are the controller's (controllers/eviction/rule_checks.py,
which also feed the rule's `Ready` condition). `kubectl dra taint` refuses a
`--selector` that does not compile before anything is written; `devices` and
`explain-rule` name every problem of the rules they show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from allocator.allocation import SelectorEngine
from allocator.cel import CelEnvironment
from controllers.eviction.rule_checks import rule_problems, short
from tracker.state import ClusterState


def selector_errors(expressions: Sequence[str], cel: SelectorEngine[Any] | None = None) -> list[str]:
    """One line per `--selector` the extender's engine would refuse, naming the flag, the expression and why."""
    engine = cel if cel is not None else CelEnvironment()
    errors = []
    for i, expression in enumerate(expressions):
        try:
            engine.compile(expression)
        except ValueError as e:  # CelCompileError
            errors.append(f"--selector #{i + 1} {short(expression)!r} does not compile: {getattr(e, 'reason', e)}")
    return errors


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
