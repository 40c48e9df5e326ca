"""CEL's standard type conversions: int(), uint(), double(), string(), bool(), bytes(), dyn(), type()."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from celpy import celtypes

from allocator.cel.lib.values import (
    FALSE,
    INT64_MAX,
    INT64_MIN,
    TRUE,
    UINT64_MAX,
    CelTypeValue,
    kind,
    mk_double,
    mk_int,
    mk_uint,
    no_overload,
)


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
    raise no_overload("int", x)


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
        raise no_overload("uint", x)
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
    raise no_overload("double", x)


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
    raise no_overload("string", x)


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
    raise no_overload("bool", x)


def to_bytes(x: Any) -> celtypes.BytesType:
    k = kind(x)
    if k == "bytes":
        return celtypes.BytesType(x)
    if k == "string":
        return celtypes.BytesType(str(x).encode("utf-8"))
    raise no_overload("bytes", x)


def to_dyn(x: Any) -> Any:
    return x


def type_of(x: Any) -> CelTypeValue:
    return CelTypeValue(kind(x))
