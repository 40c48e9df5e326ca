"""`compareTo`, `isGreaterThan` and `isLessThan`, which Kubernetes' quantity and semver
libraries both define: one CEL function name, dispatched on the receiver's type."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from celpy import celtypes

from allocator.cel.lib.values import FALSE, TRUE, kind, mk_int, no_overload
from allocator.semver import PrecedenceKey


def _cmp_values(fn: str, a: Any, b: Any) -> int:
    ka, kb = kind(a), kind(b)
    if ka == "Quantity" and kb == "Quantity":
        qx: int | Fraction = a.key
        qy: int | Fraction = b.key
        return (qx > qy) - (qx < qy)
    if ka == "Semver" and kb == "Semver":
        vx: PrecedenceKey = a.key
        vy: PrecedenceKey = b.key
        return (vx > vy) - (vx < vy)
    raise no_overload(fn, a, b)


def compare_to(a: Any, b: Any) -> celtypes.IntType:
    return mk_int(_cmp_values("compareTo", a, b))


def is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if _cmp_values("isGreaterThan", a, b) > 0 else FALSE


def is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if _cmp_values("isLessThan", a, b) < 0 else FALSE
