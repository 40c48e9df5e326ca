"""Regular expressions: the standard `matches` and Kubernetes' regex library
(k8s.io/apiserver/pkg/cel/library/regex.go: `find`, `findAll`), on RE2 as cel-go."""

from __future__ import annotations

from typing import Any

import re2
from celpy import celtypes

from allocator.cel.lib.budget import MATCH_WEIGHT, charge, regex_charge
from allocator.cel.lib.values import FALSE, TRUE, need_int, need_str

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
    need_str("matches", s, pattern)
    regex_charge(s, pattern)
    return TRUE if compile_regex(str(pattern)).search(str(s)) is not None else FALSE


def s_find(s: Any, pattern: Any) -> str:
    need_str("find", s, pattern)
    regex_charge(s, pattern)
    m = compile_regex(str(pattern)).search(str(s))
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
    for m in compile_regex(str(pattern)).finditer(str(s)):
        charge(MATCH_WEIGHT)  # each match is built in Python: far slower than the scan
        out.append(str(m.group(0)))
        if 0 < n <= len(out):
            break
    return celtypes.ListType(out)  # type: ignore[arg-type]  # CEL strings are plain str here (values.py)
