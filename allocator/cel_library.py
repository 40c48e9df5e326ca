"""CEL runtime semantics for DRA selectors, on top of cel-python's value types.

cel-python predates parts of the CEL spec that Kubernetes (cel-go) follows and
ships none of Kubernetes' libraries, so everything a selector can call lives
here, written against cel-go's behaviour:

- operators: heterogeneous equality (`1 == "a"` is false, not an error),
  cross-type numeric ordering, commutative `&&`/`||` that absorb errors, map
  lookups that fail with "no such key";
- Kubernetes libraries: quantity, semver, lists, regex (`find`), and cel-go's
  strings extension (version 2).

Every function *raises* on failure (ValueError for a CEL error, TypeError for
a missing overload, KeyError for a missing key) with a message meant for
users; the engine (allocator.cel) turns that into a CEL error value.
cel-python dispatches `x.f(y)` as `f(x, y)`, so a method shared by several
receiver types (`compareTo`, `indexOf`) dispatches on its first argument.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError

from allocator.quantity import Quantity, format_quantity, parse_quantity
from allocator.semver import Semver, parse_semver

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1

TRUE = celtypes.BoolType(True)
FALSE = celtypes.BoolType(False)

# celpy's IntType() builds a decorated converter per call (~10 us); values made here skip that.
# CEL strings are plain `str` here (celpy's StringType hashes and compares in Python).
_new_int = int.__new__
_new_float = float.__new__
_IntType = celtypes.IntType
_UintType = celtypes.UintType
_DoubleType = celtypes.DoubleType


def mk_int(v: Any) -> celtypes.IntType:
    v = int(v)
    if not INT64_MIN <= v <= INT64_MAX:
        raise ValueError("integer overflow")
    return _new_int(_IntType, v)


def mk_uint(v: Any) -> celtypes.UintType:
    v = int(v)
    if not 0 <= v <= UINT64_MAX:
        raise ValueError("unsigned integer overflow")
    return _new_int(_UintType, v)


def mk_double(v: Any) -> celtypes.DoubleType:
    return _new_float(_DoubleType, float(v))


# ---------------------------------------------------------------- cost budget

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


class _Budget(threading.local):
    """Per-thread evaluation state; class attributes are the defaults, so reading them never
    raises internally (a getattr default on a missing threading.local attribute costs ~1 us)."""

    left: int | float = COST_LIMIT
    deadline: float | None = None


_budget = _Budget()
_monotonic = time.monotonic


def reset_budget(divisor: int = 1) -> None:
    """Start an evaluation's budget (per thread); fails at once if the caller's deadline passed.

    `divisor` shrinks the budget for a slower runner, as if every unit cost that much more.
    """
    b = _budget
    b.left = COST_LIMIT // divisor
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


def traversal_cost(n: int) -> int:
    """cel-go: a pass over n characters."""
    return math.ceil(n * STRING_TRAVERSAL_COST_FACTOR)


def regex_cost(text: str, pattern: str) -> int:
    """cel-go's matches/find/findAll: (1 + input length) x pattern length, scaled."""
    return math.ceil((1 + len(text)) * STRING_TRAVERSAL_COST_FACTOR) * math.ceil(len(pattern) * REGEX_STRING_LENGTH_COST_FACTOR)


def _regex_charge(text: str, pattern: str) -> None:
    charge(regex_cost(text, pattern) * REGEX_WEIGHT)


# ---------------------------------------------------------------- value types


class CelQuantity:
    """A Kubernetes quantity as a CEL value; `==` compares by value (upstream Quantity.Equal)."""

    __slots__ = ("key", "q")

    def __init__(self, q: Quantity) -> None:
        self.q = q
        v = q.value
        # Most quantities are whole numbers: compare them as ints, not Fractions (5x faster).
        self.key: int | Fraction = v.numerator if v.denominator == 1 else v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelQuantity) and self.key == other.key

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"quantity({str(self.q)!r})"


class CelSemver:
    """A semantic version as a CEL value; `==` ignores build metadata (semver precedence)."""

    __slots__ = ("key", "v")

    def __init__(self, v: Semver) -> None:
        self.v = v
        self.key = v.precedence_key()  # computed once: selectors compare versions per device

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelSemver) and self.key == other.key

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"semver({str(self.v)!r})"


class CelTypeValue:
    """The value of `type(x)` and of type identifiers (`int`, `string`...)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelTypeValue) and self.name == other.name

    def __hash__(self) -> int:
        return hash(("type", self.name))

    def __repr__(self) -> str:
        return self.name


TYPE_NAMES = ("int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type")
TYPE_VALUES = {n: CelTypeValue(n) for n in TYPE_NAMES}

EMPTY_MAP = celtypes.MapType({})


class DomainMap(celtypes.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map, as upstream.

    Upstream wraps the map so that a lookup of a missing domain succeeds with
    an empty map; `"x" in device.attributes["d"]` then works without guards.
    Membership (`"d" in device.attributes`) and size still see only real domains.
    """

    def __getitem__(self, key: Any) -> Any:
        v = dict.get(self, key)
        if v is None:
            if isinstance(key, str):
                return EMPTY_MAP
            raise TypeError(f"no such overload: map key of type {kind(key)}")
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        return self.__getitem__(key)


# ---------------------------------------------------------------- kinds

_KINDS: dict[type, str] = {}


def _compute_kind(t: type) -> str:
    order: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (celtypes.BoolType, "bool"),
        (bool, "bool"),
        (celtypes.UintType, "uint"),
        (celtypes.IntType, "int"),
        (int, "int"),
        (celtypes.DoubleType, "double"),
        (float, "double"),
        (celtypes.StringType, "string"),
        (str, "string"),
        (celtypes.BytesType, "bytes"),
        (bytes, "bytes"),
        (celtypes.ListType, "list"),
        (list, "list"),
        (tuple, "list"),
        (celtypes.MapType, "map"),
        (dict, "map"),
        (type(None), "null_type"),
        (celtypes.NullType, "null_type"),
        (CelQuantity, "Quantity"),
        (CelSemver, "Semver"),
        (CelTypeValue, "type"),
        (celtypes.TimestampType, "timestamp"),
        (celtypes.DurationType, "duration"),
    )
    for base, name in order:
        if issubclass(t, base):
            return name
    return t.__name__


def kind(x: Any) -> str:
    """The CEL type name of a runtime value (used for dispatch and messages)."""
    t = type(x)
    k = _KINDS.get(t)
    if k is None:
        k = _KINDS[t] = _compute_kind(t)
    return k


_NUMERIC = frozenset(("int", "uint", "double"))
_ORDERED = frozenset(("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"))


def _overload(fn: str, *args: Any) -> TypeError:
    return TypeError(f"found no matching overload for '{fn}' applied to '({', '.join(kind(a) for a in args)})'")


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


# ---------------------------------------------------------------- equality and ordering


def cel_equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality: values of different types are unequal, numbers compare by value."""
    t = type(a)
    if t is type(b):
        same = _SAME_TYPE_EQ.get(t)
        if same is not None:
            return bool(same(a, b))
    ka, kb = kind(a), kind(b)
    if ka != kb:
        if ka in _NUMERIC and kb in _NUMERIC:
            return _plain(a, ka) == _plain(b, kb)
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
    if ka in _ORDERED and ka not in ("timestamp", "duration"):
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
    if (ka == kb and ka in _ORDERED) or (ka in _NUMERIC and kb in _NUMERIC):
        return _plain(a, ka), _plain(b, kb)
    raise _overload(fn, a, b)


def op_eq(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if cel_equal(a, b) else FALSE


def op_ne(a: Any, b: Any) -> celtypes.BoolType:
    return FALSE if cel_equal(a, b) else TRUE


# Same-type comparisons through the builtin methods (celpy's IntType compares in Python).
_BASES: dict[type, type] = {
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


def _compare(fn: str, a: Any, b: Any) -> int:
    x, y = _order_operands(fn, a, b)
    return (x > y) - (x < y)


def op_in(item: Any, container: Any) -> celtypes.BoolType:
    k = kind(container)
    if k == "list":
        charge(len(container) * ELEMENT_WEIGHT)  # cel-go InList: the list's size
        return TRUE if any(cel_equal(item, x) for x in container) else FALSE
    if k == "map":
        return TRUE if _map_find(container, item)[0] else FALSE
    raise _overload("@in", item, container)


# ---------------------------------------------------------------- logic (errors are values here)


def _is_bool(x: Any) -> bool:
    return kind(x) == "bool"


def op_and(a: Any, b: Any) -> celtypes.BoolType:
    """CEL `&&`: false wins over an error on either side; an error wins over true."""
    if _is_bool(a) and not a:
        return FALSE
    if _is_bool(b) and not b:
        return FALSE
    if isinstance(a, BaseException):
        raise a
    if isinstance(b, BaseException):
        raise b
    if _is_bool(a) and _is_bool(b):
        return TRUE
    raise _overload("_&&_", a, b)


def op_or(a: Any, b: Any) -> celtypes.BoolType:
    """CEL `||`: true wins over an error on either side; an error wins over false."""
    if _is_bool(a) and a:
        return TRUE
    if _is_bool(b) and b:
        return TRUE
    if isinstance(a, BaseException):
        raise a
    if isinstance(b, BaseException):
        raise b
    if _is_bool(a) and _is_bool(b):
        return FALSE
    raise _overload("_||_", a, b)


def op_not(a: Any) -> celtypes.BoolType:
    if isinstance(a, BaseException):
        raise a
    if not _is_bool(a):
        raise _overload("!_", a)
    return FALSE if a else TRUE


def op_cond(c: Any, x: Any, y: Any) -> Any:
    """CEL `c ? x : y`: only the chosen branch's error matters."""
    if isinstance(c, BaseException):
        raise c
    if not _is_bool(c):
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
            raise _overload("_[_]", container, key)
        kk = kind(key)
        if kk not in ("string", "int", "uint", "bool", "double"):
            raise _overload("_[_]", container, key)
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
        raise _overload("_[_]", container, key)
    raise _overload("_[_]", container, key)


def size(x: Any) -> celtypes.IntType:
    if kind(x) in ("string", "bytes", "list", "map"):
        return mk_int(len(x))
    raise _overload("size", x)


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
    raise _overload("_+_", a, b)


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
    raise _overload("_-_", a, b)


def op_mul(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb:
        if ka == "int":
            return mk_int(int(a) * int(b))
        if ka == "uint":
            return mk_uint(int(a) * int(b))
        if ka == "double":
            return mk_double(float(a) * float(b))
    raise _overload("_*_", a, b)


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
            x, y = float(a), float(b)
            if y == 0.0:
                if x == 0.0 or math.isnan(x):
                    return mk_double(math.nan)
                return mk_double(math.copysign(math.inf, x) * math.copysign(1.0, y))
            return mk_double(x / y)
    raise _overload("_/_", a, b)


def op_mod(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb and ka in ("int", "uint"):
        x, y = int(a), int(b)
        if y == 0:
            raise ValueError("modulus by zero")
        r = abs(x) % abs(y)  # takes the dividend's sign, as Go
        r = -r if x < 0 else r
        return mk_int(r) if ka == "int" else mk_uint(r)
    raise _overload("_%_", a, b)


def op_neg(a: Any) -> Any:
    k = kind(a)
    if k == "int":
        return mk_int(-int(a))
    if k == "double":
        return mk_double(-float(a))
    if k == "duration":
        return -a
    raise _overload("-_", a)


# ---------------------------------------------------------------- conversions


def _need_str(fn: str, *args: Any) -> None:
    for a in args:
        if kind(a) != "string":
            raise _overload(fn, *args)


def _need_int(fn: str, *args: Any) -> None:
    for a in args:
        if kind(a) != "int":
            raise _overload(fn, *args)


def to_int(x: Any) -> celtypes.IntType:
    k = kind(x)
    if k == "int":
        return mk_int(x)
    if k == "uint":
        if int(x) > INT64_MAX:
            raise ValueError("integer overflow")
        return mk_int(int(x))
    if k == "double":
        f = float(x)
        if math.isnan(f) or math.isinf(f) or not (INT64_MIN <= math.trunc(f) <= INT64_MAX):
            raise ValueError("integer overflow")
        return mk_int(math.trunc(f))
    if k == "string":
        s = str(x)
        body = s[1:] if s[:1] in "+-" else s
        if not body.isascii() or not body.isdigit():
            raise ValueError(f"cannot convert {s!r} to int")
        v = int(s)
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError("integer overflow")
        return mk_int(v)
    if k == "timestamp":
        return mk_int(int(x.timestamp()))
    raise _overload("int", x)


def to_uint(x: Any) -> celtypes.UintType:
    k = kind(x)
    if k in ("int", "uint"):
        v = int(x)
    elif k == "double":
        f = float(x)
        if math.isnan(f) or math.isinf(f):
            raise ValueError("unsigned integer overflow")
        v = math.trunc(f)
    elif k == "string":
        s = str(x)
        if not s.isascii() or not s.isdigit():
            raise ValueError(f"cannot convert {s!r} to uint")
        v = int(s)
    else:
        raise _overload("uint", x)
    if not 0 <= v <= UINT64_MAX:
        raise ValueError("unsigned integer overflow")
    return mk_uint(v)


def to_double(x: Any) -> celtypes.DoubleType:
    k = kind(x)
    if k in ("int", "uint", "double"):
        return mk_double(float(x))
    if k == "string":
        s = str(x)
        if s != s.strip() or not s or "_" in s:
            raise ValueError(f"cannot convert {s!r} to double")
        try:
            return mk_double(float(s))
        except ValueError:
            raise ValueError(f"cannot convert {s!r} to double") from None
    raise _overload("double", x)


def _format_double(f: float) -> str:
    """Go's strconv.FormatFloat(f, 'g', -1, 64), as cel-go's string(double) does."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    # repr() gives the shortest digits that round-trip, as Go's -1 precision does.
    _, digit_tuple, exponent = Decimal(repr(abs(f))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    nd = len(digits)
    point = nd + int(exponent)  # position of the decimal point relative to the digits
    exp = point - 1
    eprec = nd if 6 > nd >= point else 6
    sign = "-" if f < 0 else ""
    if exp < -4 or exp >= eprec:
        m = digits[0] + ("." + digits[1:] if nd > 1 else "")
        return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= nd:
        return f"{sign}{digits}{'0' * (point - nd)}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def to_string(x: Any) -> str:
    k = kind(x)
    if k == "string":
        return str(x)
    if k in ("int", "uint"):
        return str(int(x))
    if k == "double":
        return str(_format_double(float(x)))
    if k == "bool":
        return str("true" if x else "false")
    if k == "bytes":
        try:
            return str(bytes(x).decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("invalid UTF-8 in bytes, cannot convert to string") from None
    if k in ("timestamp", "duration"):
        return str(x)
    raise _overload("string", x)


_BOOL_STRINGS = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}  # fmt: skip


def to_bool(x: Any) -> celtypes.BoolType:
    k = kind(x)
    if k == "bool":
        return TRUE if x else FALSE
    if k == "string":
        v = _BOOL_STRINGS.get(str(x))
        if v is None:
            raise ValueError(f"cannot convert {str(x)!r} to bool")
        return TRUE if v else FALSE
    raise _overload("bool", x)


def to_bytes(x: Any) -> celtypes.BytesType:
    k = kind(x)
    if k == "bytes":
        return celtypes.BytesType(x)
    if k == "string":
        return celtypes.BytesType(str(x).encode("utf-8"))
    raise _overload("bytes", x)


def to_dyn(x: Any) -> Any:
    return x


def type_of(x: Any) -> CelTypeValue:
    return CelTypeValue(kind(x))


# ---------------------------------------------------------------- quantity (k8s library/quantity.go)

_PARSED: dict[tuple[str, str], Any] = {}
_PARSED_MAX = 4096


def _memo(tag: str, text: str, parse: Callable[[str], Any]) -> Any:
    """Selectors mostly parse literals (`quantity("10Gi")`): parse each text once."""
    key = (tag, text)
    hit = _PARSED.get(key)
    if hit is None:
        try:
            hit = parse(text)
        except Exception as e:
            hit = ValueError(str(e) or type(e).__name__)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = hit
    if isinstance(hit, ValueError):
        raise ValueError(*hit.args)
    return hit


def _parse_cel_quantity(text: str) -> CelQuantity:
    if not text or text != text.strip() or len(text) > 256:
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    return CelQuantity(parse_quantity(text))


def quantity(s: Any) -> CelQuantity:
    _need_str("quantity", s)
    return _memo("q", str(s), _parse_cel_quantity)


def is_quantity(s: Any) -> celtypes.BoolType:
    _need_str("isQuantity", s)
    try:
        quantity(s)
    except ValueError:
        return FALSE
    return TRUE


def _q(fn: str, *args: Any) -> None:
    if kind(args[0]) != "Quantity":
        raise _overload(fn, *args)


def _q_operand(fn: str, a: Any, b: Any) -> Fraction:
    kb = kind(b)
    if kb == "Quantity":
        return b.q.value
    if kb == "int":
        return Fraction(int(b))
    raise _overload(fn, a, b)


def _q_new(v: Fraction) -> CelQuantity:
    return CelQuantity(Quantity(v, format_quantity(v)))


def q_add(a: Any, b: Any) -> CelQuantity:
    _q("add", a, b)
    return _q_new(a.q.value + _q_operand("add", a, b))


def q_sub(a: Any, b: Any) -> CelQuantity:
    _q("sub", a, b)
    return _q_new(a.q.value - _q_operand("sub", a, b))


def q_as_integer(a: Any) -> celtypes.IntType:
    _q("asInteger", a)
    v = a.q.value
    if v.denominator != 1 or not INT64_MIN <= v.numerator <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return mk_int(v.numerator)


def q_is_integer(a: Any) -> celtypes.BoolType:
    _q("isInteger", a)
    v = a.q.value
    return TRUE if v.denominator == 1 and INT64_MIN <= v.numerator <= INT64_MAX else FALSE


def q_as_approximate_float(a: Any) -> celtypes.DoubleType:
    _q("asApproximateFloat", a)
    v = a.q.value
    try:
        return mk_double(float(v))
    except OverflowError:
        return mk_double(math.inf if v > 0 else -math.inf)


def q_sign(a: Any) -> celtypes.IntType:
    _q("sign", a)
    v = a.q.value
    return mk_int((v > 0) - (v < 0))


# ---------------------------------------------------------------- semver (k8s library/semverlib.go)


def _normalize_semver(text: str) -> str:
    """Upstream normalizeAndParse: drop a "v", strip leading zeros, fill in minor/patch."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _parse_cel_semver(text: str) -> CelSemver:
    if len(text) > 256:
        raise ValueError("version string too long")
    v = parse_semver(text)
    if max(v.major, v.minor, v.patch) > UINT64_MAX:
        raise ValueError(f"{text!r} is not a valid semantic version: number out of range")
    return CelSemver(v)


def semver(s: Any, normalize: Any = None) -> CelSemver:
    if normalize is None:
        _need_str("semver", s)
        return _memo("s", str(s), _parse_cel_semver)
    if kind(s) != "string" or kind(normalize) != "bool":
        raise _overload("semver", s, normalize)
    text = str(s)
    if normalize:
        text = _normalize_semver(text)
    return _memo("s", text, _parse_cel_semver)


def is_semver(s: Any, normalize: Any = None) -> celtypes.BoolType:
    if normalize is None:
        _need_str("isSemver", s)
    elif kind(s) != "string" or kind(normalize) != "bool":
        raise _overload("isSemver", s, normalize)
    try:
        semver(s, normalize)
    except ValueError:
        return FALSE
    return TRUE


def _semver_part(name: str) -> Callable[[Any], celtypes.IntType]:
    def part(a: Any) -> celtypes.IntType:
        if kind(a) != "Semver":
            raise _overload(name, a)
        return mk_int(getattr(a.v, name))

    part.__name__ = part.__qualname__ = f"semver_{name}"
    return part


semver_major = _semver_part("major")
semver_minor = _semver_part("minor")
semver_patch = _semver_part("patch")


# ---------------------------------------------------------------- shared comparisons


def _cmp_values(fn: str, a: Any, b: Any) -> int:
    ka, kb = kind(a), kind(b)
    if ka == "Quantity" and kb == "Quantity":
        x, y = a.key, b.key
        return (x > y) - (x < y)
    if ka == "Semver" and kb == "Semver":
        x, y = a.key, b.key
        return (x > y) - (x < y)
    raise _overload(fn, a, b)


def compare_to(a: Any, b: Any) -> celtypes.IntType:
    return mk_int(_cmp_values("compareTo", a, b))


def is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if _cmp_values("isGreaterThan", a, b) > 0 else FALSE


def is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return TRUE if _cmp_values("isLessThan", a, b) < 0 else FALSE


# ---------------------------------------------------------------- strings (cel-go ext/strings.go, v2)

_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def s_contains(s: Any, sub: Any) -> celtypes.BoolType:
    _need_str("contains", s, sub)
    charge(traversal_cost(len(s)) * traversal_cost(len(sub)))  # cel-go ContainsString
    return TRUE if str(sub) in str(s) else FALSE


def s_starts_with(s: Any, prefix: Any) -> celtypes.BoolType:
    _need_str("startsWith", s, prefix)
    charge(traversal_cost(len(s)))
    return TRUE if str(s).startswith(str(prefix)) else FALSE


def s_ends_with(s: Any, suffix: Any) -> celtypes.BoolType:
    _need_str("endsWith", s, suffix)
    charge(traversal_cost(len(s)))
    return TRUE if str(s).endswith(str(suffix)) else FALSE


_REGEXES: dict[str, Any] = {}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an invalid pattern is the user's error, reported by us


def compile_regex(pattern: str) -> Any:
    """RE2, as cel-go; compiled once per pattern. Raises ValueError for a bad pattern."""
    rx = _REGEXES.get(pattern)
    if rx is None:
        try:
            rx = re2.compile(pattern, _RE2_OPTIONS)
        except Exception as e:
            detail = e.args[0] if e.args else e
            if isinstance(detail, bytes):
                detail = detail.decode("utf-8", "replace")
            raise ValueError(f"invalid regular expression {pattern!r}: {detail}") from None
        if len(_REGEXES) >= 1024:
            _REGEXES.clear()
        _REGEXES[pattern] = rx
    return rx


def s_matches(s: Any, pattern: Any) -> celtypes.BoolType:
    _need_str("matches", s, pattern)
    _regex_charge(s, pattern)
    return TRUE if compile_regex(str(pattern)).search(str(s)) is not None else FALSE


def s_find(s: Any, pattern: Any) -> str:
    _need_str("find", s, pattern)
    _regex_charge(s, pattern)
    m = compile_regex(str(pattern)).search(str(s))
    return str(m.group(0)) if m is not None else ""


def s_find_all(s: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    _need_str("findAll", s, pattern)
    n = -1
    if limit is not None:
        _need_int("findAll", limit)
        n = int(limit)
    _regex_charge(s, pattern)
    if n == 0:
        return celtypes.ListType([])
    out = []
    for m in compile_regex(str(pattern)).finditer(str(s)):
        charge(MATCH_WEIGHT)  # each match is built in Python: far slower than the scan
        out.append(str(m.group(0)))
        if 0 < n <= len(out):
            break
    return celtypes.ListType(out)


def s_lower_ascii(s: Any) -> str:
    _need_str("lowerAscii", s)
    charge(traversal_cost(len(s)))
    return str(s).translate(_LOWER)


def s_upper_ascii(s: Any) -> str:
    _need_str("upperAscii", s)
    charge(traversal_cost(len(s)))
    return str(s).translate(_UPPER)


def s_trim(s: Any) -> str:
    _need_str("trim", s)
    charge(traversal_cost(len(s)))
    return str(s).strip()


def s_split(s: Any, sep: Any, n: Any = None) -> celtypes.ListType:
    _need_str("split", s, sep)
    text, separator = str(s), str(sep)
    limit = -1
    if n is not None:
        _need_int("split", n)
        limit = int(n)
    # cel-go: a traversal plus the result's construction; here also a Python string per part.
    parts_max = len(text) if separator == "" else text.count(separator) + 1
    if limit > 0:
        parts_max = min(parts_max, limit)
    charge(traversal_cost(len(text)) * 2 + parts_max * ELEMENT_WEIGHT)
    if limit == 0:
        return celtypes.ListType([])
    if separator == "":
        chars = list(text)
        parts = chars if limit < 0 or limit >= len(chars) else [*chars[: limit - 1], "".join(chars[limit - 1 :])]
    else:
        parts = text.split(separator) if limit < 0 else text.split(separator, limit - 1)
    return celtypes.ListType([str(p) for p in parts])


def l_join(items: Any, sep: Any = None) -> str:
    if kind(items) != "list":
        raise _overload("join", items) if sep is None else _overload("join", items, sep)
    if sep is not None:
        _need_str("join", sep)
    for x in items:
        if kind(x) != "string":
            raise ValueError(f"join: list element of type {kind(x)} is not a string")
    glue = "" if sep is None else str(sep)
    size = sum(len(x) for x in items) + len(glue) * max(0, len(items) - 1)
    charge(traversal_cost(size) * 2 + len(items) * ELEMENT_WEIGHT)  # cel-go: the result, twice
    return glue.join(str(x) for x in items)


def s_replace(s: Any, old: Any, new: Any, n: Any = None) -> str:
    _need_str("replace", s, old, new)
    count = -1
    if n is not None:
        _need_int("replace", n)
        count = int(n)
        if count < 0:
            count = -1
    text, o, n2 = str(s), str(old), str(new)
    occurrences = len(text) + 1 if not o else len(text) // len(o)
    if count >= 0:
        occurrences = min(occurrences, count)
    # cel-go: a traversal plus the result's construction; charged before building a string that may be huge.
    charge(traversal_cost(len(text)) * 2 + traversal_cost(occurrences * len(n2)))
    return text.replace(o, n2, count)


def _s_index_of(s: Any, sub: Any, offset: Any) -> celtypes.IntType:
    """cel-go indexOf: an empty needle returns the offset; otherwise the offset must be in the string."""
    _need_str("indexOf", s, sub)
    text, needle = str(s), str(sub)
    start = 0
    if offset is not None:
        _need_int("indexOf", offset)
        start = int(offset)
    if needle == "":
        return mk_int(start)
    if start < 0 or start >= len(text):
        raise ValueError(f"index out of range: {start}")
    return mk_int(text.find(needle, start))


def _s_last_index_of(s: Any, sub: Any, offset: Any) -> celtypes.IntType:
    """cel-go lastIndexOf: the last match starting at or before the offset (default: the end)."""
    _need_str("lastIndexOf", s, sub)
    text, needle = str(s), str(sub)
    if offset is None:
        if needle == "":
            return mk_int(len(text))
        off = len(text) - 1
    else:
        _need_int("lastIndexOf", offset)
        off = int(offset)
        if needle == "":
            return mk_int(off)
    if off < 0 or off >= len(text):
        raise ValueError(f"index out of range: {off}")
    return mk_int(text.rfind(needle, 0, off + len(needle)))


def s_substring(s: Any, start: Any, end: Any = None) -> str:
    _need_str("substring", s)
    _need_int("substring", start)
    text = str(s)
    charge(traversal_cost(len(text)))
    a = int(start)
    if end is None:
        if a < 0 or a > len(text):
            raise ValueError(f"index out of range: {a}")
        return text[a:]
    _need_int("substring", end)
    b = int(end)
    if a > b:
        raise ValueError(f"invalid substring range. start: {a}, end: {b}")
    for i in (a, b):
        if i < 0 or i > len(text):
            raise ValueError(f"index out of range: {i}")
    return text[a:b]


def s_char_at(s: Any, i: Any) -> str:
    _need_str("charAt", s)
    _need_int("charAt", i)
    text, k = str(s), int(i)
    if k < 0 or k > len(text):
        raise ValueError(f"index out of range: {k}")
    return text[k : k + 1]


# ---------------------------------------------------------------- lists (k8s library/lists.go)


def _need_list(fn: str, x: Any) -> list[Any]:
    if kind(x) != "list":
        raise _overload(fn, x)
    return list(x)


def index_of(x: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if kind(x) == "string":
        return _s_index_of(x, item, offset)
    if offset is not None:
        raise _overload("indexOf", x, item, offset)
    lst = _need_list("indexOf", x)
    charge(len(lst) * ELEMENT_WEIGHT)  # Kubernetes lists: one traversal
    for i, v in enumerate(lst):
        if cel_equal(v, item):
            return mk_int(i)
    return mk_int(-1)


def last_index_of(x: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if kind(x) == "string":
        return _s_last_index_of(x, item, offset)
    if offset is not None:
        raise _overload("lastIndexOf", x, item, offset)
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
        if _compare("isSorted", a, b) > 0:
            return FALSE
    return TRUE


def l_sum(x: Any) -> Any:
    lst = _need_list("sum", x)
    charge(len(lst) * ARITHMETIC_ELEMENT_WEIGHT)
    if not lst:
        return mk_int(0)
    total = lst[0]
    if kind(total) not in ("int", "uint", "double", "duration"):
        raise _overload("sum", x)
    for v in lst[1:]:
        total = op_add(total, v)
    return total


def _extreme(fn: str, x: Any, prefer: int) -> Any:
    lst = _need_list(fn, x)
    charge(len(lst) * ARITHMETIC_ELEMENT_WEIGHT)
    if not lst:
        raise ValueError(f"{fn} called on empty list")
    best = lst[0]
    if kind(best) not in _ORDERED:
        raise _overload(fn, x)
    for v in lst[1:]:
        if _compare(fn, best, v) == prefer:
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


# ---------------------------------------------------------------- macros (shared by both runners)

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
        raise _overload(fn, target)
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
        elif not _is_bool(r):
            error = error or _overload("all", r)
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
        elif not _is_bool(r):
            error = error or _overload("exists", r)
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
        if not _is_bool(r):
            raise _overload("exists_one", r)
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
            if not _is_bool(keep):
                raise _overload("map", keep)
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
        if not _is_bool(r):
            raise _overload("filter", r)
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


# ---------------------------------------------------------------- the function table

# Functions whose arguments may be CEL error values (they decide what an error means).
ERROR_AWARE = frozenset(("_&&_", "_||_", "_?_:_", "!_"))

FUNCTIONS: dict[str, Callable[..., Any]] = {
    # operators
    "_==_": op_eq,
    "_!=_": op_ne,
    "_<_": op_lt,
    "_<=_": op_le,
    "_>_": op_gt,
    "_>=_": op_ge,
    "_in_": op_in,
    "_&&_": op_and,
    "_||_": op_or,
    "!_": op_not,
    "_?_:_": op_cond,
    "_[_]": index,
    "_+_": op_add,
    "_-_": op_sub,
    "_*_": op_mul,
    "_/_": op_div,
    "_%_": op_mod,
    "-_": op_neg,
    # standard functions
    "size": size,
    "contains": s_contains,
    "startsWith": s_starts_with,
    "endsWith": s_ends_with,
    "matches": s_matches,
    "int": to_int,
    "uint": to_uint,
    "double": to_double,
    "string": to_string,
    "bool": to_bool,
    "bytes": to_bytes,
    "dyn": to_dyn,
    "type": type_of,
    # Kubernetes quantity
    "quantity": quantity,
    "isQuantity": is_quantity,
    "add": q_add,
    "sub": q_sub,
    "asInteger": q_as_integer,
    "isInteger": q_is_integer,
    "asApproximateFloat": q_as_approximate_float,
    "sign": q_sign,
    # Kubernetes semver
    "semver": semver,
    "isSemver": is_semver,
    "major": semver_major,
    "minor": semver_minor,
    "patch": semver_patch,
    # quantity and semver
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    # cel-go strings extension
    "lowerAscii": s_lower_ascii,
    "upperAscii": s_upper_ascii,
    "trim": s_trim,
    "split": s_split,
    "join": l_join,
    "replace": s_replace,
    "substring": s_substring,
    "charAt": s_char_at,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    # Kubernetes regex
    "find": s_find,
    "findAll": s_find_all,
    # Kubernetes lists
    "isSorted": l_is_sorted,
    "sum": l_sum,
    "min": l_min,
    "max": l_max,
    "includes": l_includes,
}


def error_value(e: BaseException) -> CELEvalError:
    """A raised failure as cel-python's error value; the message is kept in args[0]."""
    if isinstance(e, CELEvalError):
        return e
    return CELEvalError(reason(e), type(e), e.args)


def reason(e: BaseException) -> str:
    """A one-line, user-facing reason for a failure raised while evaluating."""
    if isinstance(e, CELEvalError):
        return str(e.args[0]) if e.args else "evaluation error"
    if isinstance(e, RecursionError):
        return "expression is nested too deeply"
    if isinstance(e, KeyError):
        text = str(e.args[0]) if e.args else "no such key"
        return text if text.startswith("no such key") else f"no such key: {text}"
    text = str(e.args[0]) if e.args and isinstance(e.args[0], str) else str(e)
    if isinstance(e, TypeError) and not text.startswith(("found no matching overload", "no such overload", "type '")):
        text = f"no such overload: {text}"
    return text.split("\n", 1)[0][:500] or type(e).__name__
