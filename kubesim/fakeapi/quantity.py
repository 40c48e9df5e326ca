"""Kubernetes resource quantities ("10Gi", "500m", "1e3") as exact fractions, for the fake's own validation.

The fake API server checks what a real one checks without borrowing the
extender's parser: a test that feeds both must be able to see them disagree.
The grammar is the API's: an optionally signed decimal number, then a binary
suffix (Ki..Ei), a decimal suffix (n, u, m, k, M..E) or an exponent (e3, E-2).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Final

# The pattern the API server names when it cannot decode a quantity.
DECODE_PATTERN: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

_NUMBER: Final = re.compile(r"^([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(.*)$")
_EXPONENT: Final = re.compile(r"^[eE]([+-]?[0-9]+)$")
_SUFFIX: Final[dict[str, Fraction]] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    """Not a quantity: the API server cannot decode the object (400)."""


def quantity(raw: Any) -> Fraction:
    """The exact value of a quantity given as a JSON string or number."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise QuantityError(f"quantities must match the regular expression '{DECODE_PATTERN}'")
    text = raw if isinstance(raw, str) else repr(raw)
    m = _NUMBER.match(text)
    if m is None:
        raise QuantityError(f"quantities must match the regular expression '{DECODE_PATTERN}'")
    sign, digits, suffix = m.groups()
    value = Fraction(digits.rstrip("."))
    exponent = _EXPONENT.match(suffix)
    if exponent is not None:
        scale = Fraction(10) ** int(exponent.group(1))
    elif suffix in _SUFFIX:
        scale = _SUFFIX[suffix]
    else:
        raise QuantityError("unable to parse quantity's suffix")
    return -value * scale if sign == "-" else value * scale


def show(q: Fraction) -> str:
    """A quantity as messages print it: the largest binary suffix that divides it whole, else the plain number."""
    if q.denominator != 1:
        return str(float(q))
    n = q.numerator
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix].numerator
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
