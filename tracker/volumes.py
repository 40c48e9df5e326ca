"""Volume taints (the PVC taint proposal; docs/design.md#volume-taints): taints on PVCs and PVs, tolerations on pods, in annotations.

The API has no `spec.volumeTaints`, so taints live in the annotation
`resource.dra-extender.io/volume-taints` of a PersistentVolume or
PersistentVolumeClaim and tolerations in the pod annotation
`resource.dra-extender.io/volume-tolerations`. They are parsed into the
device taint and toleration types so that matching is the one function
devices use (`allocator.tolerations.tolerates_taint`), and a pod's time
under a `NoUse` taint is the devices' `eviction_time`. The pod's side (its
PVCs and tolerations) is read once into the parsed `Pod`
(allocator/pod_volumes.py); the volumes' side is read here.

The index keeps only what decisions need: a PVC's bound volume name and
parsed taints, a PV's parsed taints, and which pods use which PVC.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from allocator.pod_volumes import (
    EFFECT_NO_USE,
    MalformedAnnotation,
    annotation_entries,
    entry_string,
)
from allocator.rfc3339 import parse_rfc3339
from allocator.tolerations import taint_tolerated
from allocator.types import DeviceTaint, DeviceToleration, Pod

log = logging.getLogger("dra_extender.volumes")

TAINTS_ANNOTATION = "resource.dra-extender.io/volume-taints"
EFFECT_NO_ATTACH_OR_MOUNT = "NoAttachOrMount"
VOLUME_EFFECTS = frozenset({EFFECT_NO_ATTACH_OR_MOUNT, EFFECT_NO_USE})
PVC = "PersistentVolumeClaim"
PV = "PersistentVolume"

_warned_effects: set[str] = set()


def parse_taints(text: str) -> tuple[DeviceTaint, ...]:
    """The taints of a volume annotation; unknown effects are dropped (logged once), as device taints treat them."""
    out = []
    for i, item in enumerate(annotation_entries(text, TAINTS_ANNOTATION)):
        where = f"{TAINTS_ANNOTATION}[{i}]"
        taint = DeviceTaint(
            key=entry_string(item, "key", where, required=True),
            effect=entry_string(item, "effect", where, required=True),
            value=entry_string(item, "value", where),
            time_added=entry_string(item, "timeAdded", where),
        )
        if taint.time_added and parse_rfc3339(taint.time_added) is None:
            # As the API server refuses a taint's malformed metav1.Time: a typo must not restart the clock each restart.
            raise MalformedAnnotation(f"{where}.timeAdded: must be an RFC 3339 date-time, got {taint.time_added!r}")
        if taint.effect not in VOLUME_EFFECTS:
            if taint.effect not in _warned_effects:
                _warned_effects.add(taint.effect)
                log.info("ignoring volume taint with an unknown effect", extra={"effect": taint.effect, "taint": str(taint)})
            continue
        out.append(taint)
    return tuple(out)


def _annotations(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


@dataclass(frozen=True, slots=True)
class VolumeTaints:
    """What is kept of one PVC or PV: its parsed taints, or why they could not be read."""

    kind: str  # PersistentVolumeClaim or PersistentVolume
    key: str  # namespace/name or name
    uid: str
    taints: tuple[DeviceTaint, ...] = ()
    malformed: str | None = None  # the parse error: the volume is closed to every pod
    volume_name: str = ""  # a PVC's bound PV
    raw_annotation: str = ""  # the taint annotation as written (to add timeAdded to it)

    @property
    def tainted(self) -> bool:
        return bool(self.taints) or self.malformed is not None

    @property
    def label(self) -> str:
        return f"volume claim {self.key}" if self.kind == PVC else f"pv {self.key}"


def parse_volume(kind: str, key: str, raw: Mapping[str, Any]) -> VolumeTaints:
    meta = raw.get("metadata")
    uid = str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""
    spec = raw.get("spec")
    volume_name = ""
    if kind == PVC and isinstance(spec, Mapping) and isinstance(spec.get("volumeName"), str):
        volume_name = spec["volumeName"]
    text = _annotations(raw).get(TAINTS_ANNOTATION)
    if text is None:
        return VolumeTaints(kind, key, uid, volume_name=volume_name)
    if not isinstance(text, str):
        return VolumeTaints(kind, key, uid, malformed=f"{TAINTS_ANNOTATION}: must be a string", volume_name=volume_name)
    try:
        taints = parse_taints(text)
    except MalformedAnnotation as e:
        return VolumeTaints(kind, key, uid, malformed=str(e), volume_name=volume_name, raw_annotation=text)
    return VolumeTaints(kind, key, uid, taints, volume_name=volume_name, raw_annotation=text)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a pod may not start: the reason for every node, and the volume and taint at fault."""

    message: str
    claim: str
    volume: VolumeTaints
    taint: DeviceTaint | None  # None: the annotation is malformed


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """What the index keeps of a pod that uses PVCs, parsed once at intake."""

    claims: tuple[str, ...]  # PVC keys, in volume order
    tolerations: tuple[DeviceToleration, ...]  # a malformed annotation counts as none
    tolerations_problem: str | None  # why the annotation is malformed, or None
    node_name: str  # spec.nodeName, "" while unscheduled


class VolumeIndex:
    """PVCs and PVs with their taints, and which pods use which PVC."""

    def __init__(self) -> None:
        self.pvcs: dict[str, VolumeTaints] = {}
        self.pvs: dict[str, VolumeTaints] = {}
        self.users: dict[str, set[str]] = defaultdict(set)  # PVC key -> pod keys
        self._pods: dict[str, PodVolumes] = {}  # pod key -> its PVCs and volume tolerations
        self._tainted: set[tuple[str, str]] = set()  # (kind, key): keeps the untainted common case O(1)

    # ------------------------------------------------------------------ intake

    def set_volume(self, kind: str, key: str, raw: Mapping[str, Any] | None) -> VolumeTaints | None:
        """Store (or with None drop) one PVC/PV; returns what was held before."""
        store = self.pvcs if kind == PVC else self.pvs
        old = store.get(key)
        if raw is None:
            store.pop(key, None)
            self._tainted.discard((kind, key))
        else:
            new = store[key] = parse_volume(kind, key, raw)
            if new.tainted:
                self._tainted.add((kind, key))
            else:
                self._tainted.discard((kind, key))
        return old

    def set_pod(self, key: str, pod: Pod | None) -> bool:
        """Index a pod's PVCs; False when it uses none (the state then need not keep it)."""
        old = self._pods.pop(key, None)
        for claim in old.claims if old is not None else ():
            pods = self.users.get(claim)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self.users[claim]
        if pod is None:
            return False
        claims = pvc_keys(pod)
        if not claims:
            return False
        self._pods[key] = PodVolumes(claims, pod.volume_tolerations, pod.volume_tolerations_problem, pod.node_name)
        for claim in claims:
            self.users[claim].add(key)
        return True

    # ------------------------------------------------------------------ queries

    def claims_of(self, pod_key: str) -> tuple[str, ...]:
        pod = self._pods.get(pod_key)
        return pod.claims if pod is not None else ()

    def pod(self, pod_key: str) -> PodVolumes | None:
        """What the index holds of a pod using PVCs: its claims, volume tolerations and node."""
        return self._pods.get(pod_key)

    def volumes_of_claim(self, claim: str) -> Iterator[VolumeTaints]:
        """The PVC, then its bound PV (an unbound PVC carries only its own taints)."""
        pvc = self.pvcs.get(claim)
        if pvc is None:
            return
        yield pvc
        if pvc.volume_name:
            pv = self.pvs.get(pvc.volume_name)
            if pv is not None:
                yield pv

    def pods_using(self, volume: VolumeTaints) -> set[str]:
        if volume.kind == PVC:
            return set(self.users.get(volume.key, ()))
        return {pod for claim, pvc in self.pvcs.items() if pvc.volume_name == volume.key for pod in self.users.get(claim, ())}

    def has_taints(self) -> bool:
        return bool(self._tainted)

    def tainted(self) -> list[VolumeTaints]:
        return [(self.pvcs if kind == PVC else self.pvs)[key] for kind, key in sorted(self._tainted)]


def describe_volume(claim: str, index: VolumeIndex) -> str:
    """ "volume claim ns/name (pv pv-123)", the same words whichever of the two carries the taint."""
    pvc = index.pvcs.get(claim)
    bound = pvc.volume_name if pvc is not None else ""
    return f"volume claim {claim} (pv {bound})" if bound else f"volume claim {claim}"


def admission_verdict(index: VolumeIndex, claims: tuple[str, ...], tolerations: tuple[DeviceToleration, ...]) -> Verdict | None:
    """Why a pod using these PVCs (namespace/name) may not start now, or None.

    A malformed taint annotation closes the volume whatever the tolerations:
    a typo must never open a volume meant to be closed.
    """
    for claim in claims:
        for volume in index.volumes_of_claim(claim):
            where = describe_volume(claim, index)
            if volume.malformed is not None:
                owner = "claim" if volume.kind == PVC else "pv"
                return Verdict(
                    f"{where}: the volume-taints annotation of the {owner} is malformed ({volume.malformed}); "
                    "the volume is closed to every pod until it is fixed",
                    claim,
                    volume,
                    None,
                )
            for taint in volume.taints:
                if not taint_tolerated(taint, tolerations):
                    return Verdict(f"{where}: taint {taint} not tolerated", claim, volume, taint)
    return None


def stamp_time_added(text: str, times: Mapping[str, str]) -> str | None:
    """The annotation with `timeAdded` set on the NoUse taints named in `times` (by str(taint)); None if none.

    Only NoUse taints get one (the proposal: "only written for NoUse taints");
    every other entry, and every other field, is kept as written.
    """
    try:
        entries = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entries, list):
        return None
    changed = False
    for item in entries:
        if not isinstance(item, dict) or item.get("effect") != EFFECT_NO_USE or item.get("timeAdded"):
            continue
        name = str(DeviceTaint(key=str(item.get("key") or ""), effect=EFFECT_NO_USE, value=str(item.get("value") or "")))
        if name in times:
            item["timeAdded"] = times[name]
            changed = True
    return orjson.dumps(entries).decode() if changed else None


def debug_volumes(index: VolumeIndex) -> list[dict[str, Any]]:
    """The /debug/volumes view: every tainted PVC/PV, its taints, its pods and what they tolerate."""
    items = []
    for volume in index.tainted():
        pods = []
        for key in sorted(index.pods_using(volume)):
            held = index.pod(key)
            tolerations, problem, node = (held.tolerations, held.tolerations_problem, held.node_name) if held else ((), None, "")
            pods.append(
                {
                    "pod": key,
                    "node": node,
                    # A malformed annotation tolerates nothing.
                    "tolerates": {str(t): taint_tolerated(t, tolerations) for t in volume.taints} if volume.malformed is None else {},
                    **({"tolerationsProblem": problem} if problem else {}),
                }
            )
        item: dict[str, Any] = {
            "kind": volume.kind,
            "name": volume.key,
            "taints": [t.to_api() for t in volume.taints],
            "pods": pods,
        }
        if volume.volume_name:
            item["volumeName"] = volume.volume_name
        if volume.malformed is not None:
            item["malformed"] = volume.malformed
        items.append(item)
    return items


def pvc_keys(pod: Pod) -> tuple[str, ...]:
    """The pod's PVCs as `namespace/name` keys, in volume order."""
    return tuple(f"{pod.meta.namespace}/{c}" for c in pod.volume_claims)


def pod_volume_verdict(index: VolumeIndex, pod: Pod) -> Verdict | None:
    """Why `pod` may start on no node because of a volume taint, or None: /filter's and `kubectl dra why`'s answer.

    Pure: a malformed pod annotation counts as no tolerations here; the caller reports it.
    """
    if not index.has_taints():
        return None
    return admission_verdict(index, pvc_keys(pod), pod.volume_tolerations)
