"""CEL values on top of cel-python's types: constructors, Kubernetes value types, kinds, errors.

Every library function *raises* on failure (ValueError for a CEL error,
TypeError for a missing overload, KeyError for a missing key) with a message
meant for users; `error_value` and `reason` turn that into cel-python's error
value and a one-line reason.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any, TypeVar

from celpy import celtypes
from celpy.evaluation import CELEvalError

from allocator.quantity import Quantity
from allocator.semver import Semver

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


NUMERIC_KINDS = frozenset(("int", "uint", "double"))
ORDERED_KINDS = frozenset(("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"))


def no_overload(fn: str, *args: Any) -> TypeError:
    return TypeError(f"found no matching overload for '{fn}' applied to '({', '.join(kind(a) for a in args)})'")


# ---------------------------------------------------------------- argument checks


def need_str(fn: str, *args: Any) -> None:
    for a in args:
        if kind(a) != "string":
            raise no_overload(fn, *args)


def need_int(fn: str, *args: Any) -> None:
    for a in args:
        if kind(a) != "int":
            raise no_overload(fn, *args)


# ---------------------------------------------------------------- literal memo

T = TypeVar("T")

_PARSED: dict[tuple[str, str], Any] = {}  # (tag, text) -> parsed value or ValueError
_PARSED_MAX = 4096


def parse_once(tag: str, text: str, parse: Callable[[str], T]) -> T:
    """Selectors mostly parse literals (`quantity("10Gi")`): parse each text once."""
    key = (tag, text)
    hit: T | ValueError | None = _PARSED.get(key)
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


# ---------------------------------------------------------------- errors


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
