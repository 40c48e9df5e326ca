"""`spec.taint.timeAdded` of the project's CRD rules, kept as upstream's API server keeps it for its own.

upstream (`pkg/registry/resource/devicetaintrule/strategy.go`) sets
timeAdded when a rule is created and bumps it when the effect changes and
the client did not change timeAdded itself, so `tolerationSeconds` counts
from when the *effect* arrived: a rule switched from None to NoExecute gives
pods their full toleration. A CRD has no such strategy, so the controller
does it, remembering in `status.stampedTaint` which effect and time it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STAMP_FIELD = "stampedTaint"


@dataclass(frozen=True, slots=True)
class StampedTaint:
    """What `decide` reads of a rule: its taint's effect and timeAdded, and the record of our last stamp."""

    effect: str
    time_added: str
    recorded: Mapping[str, Any] | None  # status.stampedTaint, when it is an object

    @staticmethod
    def of(raw: Mapping[str, Any]) -> StampedTaint:
        taint = (raw.get("spec") or {}).get("taint") or {}
        if not isinstance(taint, Mapping):
            taint = {}
        recorded = (raw.get("status") or {}).get(STAMP_FIELD)
        return StampedTaint(
            str(taint.get("effect") or ""), str(taint.get("timeAdded") or ""), recorded if isinstance(recorded, dict) else None
        )


@dataclass(frozen=True, slots=True)
class Stamp:
    """What to write for one rule: `time_added` into the spec (if set), `record` into the status."""

    time_added: str | None
    record: dict[str, str]

    @property
    def effective(self) -> str:
        return self.record["timeAdded"]


def decide(rule: StampedTaint, now: str) -> Stamp | None:
    """None when the rule's timeAdded is current; else what to write.

    - no timeAdded: stamp now;
    - never recorded: adopt the rule's timeAdded (a restart, or a rule written
      with its own time) by recording it;
    - effect changed since the record and timeAdded did not: stamp now;
    - effect changed and timeAdded changed too: the writer set it, adopt.
    """
    effect, time_added, recorded = rule.effect, rule.time_added, rule.recorded
    if not time_added:
        return Stamp(now, {"effect": effect, "timeAdded": now})
    if recorded is None:
        return Stamp(None, {"effect": effect, "timeAdded": time_added})
    if recorded.get("effect") == effect:
        if recorded.get("timeAdded") == time_added:
            return None
        return Stamp(None, {"effect": effect, "timeAdded": time_added})  # the writer moved it
    if recorded.get("timeAdded") == time_added:
        return Stamp(now, {"effect": effect, "timeAdded": now})
    return Stamp(None, {"effect": effect, "timeAdded": time_added})
