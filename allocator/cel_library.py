"""Kubernetes' CEL extension libraries that DRA selectors use, for cel-python.

cel-python ships none of them. cel-python dispatches `x.f(y)` as `f(x, y)`,
so methods shared by several types (`compareTo`) dispatch on the receiver.
Every failure raises ValueError/TypeError, which the engine reports as a CEL
runtime error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from celpy import celtypes

from allocator.quantity import Quantity, QuantityError, format_quantity, parse_quantity
from allocator.semver import Semver, SemverError, parse_semver

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class CelQuantity:
    """A quantity as a CEL value (equality by value, as upstream's Equal)."""

    __slots__ = ("q",)

    def __init__(self, q: Quantity) -> None:
        self.q = q

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelQuantity) and self.q.value == other.q.value

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.q.value)

    def __repr__(self) -> str:
        return f"quantity({self.q})"


class CelSemver:
    __slots__ = ("v",)

    def __init__(self, v: Semver) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelSemver) and self.v.compare(other.v) == 0

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((self.v.major, self.v.minor, self.v.patch, self.v.prerelease))

    def __repr__(self) -> str:
        return f"semver({self.v})"


def _need(value: Any, kind: type, fn: str) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{fn}: unexpected argument type {type(value).__name__}")
    return value


def quantity(s: Any) -> CelQuantity:
    try:
        return CelQuantity(parse_quantity(str(_need(s, str, "quantity"))))
    except QuantityError as e:
        raise ValueError(f"quantity: {e}") from None


def is_quantity(s: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(_need(s, str, "isQuantity")))
        return celtypes.BoolType(True)
    except QuantityError:
        return celtypes.BoolType(False)


def semver(s: Any, normalize: Any = None) -> CelSemver:
    text = str(_need(s, str, "semver"))
    if normalize:
        text = _normalize_semver(text)
    try:
        return CelSemver(parse_semver(text))
    except SemverError as e:
        raise ValueError(f"semver: {e}") from None


def _normalize_semver(text: str) -> str:
    """Upstream's normalize: optional "v" prefix, missing minor/patch, leading zeros."""
    text = text.removeprefix("v")
    m = re.match(r"^([0-9]+(?:\.[0-9]+){0,2})(.*)$", text)
    if not m:
        return text
    parts = [str(int(p)) for p in m.group(1).split(".")]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts) + m.group(2)


def is_semver(s: Any, normalize: Any = None) -> celtypes.BoolType:
    try:
        semver(s, normalize)
        return celtypes.BoolType(True)
    except (ValueError, TypeError):
        return celtypes.BoolType(False)


def _cmp(a: Any, b: Any, fn: str) -> int:
    if isinstance(a, CelQuantity) and isinstance(b, CelQuantity):
        return (a.q.value > b.q.value) - (a.q.value < b.q.value)
    if isinstance(a, CelSemver) and isinstance(b, CelSemver):
        return a.v.compare(b.v)
    raise TypeError(f"{fn}: cannot compare {type(a).__name__} with {type(b).__name__}")


def compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_cmp(a, b, "compareTo"))


def is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(a, b, "isGreaterThan") > 0)


def is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(a, b, "isLessThan") < 0)


def _q_operand(x: Any, fn: str) -> Fraction:
    if isinstance(x, CelQuantity):
        return x.q.value
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(int(x))
    raise TypeError(f"{fn}: unexpected argument type {type(x).__name__}")


def add(a: Any, b: Any) -> CelQuantity:
    v = _q_operand(_need(a, CelQuantity, "add"), "add") + _q_operand(b, "add")
    return CelQuantity(Quantity(v, format_quantity(v)))


def sub(a: Any, b: Any) -> CelQuantity:
    v = _q_operand(_need(a, CelQuantity, "sub"), "sub") - _q_operand(b, "sub")
    return CelQuantity(Quantity(v, format_quantity(v)))


def as_integer(a: Any) -> celtypes.IntType:
    v = _need(a, CelQuantity, "asInteger").q.value
    if v.denominator != 1:
        raise ValueError("asInteger: quantity is not an integer")
    if not _INT64_MIN <= v.numerator <= _INT64_MAX:
        raise ValueError("asInteger: quantity overflows int64")
    return celtypes.IntType(v.numerator)


def is_integer(a: Any) -> celtypes.BoolType:
    v = _need(a, CelQuantity, "isInteger").q.value
    return celtypes.BoolType(v.denominator == 1 and _INT64_MIN <= v.numerator <= _INT64_MAX)


def as_approximate_float(a: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_need(a, CelQuantity, "asApproximateFloat").q.value))


def sign(a: Any) -> celtypes.IntType:
    v = _need(a, CelQuantity, "sign").q.value
    return celtypes.IntType((v > 0) - (v < 0))


def _semver_field(name: str) -> Callable[[Any], celtypes.IntType]:
    def get(a: Any) -> celtypes.IntType:
        return celtypes.IntType(getattr(_need(a, CelSemver, name).v, name))

    return get


# ------------------------------------------------------------------ strings (cel-go ext/strings)


def _s(x: Any, fn: str) -> str:
    return str(_need(x, str, fn))


def lower_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in _s(s, "lowerAscii")))


def upper_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in _s(s, "upperAscii")))


def split(s: Any, sep: Any, n: Any = None) -> celtypes.ListType:
    text, separator = _s(s, "split"), _s(sep, "split")
    if n is None:
        parts = text.split(separator) if separator else list(text)
    else:
        limit = int(n)
        if limit == 0:
            parts = []
        elif limit < 0:
            parts = text.split(separator) if separator else list(text)
        else:
            parts = text.split(separator, limit - 1) if separator else list(text[: limit - 1]) + ([text[limit - 1 :]] if len(text) >= limit else [])
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def join(items: Any, sep: Any = None) -> celtypes.StringType:
    lst = _need(items, list, "join")
    for x in lst:
        _need(x, str, "join")
    return celtypes.StringType(("" if sep is None else _s(sep, "join")).join(str(x) for x in lst))


def trim(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_s(s, "trim").strip())


def replace(s: Any, old: Any, new: Any, n: Any = None) -> celtypes.StringType:
    count = -1 if n is None else int(n)
    return celtypes.StringType(_s(s, "replace").replace(_s(old, "replace"), _s(new, "replace"), count))


def index_of(x: Any, item: Any, start: Any = None) -> celtypes.IntType:
    if isinstance(x, str):
        text, sub_ = str(x), _s(item, "indexOf")
        begin = 0 if start is None else int(start)
        if begin < 0 or begin > len(text):
            raise ValueError("indexOf: index out of range")
        return celtypes.IntType(text.find(sub_, begin))
    lst = _need(x, list, "indexOf")
    for i, v in enumerate(lst):
        if v == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def last_index_of(x: Any, item: Any) -> celtypes.IntType:
    if isinstance(x, str):
        return celtypes.IntType(str(x).rfind(_s(item, "lastIndexOf")))
    lst = _need(x, list, "lastIndexOf")
    for i in range(len(lst) - 1, -1, -1):
        if lst[i] == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _s(s, "substring")
    a = int(start)
    b = len(text) if end is None else int(end)
    if not 0 <= a <= b <= len(text):
        raise ValueError(f"substring: index out of range: {a}, {b}")
    return celtypes.StringType(text[a:b])


def char_at(s: Any, i: Any) -> celtypes.StringType:
    text = _s(s, "charAt")
    k = int(i)
    if not 0 <= k <= len(text):
        raise ValueError("charAt: index out of range")
    return celtypes.StringType(text[k : k + 1])


# ------------------------------------------------------------------ lists (k8s library/lists.go)


def _list(x: Any, fn: str) -> list[Any]:
    return list(_need(x, list, fn))


def is_sorted(x: Any) -> celtypes.BoolType:
    lst = _list(x, "isSorted")
    return celtypes.BoolType(all(lst[i] <= lst[i + 1] for i in range(len(lst) - 1)))


def list_sum(x: Any) -> Any:
    lst = _list(x, "sum")
    if not lst:
        return celtypes.IntType(0)
    total = lst[0]
    for v in lst[1:]:
        total = total + v
    return total


def list_min(x: Any) -> Any:
    lst = _list(x, "min")
    if not lst:
        raise ValueError("min: called on an empty list")
    return min(lst)


def list_max(x: Any) -> Any:
    lst = _list(x, "max")
    if not lst:
        raise ValueError("max: called on an empty list")
    return max(lst)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": quantity,
    "isQuantity": is_quantity,
    "semver": semver,
    "isSemver": is_semver,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "add": add,
    "sub": sub,
    "asInteger": as_integer,
    "isInteger": is_integer,
    "asApproximateFloat": as_approximate_float,
    "sign": sign,
    "major": _semver_field("major"),
    "minor": _semver_field("minor"),
    "patch": _semver_field("patch"),
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "split": split,
    "join": join,
    "trim": trim,
    "replace": replace,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "substring": substring,
    "charAt": char_at,
    "isSorted": is_sorted,
    "sum": list_sum,
    "min": list_min,
    "max": list_max,
}
