"""Who leaves a volume with a `NoUse` taint, and when: a pure function of the tracker's views.

Pods bound to a node that use a PVC (directly or as a generic ephemeral
volume) are considered; each `NoUse` taint on the PVC or its bound PV gives
a time by the devices' rule (`allocator.tolerations.eviction_time`), and the
pod goes at the earliest (`PodEviction.merged`). A malformed taint
annotation keeps new pods off (the filter) but evicts nobody: a typo must
not delete running pods either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from allocator.pod_volumes import EFFECT_NO_USE
from allocator.tolerations import eviction_time, taint_tolerated
from allocator.types import DeviceTaint, DeviceToleration
from controllers.eviction.plan import PodEviction, TaintKind, TaintOrigin, TaintRef, add_eviction, running
from controllers.eviction.rate_limit import DEFAULT_RATE
from tracker.pod_status import PodStatus
from tracker.state import ClusterState
from tracker.volumes import EFFECT_NO_ATTACH_OR_MOUNT, VolumeTaints

VolumeTaintTime = Callable[[VolumeTaints, DeviceTaint], float]


def volume_origin(volume: VolumeTaints) -> TaintOrigin:
    """The reasons' origin; its source (and rate-limit scope): "PersistentVolume/pv-1" or "PersistentVolumeClaim/ns/data"."""
    return TaintOrigin(f"{volume.kind}/{volume.key}", TaintKind.VOLUME)


def _tolerations(pods: Mapping[str, PodStatus], key: str) -> tuple[DeviceToleration, ...]:
    view = pods.get(key)
    return view.volume_tolerations if view is not None else ()


def plan_volume_evictions(state: ClusterState, pods: Mapping[str, PodStatus], taint_time: VolumeTaintTime) -> dict[str, PodEviction]:
    """Every pod that must leave because of a NoUse volume taint, keyed by namespace/name (`pods`: their views)."""
    index = state.volumes
    out: dict[str, PodEviction] = {}
    if not index.has_taints():
        return out
    for claim, users in index.users.items():
        volumes = [v for v in index.volumes_of_claim(claim) if any(t.effect == EFFECT_NO_USE for t in v.taints)]
        if not volumes:
            continue
        for key in sorted(users):
            pod = state.pods.get(key)
            if pod is None or not running(pod):
                continue
            tolerations = _tolerations(pods, key)
            found: list[tuple[float, TaintRef]] = []
            for volume in volumes:
                for taint in volume.taints:
                    if taint.effect != EFFECT_NO_USE:
                        continue
                    added = taint_time(volume, taint)
                    when = eviction_time(taint, tolerations, added)
                    if when is None:
                        continue
                    origin = volume_origin(volume)
                    found.append((when, TaintRef(f"volume:{origin.source}:{taint}", origin, taint, None, added, DEFAULT_RATE)))
            if found:
                add_eviction(out, PodEviction.of(key, pod.meta.uid, found, (claim,)))
    return out


def merge(device: dict[str, PodEviction], volume: dict[str, PodEviction]) -> dict[str, PodEviction]:
    """One plan: a pod evicted for both keeps the earliest time and all reasons (and the device wording)."""
    out = dict(device)
    for eviction in volume.values():
        add_eviction(out, eviction)
    return out


def ineffective_no_attach(state: ClusterState, pods: Mapping[str, PodStatus]) -> list[tuple[VolumeTaints, DeviceTaint, list[str]]]:
    """NoAttachOrMount taints with running pods already using the volume that do not tolerate them.

    The taint cannot stop them (the proposal's "Risks"): the controller says
    so once with an Event on the PVC/PV.
    """
    index = state.volumes
    out: list[tuple[VolumeTaints, DeviceTaint, list[str]]] = []
    if not index.has_taints():
        return out
    for volume in index.tainted():
        taints = [t for t in volume.taints if t.effect == EFFECT_NO_ATTACH_OR_MOUNT]
        if not taints:
            continue
        users = sorted(index.pods_using(volume))
        for taint in taints:
            ignoring = []
            for key in users:
                pod = state.pods.get(key)
                if not running(pod):
                    continue
                if not taint_tolerated(taint, _tolerations(pods, key)):
                    ignoring.append(key)
            if ignoring:
                out.append((volume, taint, ignoring))
    return out
