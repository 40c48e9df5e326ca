"""What the eviction controller reads of a pod beyond its parsed `Pod`: conditions and volume tolerations, parsed at intake."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.types import DeviceToleration, Pod


def _text(value: object) -> str:
    """A field that should be a string; anything else reads as absent."""
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    status: str
    reason: str


@dataclass(frozen=True, slots=True)
class PodStatus:
    uid: str
    conditions: tuple[PodCondition, ...] = ()  # status.conditions, in order
    # The tolerations of volume taints (the pod's annotation); a malformed one counts as none,
    # as at /filter, which reports it.
    volume_tolerations: tuple[DeviceToleration, ...] = ()

    @staticmethod
    def of(raw: Mapping[str, Any], pod: Pod) -> PodStatus:
        """The conditions from `raw`; the volume tolerations as `parse_pod` read them into `pod` (parsed once)."""
        meta = raw.get("metadata") or {}
        conditions = tuple(
            PodCondition(_text(c.get("type")), _text(c.get("status")), _text(c.get("reason")))
            for c in (raw.get("status") or {}).get("conditions") or ()
            if isinstance(c, dict)
        )
        return PodStatus(str(meta.get("uid") or ""), conditions, pod.volume_tolerations)

    def condition(self, type_: str, reasons: frozenset[str]) -> PodCondition | None:
        """The first condition of `type_` with one of `reasons`."""
        for c in self.conditions:
            if c.type == type_ and c.reason in reasons:
                return c
        return None
