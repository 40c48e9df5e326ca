"""argparse value types shared by the extender's commands (serve, webhook): one wording for each mistake."""

from __future__ import annotations

import argparse


def short_seconds(value: str) -> float:
    """A delay of 0 to 60 seconds."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not 0 <= seconds <= 60:
        raise argparse.ArgumentTypeError(f"expected 0 to 60 seconds, got {value!r}")
    return seconds


def count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value!r}")
    return n


def positive_seconds(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return v
