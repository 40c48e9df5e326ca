"""CEL's standard operators, as cel-go: heterogeneous equality, cross-type numeric ordering,
commutative `&&`/`||` that absorb errors, field selection, indexing and arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from celpy import celtypes

from allocator.cel.lib.budget import (
    ELEMENT_WEIGHT,
    EQUALITY_ELEMENT_WEIGHT,
    LIST_COPY_WEIGHT,
    charge,
    traversal_cost,
)
from allocator.cel.lib.values import (
    FALSE,
    NUMERIC_KINDS,
    ORDERED_KINDS,
    TRUE,
    CelQuantity,
    CelSemver,
    DomainMap,
    kind,
    mk_double,
    mk_int,
    mk_uint,
    no_overload,
)

# ---------------------------------------------------------------- equality and ordering


def _plain(x: Any, k: str) -> Any:
    if k == "int" or k == "uint":
        return int(x)
    if k == "double":
        return float(x)
    if k == "string":
        return str(x)
    if k == "bytes":
        return bytes(x)
    if k == "bool":
        return bool(x)
    return x


def cel_equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality: values of different types are unequal, numbers compare by value."""
    t = type(a)
    if t is type(b):
        same = _SAME_TYPE_EQ.get(t)
        if same is not None:
            return bool(same(a, b))
    ka, kb = kind(a), kind(b)
    if ka != kb:
        if ka in NUMERIC_KINDS and kb in NUMERIC_KINDS:
            equal: bool = _plain(a, ka) == _plain(b, kb)
            return equal
        return False
    if ka == "list":
        if len(a) != len(b):
            return False
        charge(len(a) * EQUALITY_ELEMENT_WEIGHT)
        return all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if ka == "map":
        if len(a) != len(b):
            return False
        charge(len(a) * EQUALITY_ELEMENT_WEIGHT)
        for k, v in a.items():
            found, other = _map_find(b, k)
            if not found or not cel_equal(v, other):
                return False
        return True
    if ka == "null_type":
        return True
    if ka in ORDERED_KINDS and ka not in ("timestamp", "duration"):
        return bool(_plain(a, ka) == _plain(b, kb))
    try:
        return bool(a == b)
    except Exception:
        return False


_SAME_TYPE_EQ: dict[type, Callable[[Any, Any], Any]] = {
    str: str.__eq__,
    celtypes.StringType: str.__eq__,
    celtypes.IntType: int.__eq__,
    celtypes.UintType: int.__eq__,
    celtypes.BoolType: int.__eq__,
    bool: int.__eq__,
    celtypes.DoubleType: float.__eq__,
    float: float.__eq__,
    CelQuantity: lambda a, b: a.key == b.key,
    CelSemver: lambda a, b: a.key == b.key,
}


def _map_find(m: Any, key: Any) -> tuple[bool, Any]:
    """Look a key up by CEL equality (numeric keys match across int/uint/double)."""
    k = kind(key)
    if k == "string":
        try:
            v = dict.get(m, key, _MISSING)
        except TypeError:
            v = _MISSING
        if v is not _MISSING:
            return True, v
        if all(kind(x) == "string" for x in m):
            return False, None
    for mk, mv in dict.items(m):
        if cel_equal(mk, key):
            return True, mv
    return False, None


_MISSING = object()


def _order_operands(fn: str, a: Any, b: Any) -> tuple[Any, Any]:
    ka, kb = kind(a), kind(b)
    if (ka == kb and ka in ORDERED_KINDS) or (ka in NUMERIC_KINDS and kb in NUMERIC_KINDS):
        return _plain(a, ka), _plain(b, kb)
    raise no_overload(fn, a, b)


def op_eq(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if cel_equal(a, b) else FALSE


def op_ne(a: Any, b: Any) -> celtypes.BoolType:
    return FALSE if cel_equal(a, b) else TRUE


# Same-type comparisons through the builtin methods (celpy's IntType compares in Python).
_BASES: dict[type, Any] = {
    celtypes.IntType: int, celtypes.UintType: int, celtypes.BoolType: int, bool: int,
    celtypes.DoubleType: float, float: float, celtypes.StringType: str, str: str,
}  # fmt: skip
_LT = {t: b.__lt__ for t, b in _BASES.items()}
_LE = {t: b.__le__ for t, b in _BASES.items()}
_GT = {t: b.__gt__ for t, b in _BASES.items()}
_GE = {t: b.__ge__ for t, b in _BASES.items()}


def op_lt(a: Any, b: Any) -> celtypes.BoolType:
    t = type(a)
    if t is type(b) and t in _LT:
        return TRUE if _LT[t](a, b) else FALSE
    x, y = _order_operands("_<_", a, b)
    return TRUE if x < y else FALSE


def op_le(a: Any, b: Any) -> celtypes.BoolType:
    t = type(a)
    if t is type(b) and t in _LE:
        return TRUE if _LE[t](a, b) else FALSE
    x, y = _order_operands("_<=_", a, b)
    return TRUE if x <= y else FALSE


def op_gt(a: Any, b: Any) -> celtypes.BoolType:
    t = type(a)
    if t is type(b) and t in _GT:
        return TRUE if _GT[t](a, b) else FALSE
    x, y = _order_operands("_>_", a, b)
    return TRUE if x > y else FALSE


def op_ge(a: Any, b: Any) -> celtypes.BoolType:
    t = type(a)
    if t is type(b) and t in _GE:
        return TRUE if _GE[t](a, b) else FALSE
    x, y = _order_operands("_>=_", a, b)
    return TRUE if x >= y else FALSE


def compare(fn: str, a: Any, b: Any) -> int:
    x, y = _order_operands(fn, a, b)
    order: int = (x > y) - (x < y)
    return order


def op_in(item: Any, container: Any) -> celtypes.BoolType:
    k = kind(container)
    if k == "list":
        charge(len(container) * ELEMENT_WEIGHT)  # cel-go InList: the list's size
        return TRUE if any(cel_equal(item, x) for x in container) else FALSE
    if k == "map":
        return TRUE if _map_find(container, item)[0] else FALSE
    raise no_overload("@in", item, container)


# ---------------------------------------------------------------- logic (errors are values here)


def is_bool(x: Any) -> bool:
    return kind(x) == "bool"


def op_and(a: Any, b: Any) -> celtypes.BoolType:
    """CEL `&&`: false wins over an error on either side; an error wins over true."""
    if is_bool(a) and not a:
        return FALSE
    if is_bool(b) and not b:
        return FALSE
    if isinstance(a, BaseException):
        raise a
    if isinstance(b, BaseException):
        raise b
    if is_bool(a) and is_bool(b):
        return TRUE
    raise no_overload("_&&_", a, b)


def op_or(a: Any, b: Any) -> celtypes.BoolType:
    """CEL `||`: true wins over an error on either side; an error wins over false."""
    if is_bool(a) and a:
        return TRUE
    if is_bool(b) and b:
        return TRUE
    if isinstance(a, BaseException):
        raise a
    if isinstance(b, BaseException):
        raise b
    if is_bool(a) and is_bool(b):
        return FALSE
    raise no_overload("_||_", a, b)


def op_not(a: Any) -> celtypes.BoolType:
    if isinstance(a, BaseException):
        raise a
    if not is_bool(a):
        raise no_overload("!_", a)
    return FALSE if a else TRUE


def op_cond(c: Any, x: Any, y: Any) -> Any:
    """CEL `c ? x : y`: only the chosen branch's error matters."""
    if isinstance(c, BaseException):
        raise c
    if not is_bool(c):
        raise TypeError(f"found no matching overload for '_?_:_' applied to '({kind(c)}, ...)'")
    chosen = x if c else y
    if isinstance(chosen, BaseException):
        raise chosen
    return chosen


# ---------------------------------------------------------------- selection and indexing


def select(obj: Any, field: str) -> Any:
    """`obj.field`: on a map, the same as `obj["field"]`; anything else has no fields."""
    if isinstance(obj, dict):
        if isinstance(obj, DomainMap):
            return obj[field]
        v = dict.get(obj, field, _MISSING)
        if v is _MISSING:
            found, v = _map_find(obj, str(field))
            if not found:
                raise KeyError(f"no such key: {field}")
        return v
    raise TypeError(f"type '{kind(obj)}' does not support field selection")


def has_field(obj: Any, field: str) -> celtypes.BoolType:
    """`has(obj.field)`: presence of a map key; an error for values without fields."""
    if isinstance(obj, dict):
        if isinstance(obj, DomainMap):
            # Upstream's default-map wrapper reports every domain as present.
            return TRUE
        return TRUE if _map_find(obj, str(field))[0] else FALSE
    raise TypeError(f"type '{kind(obj)}' does not support field selection")


def index(container: Any, key: Any) -> Any:
    k = kind(container)
    if k == "map":
        if isinstance(container, DomainMap):
            if kind(key) == "string":
                return container[key]
            raise no_overload("_[_]", container, key)
        kk = kind(key)
        if kk not in ("string", "int", "uint", "bool", "double"):
            raise no_overload("_[_]", container, key)
        found, v = _map_find(container, key)
        if not found:
            raise KeyError(f"no such key: {key}")
        return v
    if k == "list":
        kk = kind(key)
        if kk in ("int", "uint") or (kk == "double" and float(key).is_integer()):
            i = int(key)
            if 0 <= i < len(container):
                return container[i]
            raise ValueError(f"index out of bounds: {i} (list size {len(container)})")
        raise no_overload("_[_]", container, key)
    raise no_overload("_[_]", container, key)


def size(x: Any) -> celtypes.IntType:
    if kind(x) in ("string", "bytes", "list", "map"):
        return mk_int(len(x))
    raise no_overload("size", x)


# ---------------------------------------------------------------- arithmetic


def op_add(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb:
        if ka == "int":
            return mk_int(int(a) + int(b))
        if ka == "uint":
            return mk_uint(int(a) + int(b))
        if ka == "double":
            return mk_double(float(a) + float(b))
        if ka == "string":
            charge(traversal_cost(len(a) + len(b)))  # cel-go AddString: both operands copied
            return str(a) + str(b)
        if ka == "bytes":
            charge(traversal_cost(len(a) + len(b)))
            return celtypes.BytesType(bytes(a) + bytes(b))
        if ka == "list":
            charge(1 + math.ceil((len(a) + len(b)) * LIST_COPY_WEIGHT))  # cel-go: 1; a copy here
            return celtypes.ListType([*a, *b])
        if ka == "duration":
            return a + b
    if {ka, kb} == {"timestamp", "duration"}:
        return a + b
    raise no_overload("_+_", a, b)


def op_sub(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb:
        if ka == "int":
            return mk_int(int(a) - int(b))
        if ka == "uint":
            return mk_uint(int(a) - int(b))
        if ka == "double":
            return mk_double(float(a) - float(b))
        if ka in ("duration", "timestamp"):
            return a - b
    if ka == "timestamp" and kb == "duration":
        return a - b
    raise no_overload("_-_", a, b)


def op_mul(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb:
        if ka == "int":
            return mk_int(int(a) * int(b))
        if ka == "uint":
            return mk_uint(int(a) * int(b))
        if ka == "double":
            return mk_double(float(a) * float(b))
    raise no_overload("_*_", a, b)


def op_div(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb:
        if ka in ("int", "uint"):
            x, y = int(a), int(b)
            if y == 0:
                raise ValueError("division by zero")
            q = abs(x) // abs(y)  # truncates toward zero, as Go
            q = -q if (x < 0) != (y < 0) else q
            return mk_int(q) if ka == "int" else mk_uint(q)
        if ka == "double":
            fx, fy = float(a), float(b)
            if fy == 0.0:
                if fx == 0.0 or math.isnan(fx):
                    return mk_double(math.nan)
                return mk_double(math.copysign(math.inf, fx) * math.copysign(1.0, fy))
            return mk_double(fx / fy)
    raise no_overload("_/_", a, b)


def op_mod(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb and ka in ("int", "uint"):
        x, y = int(a), int(b)
        if y == 0:
            raise ValueError("modulus by zero")
        r = abs(x) % abs(y)  # takes the dividend's sign, as Go
        r = -r if x < 0 else r
        return mk_int(r) if ka == "int" else mk_uint(r)
    raise no_overload("_%_", a, b)


def op_neg(a: Any) -> Any:
    k = kind(a)
    if k == "int":
        return mk_int(-int(a))
    if k == "double":
        return mk_double(-float(a))
    if k == "duration":
        return -a
    raise no_overload("-_", a)
