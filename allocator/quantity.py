"""Kubernetes resource.Quantity as an exact value.

Capacity and CEL `quantity()` compare by value ("1Gi" == "1024Mi"), so the
value is kept as a Fraction; the original spelling is kept for display.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_EXPONENT_RE = re.compile(r"^[eE]([+-]?[0-9]+)$")
# Bounds that keep exact arithmetic cheap: "1e999999999" would otherwise build a
# billion-digit integer (a hang on hostile input); no real quantity comes near them.
MAX_QUANTITY_LENGTH = 1024
MAX_EXPONENT = 1000


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


@dataclass(frozen=True, slots=True, order=False)
class Quantity:
    value: Fraction
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.text or format_quantity(self.value)

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        return self.value >= other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value


def parse_quantity(raw: str | int | float) -> Quantity:
    """Parse a quantity as the API server does (`10Gi`, `100m`, `1e3`, `5`)."""
    if isinstance(raw, bool):
        raise QuantityError(f"quantity must be a string or number, not {raw!r}")
    if isinstance(raw, int):
        return Quantity(Fraction(raw), str(raw))
    if isinstance(raw, float):
        return Quantity(Fraction(raw).limit_denominator(10**9), repr(raw))
    if not isinstance(raw, str):
        raise QuantityError(f"quantity must be a string or number, not {type(raw).__name__}")
    text = raw.strip()
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(f"quantity is longer than {MAX_QUANTITY_LENGTH} characters")
    match = _QUANTITY_RE.match(text)
    if not match:
        raise QuantityError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {raw!r}")
    number, suffix = match.groups()
    value = Fraction(number)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        exp = _EXPONENT_RE.match(suffix)
        if not exp:
            raise QuantityError(f"unable to parse quantity's suffix {suffix!r} in {raw!r}")
        exponent = int(exp.group(1))
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"quantity exponent out of range in {raw!r}")
        value *= Fraction(10) ** exponent
    return Quantity(value, text)


def format_quantity(value: Fraction | int) -> str:
    """A canonical-ish spelling for computed values (sums, patched capacity)."""
    if value.denominator == 1:
        n = value.numerator
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            base = _BINARY[suffix]
            if n != 0 and n % base == 0 and abs(n) >= base:
                return f"{n // base}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 10**9
    return f"{round(nano)}n"
