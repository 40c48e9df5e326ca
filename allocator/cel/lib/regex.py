"""Regular expressions: the standard `matches` and Kubernetes' regex library
(k8s.io/apiserver/pkg/cel/library/regex.go: `find`, `findAll`), on RE2 as cel-go."""

from __future__ import annotations

from typing import Any

import re2
from celpy import celtypes

from allocator.cel.lib.budget import MATCH_WEIGHT, charge, charge_once, regex_charge
from allocator.cel.lib.values import FALSE, TRUE, need_int, need_str

# RE2's memory budget: a compiled program may use about two thirds of it, ~43,000
# instructions here, which bounds one compile to ~15 ms (RE2 compiles ~0.4 us per
# instruction; the default 8 MiB lets `\pL{1000}` run 50-90 ms before failing). Patterns
# people write compile to tens or hundreds of instructions.
RE2_MAX_MEM = 1 << 20
# Budget units per compiled instruction, charged once per evaluation and pattern (as if
# compiled for it): 1,000,000 units are 50,000 instructions, 20-35 ms of compiling, so one that
# builds many distinct large patterns runs out of budget within its time bound.
PROGRAM_WEIGHT = 20
# A pattern refused for its size used the whole program budget before RE2 gave up.
FAILED_PROGRAM_SIZE = RE2_MAX_MEM * 2 // 3 // 16

_MAX_CACHED = 1024
_REGEXES: dict[str, tuple[Any, int] | ValueError] = {}  # pattern -> (regex, charge) or why it failed
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an invalid pattern is the user's error, reported by us
_RE2_OPTIONS.max_mem = RE2_MAX_MEM


def _compile(pattern: str) -> tuple[Any, int] | ValueError:
    try:
        rx = re2.compile(pattern, _RE2_OPTIONS)
    except Exception as e:
        detail = e.args[0] if e.args else e
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        too_large = "too large" in str(detail)
        err = ValueError(f"invalid regular expression {pattern!r}: {detail}")
        err.program_cost = (FAILED_PROGRAM_SIZE if too_large else 0) * PROGRAM_WEIGHT  # type: ignore[attr-defined]
        return err
    return rx, int(rx.programsize) * PROGRAM_WEIGHT


def _cached(pattern: str) -> tuple[Any, int] | ValueError:
    """Compiled once per pattern, failures too (a pattern that is too large must not cost a compile at every use)."""
    got = _REGEXES.get(pattern)
    if got is None:
        got = _compile(pattern)
        if len(_REGEXES) >= _MAX_CACHED:
            _REGEXES.clear()
        _REGEXES[pattern] = got
    return got


def clear_cache() -> None:
    """Forget every compiled pattern (benchmarks measure cold compiles)."""
    _REGEXES.clear()


def compile_regex(pattern: str) -> Any:
    """RE2, as cel-go; compiled once per pattern. Raises ValueError for a bad or too large pattern."""
    got = _cached(pattern)
    if isinstance(got, ValueError):
        raise ValueError(*got.args) from None
    return got[0]


def charged_regex(pattern: str) -> Any:
    """compile_regex during an evaluation: the program's size is charged once per evaluation and
    pattern, cached or not, so an expression costs the same whatever the cache holds."""
    got = _cached(pattern)
    if isinstance(got, ValueError):
        charge_once(pattern, getattr(got, "program_cost", 0))
        raise ValueError(*got.args) from None
    charge_once(pattern, got[1])
    return got[0]


def s_matches(s: Any, pattern: Any) -> celtypes.BoolType:
    need_str("matches", s, pattern)
    regex_charge(s, pattern)
    return TRUE if charged_regex(str(pattern)).search(str(s)) is not None else FALSE


def s_find(s: Any, pattern: Any) -> str:
    need_str("find", s, pattern)
    regex_charge(s, pattern)
    m = charged_regex(str(pattern)).search(str(s))
    return str(m.group(0)) if m is not None else ""


def s_find_all(s: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    need_str("findAll", s, pattern)
    n = -1
    if limit is not None:
        need_int("findAll", limit)
        n = int(limit)
    regex_charge(s, pattern)
    if n == 0:
        return celtypes.ListType([])
    out = []
    for m in charged_regex(str(pattern)).finditer(str(s)):
        charge(MATCH_WEIGHT)  # each match is built in Python: far slower than the scan
        out.append(str(m.group(0)))
        if 0 < n <= len(out):
            break
    return celtypes.ListType(out)  # type: ignore[arg-type]  # CEL strings are plain str here (values.py)
