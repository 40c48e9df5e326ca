"""The comprehension macros (`all`, `exists`, `exists_one`, `map`, `filter`), shared by both runners."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from celpy import celtypes

from allocator.cel.lib.budget import BODY_OP_WEIGHT, ITERATION_WEIGHT, charge
from allocator.cel.lib.operators import is_bool
from allocator.cel.lib.values import FALSE, TRUE, kind, no_overload

Body = Callable[[Any], Any]  # evaluates the macro body in an activation; returns a value or an error


def _range(fn: str, target: Any, cost: int) -> Iterator[Any]:
    """The elements (list) or keys (map) a macro iterates, charging each step before it runs.

    `cost` is the body's static estimate (plus one); a step costs it weighted, plus a
    fixed part, so that comprehensions over lists built at runtime stay within the budget.
    """
    if isinstance(target, BaseException):
        raise target
    k = kind(target)
    if k == "list":
        items = list(target)
    elif k == "map":
        items = list(dict.keys(target))
    else:
        raise no_overload(fn, target)
    step = ITERATION_WEIGHT + cost * BODY_OP_WEIGHT
    for v in items:
        charge(step)
        yield v


def macro_all(bind: Callable[[Any], Any], body: Body, target: Any, cost: int = 1) -> celtypes.BoolType:
    """`all`: false if any element is false (even when others fail), else the first error, else true."""
    error: BaseException | None = None
    for v in _range("all", target, cost):
        r = body(bind(v))
        if isinstance(r, BaseException):
            error = error or r
        elif not is_bool(r):
            error = error or no_overload("all", r)
        elif not r:
            return FALSE
    if error is not None:
        raise error
    return TRUE


def macro_exists(bind: Callable[[Any], Any], body: Body, target: Any, cost: int = 1) -> celtypes.BoolType:
    """`exists`: true if any element is true (even when others fail), else the first error, else false."""
    error: BaseException | None = None
    for v in _range("exists", target, cost):
        r = body(bind(v))
        if isinstance(r, BaseException):
            error = error or r
        elif not is_bool(r):
            error = error or no_overload("exists", r)
        elif r:
            return TRUE
    if error is not None:
        raise error
    return FALSE


def macro_exists_one(bind: Callable[[Any], Any], body: Body, target: Any, cost: int = 1) -> celtypes.BoolType:
    count = 0
    for v in _range("exists_one", target, cost):
        r = body(bind(v))
        if isinstance(r, BaseException):
            raise r
        if not is_bool(r):
            raise no_overload("exists_one", r)
        count += bool(r)
    return TRUE if count == 1 else FALSE


def macro_map(bind: Callable[[Any], Any], body: Body, target: Any, predicate: Body | None = None, cost: int = 1) -> celtypes.ListType:
    out = []
    for v in _range("map", target, cost):
        act = bind(v)
        if predicate is not None:
            keep = predicate(act)
            if isinstance(keep, BaseException):
                raise keep
            if not is_bool(keep):
                raise no_overload("map", keep)
            if not keep:
                continue
        r = body(act)
        if isinstance(r, BaseException):
            raise r
        out.append(r)
    return celtypes.ListType(out)


def macro_filter(bind: Callable[[Any], Any], body: Body, target: Any, cost: int = 1) -> celtypes.ListType:
    out = []
    for v in _range("filter", target, cost):
        r = body(bind(v))
        if isinstance(r, BaseException):
            raise r
        if not is_bool(r):
            raise no_overload("filter", r)
        if r:
            out.append(v)
    return celtypes.ListType(out)


MACROS: dict[str, Callable[..., Any]] = {
    "all": macro_all,
    "exists": macro_exists,
    "exists_one": macro_exists_one,
    "map": macro_map,
    "filter": macro_filter,
}
