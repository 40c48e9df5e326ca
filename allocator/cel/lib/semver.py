"""Kubernetes' semver library (k8s.io/apiserver/pkg/cel/library/semverlib.go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes

from allocator.cel.lib.values import (
    FALSE,
    TRUE,
    UINT64_MAX,
    CelSemver,
    kind,
    mk_int,
    need_str,
    no_overload,
    parse_once,
)
from allocator.semver import parse_semver


def _normalize_semver(text: str) -> str:
    """Upstream normalizeAndParse: drop a "v", strip leading zeros, fill in minor/patch."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _parse_cel_semver(text: str) -> CelSemver:
    if len(text) > 256:
        raise ValueError("version string too long")
    v = parse_semver(text)
    if max(v.major, v.minor, v.patch) > UINT64_MAX:
        raise ValueError(f"{text!r} is not a valid semantic version: number out of range")
    return CelSemver(v)


def semver(s: Any, normalize: Any = None) -> CelSemver:
    if normalize is None:
        need_str("semver", s)
        return parse_once("s", str(s), _parse_cel_semver)
    if kind(s) != "string" or kind(normalize) != "bool":
        raise no_overload("semver", s, normalize)
    text = str(s)
    if normalize:
        text = _normalize_semver(text)
    return parse_once("s", text, _parse_cel_semver)


def is_semver(s: Any, normalize: Any = None) -> celtypes.BoolType:
    if normalize is None:
        need_str("isSemver", s)
    elif kind(s) != "string" or kind(normalize) != "bool":
        raise no_overload("isSemver", s, normalize)
    try:
        semver(s, normalize)
    except ValueError:
        return FALSE
    return TRUE


def _semver_part(name: str) -> Callable[[Any], celtypes.IntType]:
    def part(a: Any) -> celtypes.IntType:
        if kind(a) != "Semver":
            raise no_overload(name, a)
        return mk_int(getattr(a.v, name))

    part.__name__ = part.__qualname__ = f"semver_{name}"
    return part


semver_major = _semver_part("major")
semver_minor = _semver_part("minor")
semver_patch = _semver_part("patch")
