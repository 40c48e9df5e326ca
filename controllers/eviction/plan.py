"""Who is evicted, and when: a pure function of the tracker's views.

docs/design.md#eviction: pods bound to a node and holding a reservation on an
allocated claim are considered; each NoExecute taint on an allocated device
gives a time by `allocator.tolerations.eviction_time` (upstream's
tolerationSeconds rule), and a pod under several taints, claims or volumes
goes at the earliest of them (`PodEviction.merged`, `add_eviction`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from allocator.device_selector import names_device, reads_attributes
from allocator.tolerations import allocated_tolerations, eviction_time
from allocator.types import EFFECT_NO_EXECUTE, DeviceID, DeviceTaint, DeviceTaintRule, DeviceToleration, Pod, ResourceClaim
from controllers.eviction.rate_limit import DEFAULT_RATE
from tracker.events import GROUP_EXTENDER
from tracker.state import ClusterState

SLICE_SOURCE = "slice"
RULE_KIND = "DeviceTaintRule"  # the first part of a rule's source, `DeviceTaintRule.source`


class TaintKind(enum.Enum):
    """What put a taint there."""

    DEVICE = "device"  # the driver, in its ResourceSlice
    RULE = "rule"  # a DeviceTaintRule
    VOLUME = "volume"  # a PVC's or PV's taint annotation


@dataclass(frozen=True, slots=True)
class TaintOrigin:
    """Where a taint comes from: the tracker's source text, parsed once."""

    source: str  # "slice", "DeviceTaintRule/<group>/<name>", "PersistentVolume/<name>", "PersistentVolumeClaim/<ns>/<name>"
    kind: TaintKind
    rule: tuple[str, str] | None = None  # (group, name) of a DeviceTaintRule

    @property
    def ours(self) -> bool:
        """One of the project's own DeviceTaintRules."""
        return self.rule is not None and self.rule[0] == GROUP_EXTENDER

    @staticmethod
    def of_rule(rule: DeviceTaintRule) -> TaintOrigin:
        return TaintOrigin(rule.source, TaintKind.RULE, (rule.group, rule.meta.name))


@functools.lru_cache(maxsize=4096)
def device_origin(source: str) -> TaintOrigin:
    """A device taint's source as the tracker's views name it: a rule's `DeviceTaintRule.source`, or the driver's."""
    kind, _, rest = source.partition("/")
    if kind == RULE_KIND:
        group, _, name = rest.partition("/")
        return TaintOrigin(source, TaintKind.RULE, (group, name))
    return TaintOrigin(source, TaintKind.DEVICE)


@dataclass(frozen=True, slots=True)
class Ownership:
    """Which taints this controller acts on: ours always, upstream rules and driver taints on request.

    kube-controller-manager's device-taint-eviction controller handles upstream
    rules and slice taints whenever DRADeviceTaints is on; two controllers must
    not evict the same pods.
    """

    evict_upstream: bool = False

    def owns(self, origin: TaintOrigin) -> bool:
        return self.evict_upstream or origin.ours


@dataclass(frozen=True, slots=True)
class TaintRef:
    """One taint on one allocated device (or used volume) that makes a pod leave."""

    id: str  # rate-limit and status key: the rule's source, or one driver or volume taint
    origin: TaintOrigin
    taint: DeviceTaint
    device: DeviceID | None  # None: a volume taint (`origin` names the PVC or PV)
    time_added: float
    rate: float

    @property
    def source(self) -> str:
        return self.origin.source


def _once_by_id(*reasons: Iterable[TaintRef]) -> tuple[TaintRef, ...]:
    """Every reason once, ordered by id (as Events, status and logs list them)."""
    return tuple(sorted(dict.fromkeys(r for group in reasons for r in group), key=lambda r: r.id))


@dataclass(frozen=True, slots=True)
class PodEviction:
    key: str  # namespace/name
    uid: str
    due: float  # epoch seconds; 0.0 means now
    taint_time: float  # earliest timeAdded of the reasons (the deletion latency starts here)
    reasons: tuple[TaintRef, ...]
    claims: tuple[str, ...]

    @staticmethod
    def of(key: str, uid: str, found: Sequence[tuple[float, TaintRef]], claims: tuple[str, ...]) -> PodEviction:
        """The pod's eviction for these (time, taint) pairs, at least one: the earliest time and timeAdded."""
        due = min(when for when, _ in found)
        return PodEviction(key, uid, due, min(r.time_added for _, r in found), _once_by_id(r for _, r in found), claims)

    def merged(self, other: PodEviction) -> PodEviction:
        """The same pod evicted for more reasons (another claim, a volume): the earlier time, every reason once."""
        return PodEviction(
            self.key,
            self.uid,
            min(self.due, other.due),
            min(self.taint_time, other.taint_time),
            _once_by_id(self.reasons, other.reasons),
            (*self.claims, *other.claims),
        )

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    @property
    def volume(self) -> bool:
        """Only volume taints evict it (its Event and DisruptionTarget reason say so)."""
        return all(r.origin.kind is TaintKind.VOLUME for r in self.reasons)

    @property
    def sources(self) -> frozenset[str]:
        return frozenset(r.source for r in self.reasons)

    @property
    def origins(self) -> list[TaintOrigin]:
        """The reasons' origins, one per source, in the order of their sources."""
        return sorted({r.origin for r in self.reasons}, key=lambda o: o.source)

    def describe(self) -> dict[str, str]:
        """Structured log fields: pod, claims, devices, taints."""
        return {
            "pod": self.key,
            "podUID": self.uid,
            "claims": ",".join(self.claims),
            "devices": ",".join(sorted({str(r.device) for r in self.reasons if r.device is not None})),
            "taints": ",".join(sorted({f"{r.taint} ({r.source})" for r in self.reasons})),
        }


TaintTime = Callable[[DeviceID, DeviceTaint, str], float]


def running(pod: Pod | None) -> bool:
    """A pod eviction is for: bound to a node and not being deleted already."""
    return pod is not None and bool(pod.node_name) and not pod.meta.deletion_timestamp


def add_eviction(plan: dict[str, PodEviction], eviction: PodEviction) -> None:
    """Put a pod's eviction into the plan, merged with what it holds for the pod (another pod of the name keeps its place)."""
    held = plan.get(eviction.key)
    if held is None:
        plan[eviction.key] = eviction
    elif held.uid == eviction.uid:
        plan[eviction.key] = held.merged(eviction)


def slice_taint_id(device: DeviceID, taint: DeviceTaint) -> str:
    return f"slice:{device}:{taint}"


def device_taints(state: ClusterState, did: DeviceID) -> Iterator[tuple[DeviceTaint, str]]:
    """Effective taints with their sources; a device no longer published keeps its plain-selector rules' taints."""
    view = state.device(did)
    if view is not None:
        yield from zip(view.taints, view.taint_sources, strict=False)
        return
    for rule in state.rules.values():
        s = rule.selector
        if s is None or reads_attributes(s):
            continue  # class and CEL selectors need a published device (docs/design.md#devicetaintrule-selectors)
        if names_device(s, did):
            yield rule.taint, rule.source


def rule_rate(state: ClusterState, origin: TaintOrigin) -> float:
    """evictionsPerSecond of our CRD rules; everything else uses the default."""
    if origin.ours and origin.rule is not None:
        rule = state.rules.get(origin.rule)
        if rule is not None and rule.evictions_per_second:
            return rule.evictions_per_second
    return DEFAULT_RATE


def _claim_eviction(
    state: ClusterState,
    claim: ResourceClaim,
    ownership: Ownership,
    taint_time: TaintTime,
    simulate: str | None,
) -> list[tuple[float, TaintRef]]:
    """(when, why) for each taint that evicts the users of an allocated claim."""
    assert claim.allocation is not None
    found: list[tuple[float, TaintRef]] = []
    for result in claim.allocation.results:
        did = result.device_id
        tolerations: tuple[DeviceToleration, ...] | None = None
        for taint, source in device_taints(state, did):
            origin = device_origin(source)
            if simulate is not None:
                if source != simulate:
                    continue
                taint = dataclasses.replace(taint, effect=EFFECT_NO_EXECUTE)  # "what if it were NoExecute"
            elif taint.effect != EFFECT_NO_EXECUTE or not ownership.owns(origin):
                continue
            if tolerations is None:
                tolerations = allocated_tolerations(claim, result)
            added = taint_time(did, taint, source)
            when = eviction_time(taint, tolerations, added)
            if when is None:
                continue  # tolerated for good: never for this taint
            ref_id = source if source != SLICE_SOURCE else slice_taint_id(did, taint)
            found.append((when, TaintRef(ref_id, origin, taint, did, added, rule_rate(state, origin))))
    return found


def plan_evictions(
    state: ClusterState,
    ownership: Ownership,
    taint_time: TaintTime,
    *,
    simulate: str | None = None,
) -> dict[str, PodEviction]:
    """Every pod that must leave, keyed by namespace/name.

    `simulate`: only the taints of this source count, as if their effect were
    NoExecute (the `effect: None` dry run).
    """
    plan: dict[str, PodEviction] = {}
    if simulate is None and not state.queries.may_evict():
        return plan  # no NoExecute taint anywhere: nothing to look for in every allocated claim
    for claim in state.claims.values():
        if claim.allocation is None or not claim.reserved_for:
            continue
        found = _claim_eviction(state, claim, ownership, taint_time, simulate)
        if not found:
            continue
        for ref in claim.reserved_for:
            if ref.resource != "pods" or ref.api_group:
                continue
            key = f"{claim.meta.namespace}/{ref.name}"
            pod = state.pods.get(key)
            if pod is None or (ref.uid and pod.meta.uid != ref.uid):
                continue  # gone, or a new pod under the old name: not the one holding the claim
            if not running(pod):
                continue
            add_eviction(plan, PodEviction.of(key, pod.meta.uid, found, (claim.key,)))
    return plan


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a rule with `effect: None` would do as NoExecute (upstream's NoEffect counts)."""

    published_devices: int
    allocated_devices: int
    pods: int
    namespaces: int


def dry_run(state: ClusterState, source: str, taint_time: TaintTime) -> DryRun:
    published = sum(1 for view in state.devices.values() if source in view.taint_sources)
    allocated = 0
    for claim in state.claims.values():
        if claim.allocation is None:
            continue
        for result in claim.allocation.results:
            if any(s == source for _, s in device_taints(state, result.device_id)):
                allocated += 1
    pods = plan_evictions(state, Ownership(evict_upstream=True), taint_time, simulate=source)
    return DryRun(published, allocated, len(pods), len({p.namespace for p in pods.values()}))
