"""The `EvictionInProgress` condition of the DeviceTaintRules we own, in upstream's exact words.

Wording and reasons follow kube-controller-manager's device-taint-eviction
controller (`pkg/controller/devicetainteviction`), so tools and people who
read upstream rules read ours the same way. Writes are throttled: at most
one every `STATUS_PERIOD` seconds for the same generation; a spec change
(new generation) is answered at once. An `effect: None` rule gets its dry
run once per generation, as its message promises. One difference: for an
effect this version does not know, the message says plainly that nothing is
evicted or blocked (upstream's words, "Eviction only happens for the
NoExecute effect.", read like a drain that has not started yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.tolerations import unknown_effect
from allocator.types import EFFECT_NO_EXECUTE, EFFECT_NONE
from controllers.eviction.plan import DryRun
from controllers.eviction.rule_checks import INVALID
from tracker.clock import parse_time

CONDITION = "EvictionInProgress"
READY = "Ready"  # ours, not upstream's: whether the rule selects what it says (rule_checks.py)
STATUS_PERIOD = 10.0


@dataclass(frozen=True, slots=True)
class RuleCounts:
    """What the controller knows about one rule right now."""

    pending_pods: int = 0
    pending_namespaces: int = 0
    evicted: int = 0  # since this controller started
    refused: int = 0  # evictions a PodDisruptionBudget refused (evict mode)


def _n(count: int, one: str, many: str) -> str:
    return one if count == 1 else many.format(count)


def condition(effect: str, counts: RuleCounts, dry: DryRun | None, generation: int) -> dict[str, Any]:
    """The condition without lastTransitionTime (set when it is written)."""
    status, message = "False", ""
    if effect == EFFECT_NO_EXECUTE:
        if counts.pending_pods > 0:
            status, reason = "True", "PodsPendingEviction"
            message = _n(counts.pending_pods, "1 pod needs to be evicted in ", "{} pods need to be evicted in ")
            message += _n(counts.pending_namespaces, "1 namespace.", "{} different namespaces.")
        elif counts.evicted > 0:
            reason = "Completed"
        else:
            reason = "NotStarted"
    elif effect == EFFECT_NONE:
        reason = "NoEffect"
        d = dry or DryRun(0, 0, 0, 0)
        message += _n(d.published_devices, "1 published device selected. ", "{} published devices selected. ")
        message += _n(d.allocated_devices, "1 allocated device selected. ", "{} allocated devices selected. ")
        message += _n(d.pods, "1 pod would be evicted in ", "{} pods would be evicted in ")
        message += _n(d.namespaces, "1 namespace ", "{} different namespaces ")
        message += (
            "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update."
        )
    else:
        reason = "OtherEffect"
        plainly = unknown_effect(effect)
        message = f"The rule has an {plainly}." if plainly else "Eviction only happens for the NoExecute effect."
    if counts.evicted > 0:
        message += (" " if message else "") + _n(counts.evicted, "1 pod ", "{} pods ") + "evicted since starting the controller."
    if counts.refused > 0:
        message += (" " if message else "") + _n(
            counts.refused,
            "1 eviction refused by a PodDisruptionBudget (retrying).",
            "{} evictions refused by a PodDisruptionBudget (retrying).",
        )
    return {"type": CONDITION, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def ready(problems: Sequence[str], generation: int) -> dict[str, Any]:
    """The `Ready` condition (without lastTransitionTime): False while a selector or the effect makes the rule do less than written.

    Upstream's rules carry no such condition; a selector that fails at run
    time is otherwise only a Warning Event, which `kubectl get` never shows.
    """
    invalid = [p.removeprefix(INVALID) for p in problems if p.startswith(INVALID)]
    if invalid:
        status, reason, message = "False", "InvalidSelector", "; ".join(invalid)
    elif problems:
        status, reason, message = "False", "UnknownEffect", "; ".join(problems)
    else:
        status, reason, message = "True", "Valid", ""
    return {"type": READY, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def existing(raw_status: Mapping[str, Any] | None, type_: str = CONDITION) -> dict[str, Any] | None:
    for c in (raw_status or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    if a is None:
        return False
    return all(a.get(k) == b.get(k) for k in ("status", "reason", "message", "observedGeneration"))


def next_write(current: Mapping[str, Any] | None, effect: str, generation: int, last_written: float | None) -> float | None:
    """The earliest time a new condition may be written: 0.0 for now, None for never (this generation).

    `last_written` is this controller's own last write for this generation,
    which counts before the watch has brought it back.
    """
    times: list[float] = []
    if current is not None and current.get("observedGeneration") == generation:
        if effect == EFFECT_NONE and current.get("reason") == "NoEffect":
            return None  # "This information will not be updated again."
        times.append(parse_time(str(current.get("lastTransitionTime") or "")) or 0.0)
    if last_written is not None:
        times.append(last_written)
    if not times:
        return 0.0  # a new generation (or nothing written yet): at once
    return max(times) + STATUS_PERIOD


def with_conditions(raw_status: Mapping[str, Any] | None, *new: dict[str, Any]) -> list[dict[str, Any]]:
    """The full conditions list with ours replaced where they were, new ones last (a merge patch replaces lists whole)."""
    by_type = {c["type"]: c for c in new}
    out = []
    for c in (raw_status or {}).get("conditions") or ():
        if isinstance(c, dict):
            out.append(by_type.pop(str(c.get("type")), c))  # in place: readers of the list see a stable order
    return [*out, *by_type.values()]
