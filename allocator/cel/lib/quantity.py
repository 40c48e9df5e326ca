"""Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from celpy import celtypes

from allocator.cel.lib.values import (
    FALSE,
    INT64_MAX,
    INT64_MIN,
    TRUE,
    CelQuantity,
    kind,
    mk_double,
    mk_int,
    need_str,
    no_overload,
    parse_once,
)
from allocator.quantity import Quantity, format_quantity, parse_quantity


def _parse_cel_quantity(text: str) -> CelQuantity:
    if not text or text != text.strip() or len(text) > 256:
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    return CelQuantity(parse_quantity(text))


def quantity(s: Any) -> CelQuantity:
    need_str("quantity", s)
    return parse_once("q", str(s), _parse_cel_quantity)


def is_quantity(s: Any) -> celtypes.BoolType:
    need_str("isQuantity", s)
    try:
        quantity(s)
    except ValueError:
        return FALSE
    return TRUE


def _q(fn: str, *args: Any) -> None:
    if kind(args[0]) != "Quantity":
        raise no_overload(fn, *args)


def _q_operand(fn: str, a: Any, b: Any) -> Fraction:
    kb = kind(b)
    if kb == "Quantity":
        value: Fraction = b.q.value
        return value
    if kb == "int":
        return Fraction(int(b))
    raise no_overload(fn, a, b)


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
