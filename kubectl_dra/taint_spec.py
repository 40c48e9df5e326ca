"""`KEY[=VALUE]:EFFECT` as `kubectl taint` writes it, with errors that name the wrong part."""

from __future__ import annotations

from dataclasses import dataclass

from allocator.api_limits import (
    LABEL_VALUE,
    TAINT_KEY_MAX,
    TAINT_VALUE_MAX,
    is_qualified_name,
)
from allocator.types import EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, EFFECT_NONE

EFFECTS = (EFFECT_NONE, EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE)


class TaintSyntaxError(ValueError):
    """A taint argument that a cluster would refuse; the message names the part and the expected form."""


@dataclass(frozen=True, slots=True)
class TaintSpec:
    key: str
    value: str
    effect: str

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def _key(key: str, text: str) -> str:
    if not key:
        raise TaintSyntaxError(
            f"taint {text!r}: the key is empty; expected KEY[=VALUE]:EFFECT, e.g. example.com/maintenance=planned:NoSchedule"
        )
    if len(key) > TAINT_KEY_MAX:
        raise TaintSyntaxError(f"taint {text!r}: the key is longer than {TAINT_KEY_MAX} characters")
    if not is_qualified_name(key):
        raise TaintSyntaxError(
            f"taint {text!r}: the key {key!r} is not a qualified name ([DNS-subdomain prefix/]name of letters, digits, "
            "'-', '_', '.', starting and ending alphanumeric), e.g. example.com/maintenance"
        )
    return key


def _effect(effect: str, text: str) -> str:
    if effect not in EFFECTS:
        near = [e for e in EFFECTS if e.lower() == effect.lower()]
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise TaintSyntaxError(f"taint {text!r}: the effect {effect!r} is not one of {', '.join(EFFECTS)}{hint}")
    return effect


def parse_taint(text: str) -> TaintSpec:
    """KEY[=VALUE]:EFFECT."""
    body, colon, effect = text.rpartition(":")
    if not colon:
        raise TaintSyntaxError(
            f"taint {text!r}: the effect is missing; expected KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(EFFECTS)}"
        )
    if not effect:
        raise TaintSyntaxError(f"taint {text!r}: the effect after ':' is empty; expected one of {', '.join(EFFECTS)}")
    key, eq, value = body.partition("=")
    _key(key, text)
    if eq:
        if len(value) > TAINT_VALUE_MAX:
            raise TaintSyntaxError(f"taint {text!r}: the value is longer than {TAINT_VALUE_MAX} characters")
        if not LABEL_VALUE.fullmatch(value):
            raise TaintSyntaxError(
                f"taint {text!r}: the value {value!r} is not a label value (letters, digits, '-', '_', '.', "
                "starting and ending alphanumeric)"
            )
    return TaintSpec(key, value, _effect(effect, text))


def parse_key_effect(text: str) -> tuple[str, str | None]:
    """KEY[:EFFECT] for untaint (a value is not part of what identifies the taint)."""
    key, colon, effect = text.partition(":")
    if "=" in key:
        raise TaintSyntaxError(f"untaint {text!r}: give KEY[:EFFECT] without a value")
    _key(key, text)
    return key, (_effect(effect, text) if colon else None)
