"""Label and field selectors, parsed once per request and matched per object.

The grammar is the API server's: labels accept `k`, `!k`, `k=v`, `k==v`,
`k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`; fields accept `=`,
`==` and `!=` on the fields the kind supports (others answer 400, as the
real server does, so production code can't rely on one it doesn't have).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

Matcher = Callable[[dict[str, Any]], bool]


class SelectorError(ValueError):
    """An unparsable or unsupported selector: the request answers 400."""


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([A-Za-z0-9._/-]+)\s+(in|notin)\s+\((.*)\)$")
_OP_RE = re.compile(r"^([A-Za-z0-9._/-]+)\s*(==|!=|=|>|<)\s*(.*)$")
_KEY_RE = re.compile(r"^(!?)\s*([A-Za-z0-9._/-]+)$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _value(text: str, selector: str) -> str:
    if len(text) > 63 or not _VALUE_RE.match(text):
        raise SelectorError(f"invalid label selector {selector!r}: invalid label value {text!r}")
    return text


Labels = dict[str, str]


def _in(k: str, vs: frozenset[str]) -> Callable[[Labels], bool]:
    return lambda labels: k in labels and labels[k] in vs


def _not_in(k: str, vs: frozenset[str]) -> Callable[[Labels], bool]:
    return lambda labels: k not in labels or labels[k] not in vs


def _equals(k: str, v: str) -> Callable[[Labels], bool]:
    return lambda labels: labels.get(k) == v


def _not_equals(k: str, v: str) -> Callable[[Labels], bool]:
    return lambda labels: labels.get(k) != v


def _present(k: str) -> Callable[[Labels], bool]:
    return lambda labels: k in labels


def _absent(k: str) -> Callable[[Labels], bool]:
    return lambda labels: k not in labels


def parse_label_selector(text: str | None) -> Matcher | None:
    """A predicate over an object's labels, or None to match everything."""
    if not text or not text.strip():
        return None
    reqs: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_top(text):
        m = _SET_RE.match(part)
        if m:
            key, op = m.group(1), m.group(2)
            values = frozenset(_value(v.strip(), text) for v in m.group(3).split(",") if v.strip())
            if op == "in":
                reqs.append(_in(key, values))
            else:
                reqs.append(_not_in(key, values))
            continue
        m = _OP_RE.match(part)
        if m:
            key, op, value = m.group(1), m.group(2), m.group(3).strip()
            if op in ("=", "==", "!="):
                _value(value, text)
            if op in ("=", "=="):
                reqs.append(_equals(key, value))
            elif op == "!=":
                reqs.append(_not_equals(key, value))
            else:
                try:
                    bound = int(value)
                except ValueError as e:
                    raise SelectorError(f"invalid label selector {text!r}: {value!r} is not an integer") from e
                reqs.append(_compare(key, op, bound))
            continue
        m = _KEY_RE.match(part)
        if m:
            key = m.group(2)
            if m.group(1):
                reqs.append(_absent(key))
            else:
                reqs.append(_present(key))
            continue
        raise SelectorError(f"unable to parse requirement: {part!r}")

    def match(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def _compare(key: str, op: str, bound: int) -> Callable[[dict[str, str]], bool]:
    def check(labels: dict[str, str]) -> bool:
        try:
            value = int(labels[key])
        except (KeyError, ValueError):
            return False
        return value > bound if op == ">" else value < bound

    return check


def field_value(obj: dict[str, Any], path: str) -> str:
    """A field as the server's field-selector string ("" when absent)."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, allowed: Iterable[str]) -> Matcher | None:
    """A predicate over the supported fields, or None to match everything."""
    if not text or not text.strip():
        return None
    allowed = set(allowed)
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_top(text):
        m = re.match(r"^([A-Za-z0-9._-]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise SelectorError(f"invalid field selector: {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3).strip()
        if path not in allowed:
            raise SelectorError(f"field label not supported: {path}")
        reqs.append((path, op != "!=", value))

    def match(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, path) == value) == eq for path, eq, value in reqs)

    return match


def both(a: Matcher | None, b: Matcher | None) -> Matcher | None:
    if a is None:
        return b
    if b is None:
        return a
    return lambda obj: a(obj) and b(obj)
