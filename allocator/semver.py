"""Semantic versions (semver 2.0.0) for `version` device attributes and CEL `semver()`.

Precedence follows semver.org: build metadata is ignored, a pre-release sorts
before its release, numeric identifiers compare numerically and sort before
alphanumeric ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


# (major, minor, patch, 1 for a release else 0, pre-release identifiers as (kind, number, text))
PrecedenceKey = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]

MAX_SEMVER_LENGTH = 256  # upstream allows 64 characters in a version attribute


class SemverError(ValueError):
    """A string that is not a semantic version."""


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = field(default="", compare=False)
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.text or (
            f"{self.major}.{self.minor}.{self.patch}"
            + (f"-{'.'.join(self.prerelease)}" if self.prerelease else "")
            + (f"+{self.build}" if self.build else "")
        )

    def _key(self) -> PrecedenceKey:
        # A release (no pre-release) sorts after every pre-release of it.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def precedence_key(self) -> PrecedenceKey:
        """A key that orders versions by semver precedence (equal keys: equal precedence)."""
        return self._key()

    def compare(self, other: Semver) -> int:
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __gt__(self, other: Semver) -> bool:
        return self.compare(other) > 0

    def __le__(self, other: Semver) -> bool:
        return self.compare(other) <= 0

    def __ge__(self, other: Semver) -> bool:
        return self.compare(other) >= 0


def parse_semver(text: str) -> Semver:
    if not isinstance(text, str):
        raise SemverError(f"version must be a string, not {type(text).__name__}")
    if len(text) > MAX_SEMVER_LENGTH:  # also keeps int() below the interpreter's digit limit
        raise SemverError(f"version is longer than {MAX_SEMVER_LENGTH} characters")
    m = _SEMVER_RE.match(text)
    if not m:
        raise SemverError(f"{text!r} is not a valid semantic version")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, m.group(5) or "", text)
