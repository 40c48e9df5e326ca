"""The Events the eviction controller records: on pods it evicts, on rules and volumes it has news about.

All but the one written before a deletion (its reason) are fire and forget:
the source logs a failure, and a cancellation or a log line must not wait
on the API server. Announcements are made once (per rule and effect, per
volume taint).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from allocator.tolerations import unknown_effect
from allocator.types import DeviceTaint
from controllers.eviction.plan import PodEviction
from controllers.eviction.rule_view import RuleView
from tracker.leadership_gate import MayWrite
from tracker.source import EventWriter
from tracker.volumes import VolumeTaints

log = logging.getLogger("dra_extender.eviction")

EVENT_REASON = "DeviceTaintManagerEviction"
VOLUME_EVENT_REASON = "VolumeTaintManagerEviction"
UNKNOWN_EFFECT_REASON = "UnknownTaintEffect"


class Events:
    def __init__(self, source: EventWriter, leadership: MayWrite) -> None:
        self.source = source
        self.leadership = leadership
        self._unknown_effects: dict[tuple[str, str], tuple[str, str]] = {}  # (group, name) -> (uid, effect) announced
        self._not_effective: set[tuple[str, str, str]] = set()  # (volume uid or key, kind, taint) announced

    def send(self, event: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self.source.create_event(event))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # ------------------------------------------------------------------ pods

    @staticmethod
    def _on_pod(p: PodEviction, message: str, *, warning: bool = False) -> dict[str, Any]:
        return {
            "type": "Warning" if warning else "Normal",
            "reason": VOLUME_EVENT_REASON if p.volume else EVENT_REASON,
            "message": message,
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": p.namespace, "name": p.name, "uid": p.uid},
        }

    def pod(self, p: PodEviction, message: str, *, warning: bool = False) -> None:
        self.send(self._on_pod(p, message, warning=warning))

    async def pod_now(self, p: PodEviction, message: str) -> None:
        """Written before the pod's deletion, as its reason."""
        await self.source.create_event(self._on_pod(p, message))

    # ------------------------------------------------------------------ rules

    def unknown_effect(self, rule: RuleView) -> None:
        """A rule whose effect this version does not know acts like None (as upstream's); say so on
        the rule, so a typo such as `Evict-Everything` is not silent.

        Once per effect as written, not per generation: our own timeAdded
        stamp (and any edit that keeps the effect) bumps the generation
        without news about the effect.
        """
        effect = rule.effect
        plainly = unknown_effect(effect) if effect is not None else None
        if effect is None or plainly is None:
            self._unknown_effects.pop(rule.ident, None)  # fixed: a later unknown effect is announced anew
            return
        if not self.leadership.may_write():
            return
        seen = (rule.uid, effect)
        if self._unknown_effects.get(rule.ident) == seen:
            return
        self._unknown_effects[rule.ident] = seen
        message = f"spec.taint.effect: {plainly}"
        log.warning(
            "DeviceTaintRule has an unknown taint effect",
            extra={"rule": rule.name, "group": rule.group, "field": "spec.taint.effect", "effect": effect},
        )
        involved = {"apiVersion": rule.api_version, "kind": "DeviceTaintRule", "name": rule.name, "uid": rule.uid}
        self.send({"type": "Warning", "reason": UNKNOWN_EFFECT_REASON, "message": message, "involvedObject": involved})

    def forget(self, rule: RuleView) -> None:
        """The rule was deleted."""
        self._unknown_effects.pop(rule.ident, None)

    def two_controllers(self, name: str, uid: str, group: str) -> None:
        message = (
            "kube-controller-manager's device-taint-eviction controller also writes this rule's status: with "
            "--evict-upstream both controllers evict for it; disable one of them"
        )
        log.warning(message, extra={"rule": name, "group": group})
        involved = {"apiVersion": self.source.api_version("DeviceTaintRule", group), "kind": "DeviceTaintRule", "name": name, "uid": uid}
        self.send({"type": "Warning", "reason": "TwoEvictionControllers", "message": message, "involvedObject": involved})

    # ------------------------------------------------------------------ volumes

    def not_effective(self, found: list[tuple[VolumeTaints, DeviceTaint, list[str]]]) -> None:
        """One Event per NoAttachOrMount taint that pods already using the volume ignore.

        A taint removed and added again is announced again.
        """
        self._not_effective &= {(v.uid or v.key, v.kind, str(t)) for v, t, _ in found}
        for volume, taint, pods in found:
            ident = (volume.uid or volume.key, volume.kind, str(taint))
            if ident in self._not_effective:
                continue
            self._not_effective.add(ident)
            message = (
                f"taint {taint} is not effective for pods already using the volume: {', '.join(pods)} "
                "(NoAttachOrMount only keeps new pods off; use NoUse to evict)"
            )
            log.info(
                "volume taint not effective for running pods", extra={"volume": volume.label, "taints": str(taint), "pods": ",".join(pods)}
            )
            namespace, _, name = volume.key.rpartition("/")
            involved = {"apiVersion": "v1", "kind": volume.kind, "name": name, **({"namespace": namespace} if namespace else {})}
            if volume.uid:
                involved["uid"] = volume.uid
            self.send({"type": "Normal", "reason": "VolumeTaintNotEffective", "message": message, "involvedObject": involved})
