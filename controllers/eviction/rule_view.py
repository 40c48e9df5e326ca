"""What the eviction controller reads of a DeviceTaintRule beyond the tracker's parsed rule, parsed once at intake.

The tracker's `DeviceTaintRule` holds what selects devices and the taint as it
applies; the controller also needs the rule's status (its stamp record, its
conditions, who wrote them) and the effect as written, valid or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controllers.eviction.rule_time import StampedTaint

# kube-controller-manager's controller name: its field manager on the conditions it writes.
IN_TREE_MANAGER = "device-taint-eviction-controller"


@dataclass(frozen=True, slots=True)
class RuleView:
    group: str
    name: str
    uid: str
    api_version: str
    effect: str | None  # spec.taint.effect when it is a string
    stamped: StampedTaint
    status: Mapping[str, Any]  # kept as written: its conditions list is written back whole
    in_tree_status: bool  # kube-controller-manager's eviction controller wrote its status

    @property
    def ident(self) -> tuple[str, str]:
        return self.group, self.name

    @property
    def source(self) -> str:
        """As the tracker's parsed rule names itself (`DeviceTaintRule.source`): the eviction metrics' `rule` label."""
        return f"DeviceTaintRule/{self.group}/{self.name}"

    @staticmethod
    def of(group: str, name: str, raw: Mapping[str, Any]) -> RuleView:
        meta = raw.get("metadata") or {}
        taint = (raw.get("spec") or {}).get("taint") or {}
        effect = taint.get("effect") if isinstance(taint, dict) else None
        return RuleView(
            group,
            name,
            str(meta.get("uid") or ""),
            str(raw.get("apiVersion") or ""),
            effect if isinstance(effect, str) else None,
            StampedTaint.of(raw),
            raw.get("status") or {},
            _in_tree_status(meta),
        )


def _in_tree_status(meta: Mapping[str, Any]) -> bool:
    for entry in meta.get("managedFields") or ():
        if isinstance(entry, dict) and entry.get("manager") == IN_TREE_MANAGER and entry.get("subresource") == "status":
            return True
    return False
