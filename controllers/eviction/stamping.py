"""When each taint was added, and `timeAdded` written where the API keeps it so a restart keeps the clock.

Our CRD rules get `spec.taint.timeAdded` as upstream's API server gives its
own (`rule_time.py`); `NoUse` volume taints without a time get one in their
annotation. Until such a write comes back through the watch, the plan uses
the time written; a driver taint without a time counts from first sight.
"""

from __future__ import annotations

import dataclasses
import logging

from allocator.types import EFFECT_NO_EXECUTE, DeviceID, DeviceTaint
from controllers.eviction import rule_time
from controllers.eviction.intake import Intake
from controllers.eviction.plan import device_origin, device_taints
from tracker import events as ev
from tracker.clock import Deadlines, format_time, parse_time
from tracker.source import NotFound, RuleStatusWriter, SourceError, VolumeTaintWriter
from tracker.state import ClusterState
from tracker.volumes import VolumeTaints, stamp_time_added

log = logging.getLogger("dra_extender.eviction")


class RuleStamps:
    """timeAdded of device taints, and its writes into our CRD rules."""

    def __init__(self, intake: Intake, source: RuleStatusWriter, deadlines: Deadlines) -> None:
        self.intake = intake
        self.source = source
        self.deadlines = deadlines
        self._stamps: dict[tuple[str, str, str], rule_time.Stamp] = {}  # (group, name, uid) -> written, not yet seen
        self._first_seen: dict[tuple[DeviceID, str], float] = {}  # (device, taint) -> first sight of a taint without timeAdded

    def forget(self, ident: tuple[str, str]) -> None:
        """The rule (group, name) was deleted."""
        for key in [k for k in self._stamps if k[:2] == ident]:
            del self._stamps[key]

    def taint_time(self, did: DeviceID, taint: DeviceTaint, source: str) -> float:
        """timeAdded as epoch seconds: our pending stamp for CRD rules, first sight for a slice taint without one."""
        now = self.deadlines.clock.now
        origin = device_origin(source)
        if origin.ours and origin.rule is not None:
            rule = self.intake.rules.get(origin.rule)
            if rule is not None:
                stamp = self._stamps.get((*origin.rule, rule.uid))
                if stamp is not None:
                    return parse_time(stamp.effective) or now()
        t = parse_time(taint.time_added)
        if t is not None:
            return t
        return self._first_seen.setdefault((did, str(taint)), now())

    def forget_gone_taints(self) -> None:
        """Forget the first sight of taints no longer on their device (the slice or rule dropped them).

        A taint's text includes its effect, so one whose effect changed is a new
        taint, as it was before; the dry run of an `effect: None` rule asks about
        the taint as if it were NoExecute, which keeps that entry too.
        """
        if not self._first_seen:
            return
        state = self.intake.state
        live: set[tuple[DeviceID, str]] = set()
        for did in {did for did, _ in self._first_seen}:
            for taint, _ in device_taints(state, did):
                live.add((did, str(taint)))
                live.add((did, str(dataclasses.replace(taint, effect=EFFECT_NO_EXECUTE))))
        self._first_seen = {k: t for k, t in self._first_seen.items() if k in live}

    async def stamp(self) -> bool:
        """Write what our rules lack; True when a taint's time may have moved (the plan is to be recomputed)."""
        moved = False
        now = format_time(self.deadlines.clock.now())
        for rule in list(self.intake.rules.values()):
            if rule.group != ev.GROUP_EXTENDER:
                continue  # upstream's API server stamps its own rules
            decision = rule_time.decide(rule.stamped, now)
            key = (rule.group, rule.name, rule.uid)
            if decision is None:
                self._stamps.pop(key, None)
                continue
            pending = self._stamps.get(key)
            if pending is not None and pending.record["effect"] == decision.record["effect"]:
                continue  # written; the watch has not brought it back yet
            self._stamps[key] = decision
            moved = True
            await self._write(key, decision)
        return moved

    async def _write(self, key: tuple[str, str, str], decision: rule_time.Stamp) -> None:
        group, name, _ = key
        try:
            if decision.time_added is not None:
                await self.source.update_rule_time_added(group, name, decision.time_added)
                log.info(
                    "stamped timeAdded on rule",
                    extra={"rule": name, "group": group, "timeAdded": decision.time_added, "effect": decision.record["effect"]},
                )
            await self.source.update_rule_status(group, name, {rule_time.STAMP_FIELD: decision.record})
        except NotFound:
            self._stamps.pop(key, None)
        except SourceError as e:
            self._stamps.pop(key, None)
            self.deadlines.retry()
            log.warning("could not stamp timeAdded on rule; retrying", extra={"rule": name, "group": group, "err": e.message})


class VolumeStamps:
    """timeAdded of NoUse volume taints, and its writes into their annotations."""

    def __init__(self, state: ClusterState, source: VolumeTaintWriter, deadlines: Deadlines) -> None:
        self.state = state
        self.source = source
        self.deadlines = deadlines
        self._seen: dict[tuple[str, str, str], float] = {}  # (kind, key, taint) -> first sight of a taint without timeAdded
        self._written: dict[tuple[str, str], str] = {}  # (kind, key) -> the annotation our pending write replaced

    def taint_time(self, volume: VolumeTaints, taint: DeviceTaint) -> float:
        """timeAdded of a volume taint; before our write of it comes back, the time we wrote."""
        t = parse_time(taint.time_added)
        if t is not None:
            return t
        return self._seen.setdefault((volume.kind, volume.key, str(taint)), self.deadlines.clock.now())

    async def stamp(self) -> None:
        """Write timeAdded into NoUse volume taints that lack it, so a restart keeps the clock."""
        index = self.state.volumes
        if not index.has_taints() and not self._written:
            return
        live = set()
        for volume in index.tainted():
            ident = (volume.kind, volume.key)
            live.add(ident)
            missing = [t for t in volume.taints if t.effect == "NoUse" and not t.time_added]
            if not missing or self._written.get(ident) == volume.raw_annotation:
                continue  # nothing to stamp, or written and the watch has not brought it back yet
            await self._write(volume, missing)
        for ident in [i for i in self._written if i not in live]:
            del self._written[ident]
        self._seen = {k: t for k, t in self._seen.items() if k[:2] in live}

    async def _write(self, volume: VolumeTaints, missing: list[DeviceTaint]) -> None:
        when = {str(t): self.taint_time(volume, t) for t in missing}
        text = stamp_time_added(volume.raw_annotation, {k: format_time(v) for k, v in when.items()})
        if text is None:
            return
        namespace, _, name = volume.key.rpartition("/")
        try:
            await self.source.update_volume_taints(volume.kind, namespace, name, text)
        except NotFound:
            return
        except SourceError as e:
            self.deadlines.retry()
            log.warning("could not stamp timeAdded on a volume taint; retrying", extra={"volume": volume.label, "err": e.message})
            return
        self._written[(volume.kind, volume.key)] = volume.raw_annotation
        log.info("stamped timeAdded on volume taints", extra={"volume": volume.label, "taints": ",".join(when)})
