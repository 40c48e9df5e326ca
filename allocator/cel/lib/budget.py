"""The evaluation cost budget (cel-go's runtime cost limit) and the caller's deadline, per thread."""

from __future__ import annotations

import math
import threading
import time

COST_LIMIT = 1_000_000  # upstream resource.k8s.io CELSelectorExpressionMaxCost
COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"  # cel-go's wording

# cel-go's runtime cost model (interpreter/runtimecost.go, and Kubernetes' library cost.go):
# work proportional to the sizes an operation touches, in units of these factors.
STRING_TRAVERSAL_COST_FACTOR = 0.1  # common.StringTraversalCostFactor: per character
REGEX_STRING_LENGTH_COST_FACTOR = 0.25  # common.RegexStringLengthCostFactor: per pattern character

# CPython spends far more per unit than Go on per-element work (a Python object per
# element, a Python call per comprehension step), so those units are weighted to keep
# the whole 1,000,000-unit budget near 50 ms here (measured worst case: docs/hostile-input.md).
# An expression therefore costs at least what cel-go charges, more where CPython is slower.
ITERATION_WEIGHT = 150  # one comprehension step (binding, generator, body call: ~3 us)
BODY_OP_WEIGHT = 15  # per statically estimated operation of a comprehension body, per step
ELEMENT_WEIGHT = 12  # per element compared or built in Python (in, indexOf, list ==, split parts)
EQUALITY_ELEMENT_WEIGHT = 24  # per element of a list or map compared with ==
ARITHMETIC_ELEMENT_WEIGHT = 48  # per element of sum/min/max/isSorted (a CEL operator call each)
LIST_COPY_WEIGHT = 0.4  # per element copied by list concatenation
MATCH_WEIGHT = 600  # per match object google-re2's finditer builds in Python (~7 us)
REGEX_WEIGHT = 30  # RE2's NFA fallback (large patterns) runs ~400 ns per cel-go unit here
# celpy's tree-walking interpreter (the fallback runner) is ~50x slower per operation than
# the compiled runner: its evaluations get this much less budget.
INTERPRETED_BUDGET_DIVISOR = 25


class CostLimitExceeded(BaseException):
    """The evaluation exceeded its cost budget; aborts the whole evaluation, as upstream."""


class DeadlineExceeded(BaseException):
    """The caller's time budget (e.g. one /filter call's) ran out during an evaluation.

    Not a property of the device: never cached, unlike a cost-limit error.
    `expression` is set by the engine to the expression that was running.
    """

    expression: str = ""
    nodes_done: int = 0  # set by whoever tells the caller how far it got (the /filter verdict loop)


class _Budget(threading.local):
    """Per-thread evaluation state; class attributes are the defaults, so reading them never
    raises internally (a getattr default on a missing threading.local attribute costs ~1 us)."""

    left: int | float = COST_LIMIT
    deadline: float | None = None
    regexes: set[str] | None = None  # patterns whose compile this evaluation was charged for


_budget = _Budget()
_monotonic = time.monotonic


def reset_budget(divisor: int = 1) -> None:
    """Start an evaluation's budget (per thread); fails at once if the caller's deadline passed.

    `divisor` shrinks the budget for a slower runner, as if every unit cost that much more.
    """
    b = _budget
    b.left = COST_LIMIT // divisor
    b.regexes = None
    deadline = b.deadline
    if deadline is not None and _monotonic() > deadline:
        raise DeadlineExceeded("time budget exceeded")


def set_deadline(deadline: float | None) -> float | None:
    """Bound this thread's evaluations by a `time.monotonic()` deadline; returns the previous one."""
    previous = _budget.deadline
    _budget.deadline = deadline
    return previous


def charge(units: int | float) -> None:
    """Spend budget on work that grows with data: comprehension steps, sizes touched."""
    b = _budget
    left = b.left - units
    b.left = left
    if left < 0:
        raise CostLimitExceeded(COST_LIMIT_MESSAGE)
    deadline = b.deadline
    if deadline is not None and _monotonic() > deadline:
        raise DeadlineExceeded("time budget exceeded")


def charge_once(key: str, units: int | float) -> None:
    """Charge `units` for `key` once per evaluation (a regex compile: cel-go compiles a pattern once)."""
    b = _budget
    seen = b.regexes
    if seen is None:
        seen = b.regexes = set()
    if key not in seen:
        seen.add(key)
        charge(units)


def traversal_cost(n: int) -> int:
    """cel-go: a pass over n characters."""
    return math.ceil(n * STRING_TRAVERSAL_COST_FACTOR)


def regex_cost(text: str, pattern: str) -> int:
    """cel-go's matches/find/findAll: (1 + input length) x pattern length, scaled."""
    return math.ceil((1 + len(text)) * STRING_TRAVERSAL_COST_FACTOR) * math.ceil(len(pattern) * REGEX_STRING_LENGTH_COST_FACTOR)


def regex_charge(text: str, pattern: str) -> None:
    charge(regex_cost(text, pattern) * REGEX_WEIGHT)
