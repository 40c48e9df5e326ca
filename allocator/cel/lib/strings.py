"""String functions: the standard `contains`, `startsWith`, `endsWith`, and cel-go's
strings extension (ext/strings.go, version 2)."""

from __future__ import annotations

from typing import Any

from celpy import celtypes

from allocator.cel.lib.budget import ELEMENT_WEIGHT, charge, traversal_cost
from allocator.cel.lib.values import FALSE, TRUE, kind, mk_int, need_int, need_str, no_overload

_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def s_contains(s: Any, sub: Any) -> celtypes.BoolType:
    need_str("contains", s, sub)
    charge(traversal_cost(len(s)) * traversal_cost(len(sub)))  # cel-go ContainsString
    return TRUE if str(sub) in str(s) else FALSE


def s_starts_with(s: Any, prefix: Any) -> celtypes.BoolType:
    need_str("startsWith", s, prefix)
    charge(traversal_cost(len(s)))
    return TRUE if str(s).startswith(str(prefix)) else FALSE


def s_ends_with(s: Any, suffix: Any) -> celtypes.BoolType:
    need_str("endsWith", s, suffix)
    charge(traversal_cost(len(s)))
    return TRUE if str(s).endswith(str(suffix)) else FALSE


def s_lower_ascii(s: Any) -> str:
    need_str("lowerAscii", s)
    charge(traversal_cost(len(s)))
    return str(s).translate(_LOWER)


def s_upper_ascii(s: Any) -> str:
    need_str("upperAscii", s)
    charge(traversal_cost(len(s)))
    return str(s).translate(_UPPER)


def s_trim(s: Any) -> str:
    need_str("trim", s)
    charge(traversal_cost(len(s)))
    return str(s).strip()


def s_split(s: Any, sep: Any, n: Any = None) -> celtypes.ListType:
    need_str("split", s, sep)
    text, separator = str(s), str(sep)
    limit = -1
    if n is not None:
        need_int("split", n)
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
    return celtypes.ListType([str(p) for p in parts])  # type: ignore[misc]  # CEL strings are plain str here (values.py)


def l_join(items: Any, sep: Any = None) -> str:
    if kind(items) != "list":
        raise no_overload("join", items) if sep is None else no_overload("join", items, sep)
    if sep is not None:
        need_str("join", sep)
    for x in items:
        if kind(x) != "string":
            raise ValueError(f"join: list element of type {kind(x)} is not a string")
    glue = "" if sep is None else str(sep)
    size = sum(len(x) for x in items) + len(glue) * max(0, len(items) - 1)
    charge(traversal_cost(size) * 2 + len(items) * ELEMENT_WEIGHT)  # cel-go: the result, twice
    return glue.join(str(x) for x in items)


def s_replace(s: Any, old: Any, new: Any, n: Any = None) -> str:
    need_str("replace", s, old, new)
    count = -1
    if n is not None:
        need_int("replace", n)
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


def s_index_of(s: Any, sub: Any, offset: Any) -> celtypes.IntType:
    """cel-go indexOf: an empty needle returns the offset; otherwise the offset must be in the string."""
    need_str("indexOf", s, sub)
    text, needle = str(s), str(sub)
    start = 0
    if offset is not None:
        need_int("indexOf", offset)
        start = int(offset)
    if needle == "":
        return mk_int(start)
    if start < 0 or start >= len(text):
        raise ValueError(f"index out of range: {start}")
    return mk_int(text.find(needle, start))


def s_last_index_of(s: Any, sub: Any, offset: Any) -> celtypes.IntType:
    """cel-go lastIndexOf: the last match starting at or before the offset (default: the end)."""
    need_str("lastIndexOf", s, sub)
    text, needle = str(s), str(sub)
    if offset is None:
        if needle == "":
            return mk_int(len(text))
        off = len(text) - 1
    else:
        need_int("lastIndexOf", offset)
        off = int(offset)
        if needle == "":
            return mk_int(off)
    if off < 0 or off >= len(text):
        raise ValueError(f"index out of range: {off}")
    return mk_int(text.rfind(needle, 0, off + len(needle)))


def s_substring(s: Any, start: Any, end: Any = None) -> str:
    need_str("substring", s)
    need_int("substring", start)
    text = str(s)
    charge(traversal_cost(len(text)))
    a = int(start)
    if end is None:
        if a < 0 or a > len(text):
            raise ValueError(f"index out of range: {a}")
        return text[a:]
    need_int("substring", end)
    b = int(end)
    if a > b:
        raise ValueError(f"invalid substring range. start: {a}, end: {b}")
    for i in (a, b):
        if i < 0 or i > len(text):
            raise ValueError(f"index out of range: {i}")
    return text[a:b]


def s_char_at(s: Any, i: Any) -> str:
    need_str("charAt", s)
    need_int("charAt", i)
    text, k = str(s), int(i)
    if k < 0 or k > len(text):
        raise ValueError(f"index out of range: {k}")
    return text[k : k + 1]
