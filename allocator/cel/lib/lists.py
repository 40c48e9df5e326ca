"""Kubernetes' lists library (k8s.io/apiserver/pkg/cel/library/lists.go)."""

from __future__ import annotations

import itertools
from typing import Any

from celpy import celtypes

from allocator.cel.lib.budget import ARITHMETIC_ELEMENT_WEIGHT, ELEMENT_WEIGHT, charge
from allocator.cel.lib.operators import cel_equal, compare, op_add
from allocator.cel.lib.strings import s_index_of, s_last_index_of
from allocator.cel.lib.values import FALSE, ORDERED_KINDS, TRUE, kind, mk_int, no_overload


def _need_list(fn: str, x: Any) -> list[Any]:
    if kind(x) != "list":
        raise no_overload(fn, x)
    return list(x)


def index_of(x: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if kind(x) == "string":
        return s_index_of(x, item, offset)
    if offset is not None:
        raise no_overload("indexOf", x, item, offset)
    lst = _need_list("indexOf", x)
    charge(len(lst) * ELEMENT_WEIGHT)  # Kubernetes lists: one traversal
    for i, v in enumerate(lst):
        if cel_equal(v, item):
            return mk_int(i)
    return mk_int(-1)


def last_index_of(x: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if kind(x) == "string":
        return s_last_index_of(x, item, offset)
    if offset is not None:
        raise no_overload("lastIndexOf", x, item, offset)
    lst = _need_list("lastIndexOf", x)
    charge(len(lst) * ELEMENT_WEIGHT)
    for i in range(len(lst) - 1, -1, -1):
        if cel_equal(lst[i], item):
            return mk_int(i)
    return mk_int(-1)


def l_is_sorted(x: Any) -> celtypes.BoolType:
    lst = _need_list("isSorted", x)
    charge(len(lst) * ARITHMETIC_ELEMENT_WEIGHT)
    for a, b in itertools.pairwise(lst):
        if compare("isSorted", a, b) > 0:
            return FALSE
    return TRUE


def l_sum(x: Any) -> Any:
    lst = _need_list("sum", x)
    charge(len(lst) * ARITHMETIC_ELEMENT_WEIGHT)
    if not lst:
        return mk_int(0)
    total = lst[0]
    if kind(total) not in ("int", "uint", "double", "duration"):
        raise no_overload("sum", x)
    for v in lst[1:]:
        total = op_add(total, v)
    return total


def _extreme(fn: str, x: Any, prefer: int) -> Any:
    lst = _need_list(fn, x)
    charge(len(lst) * ARITHMETIC_ELEMENT_WEIGHT)
    if not lst:
        raise ValueError(f"{fn} called on empty list")
    best = lst[0]
    if kind(best) not in ORDERED_KINDS:
        raise no_overload(fn, x)
    for v in lst[1:]:
        if compare(fn, best, v) == prefer:
            best = v
    return best


def l_min(x: Any) -> Any:
    return _extreme("min", x, 1)


def l_max(x: Any) -> Any:
    return _extreme("max", x, -1)


def l_includes(x: Any, item: Any) -> celtypes.BoolType:
    if kind(x) == "list":
        charge(len(x) * ELEMENT_WEIGHT)
        return TRUE if any(cel_equal(v, item) for v in x) else FALSE
    return TRUE if cel_equal(x, item) else FALSE
