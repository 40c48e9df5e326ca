"""The object store: nodes, pods, claims, templates and volumes, parsed once at intake.

Objects by key, with the raw claims and pods the binder writes against,
and the indexes of claims generated for pods. The devices the claims hold
are recorded in the allocation ledger (tracker/ledger.py), the only writer
of `allocated` and `inflight`. Beside it: the change log cached answers
catch up from (`ChangeLog`) and Problems reported once per object
(`ProblemReporter`). tracker/state.py's ClusterState composes these with
the patched device views (tracker/views/devices.py) and owns intake,
readiness and listeners.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from allocator.counter_record import counter_record
from allocator.extended_resources import EXTENDED_CLAIM_ANNOTATION
from allocator.failures import REASON_CLAIMS_UNRESOLVED, Failure, of_claim, plain
from allocator.parse import parse_node, parse_pod, parse_resource_claim, parse_resource_claim_template
from allocator.pod_claims import EXTENDED, claim_refs, may_use_dra
from allocator.types import (
    Node,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
)
from tracker import events as ev
from tracker.claim_status import ClaimStatus, parse_claim_status
from tracker.ledger import AllocationLedger
from tracker.pod_status import PodStatus
from tracker.volumes import VolumeIndex

log = logging.getLogger("dra_extender.tracker")

CHANGE_LOG_MAX = 200_000  # entries kept; a cache further behind starts over

# Objects blamed with one Event per spec (docs/design.md#faulty-objects-and-warning-events: "one deduplicated Warning Event on
# the object"), however many devices, claims or nodes their selectors fail for.
_BLAMED_PER_SPEC = frozenset({ev.DEVICE_CLASS, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH})


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with one object, to be reported as a Warning Event."""

    kind: str
    group: str
    name: str  # namespace/name or name
    message: str
    uid: str = ""  # the object's, so the Event is found on it (kubectl describe matches involvedObject.uid)
    reason: str = ""  # the Event's reason; "" for Invalid (or InvalidSelector)


def _version_number(rv: Any) -> int | None:
    try:
        return int(rv)
    except (TypeError, ValueError):
        return None


def _is_older(new: Mapping[str, Any], held: ResourceClaim) -> bool:
    """Whether `new` is known to be older than the claim held, so it must not replace it.

    resourceVersion is opaque by the API contract, and every other use
    compares it for equality; this one place needs an order: the claim a
    /bind's patch returned (applied at once, extender/bind/claim_writes.py
    `ClaimWrites.apply`) must not be replaced by an older watch event that
    arrives after it, or the allocated devices would look free again.
    Upstream's scheduler does the same in its assume cache
    (pkg/scheduler/util/assumecache: resourceVersion parsed as int64, older
    updates ignored). A version that is not an integer has no order: the
    event applies.
    """
    a = _version_number((new.get("metadata") or {}).get("resourceVersion"))
    b = _version_number(held.meta.resource_version)
    return a is not None and b is not None and a < b


POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
COUNTER_RECORD_MALFORMED = "MalformedCounterRecord"  # the Warning Event's reason on a claim whose counter record cannot be read


def _generated_for(raw: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(owning pod uid, pod claim name) of a claim generated from a template, as the controller marks it."""
    meta = (raw or {}).get("metadata") or {}
    pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    if not isinstance(pod_claim, str):
        return None
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "Pod" and isinstance(ref.get("uid"), str):
            return ref["uid"], pod_claim
    return None


def _extended_for(raw: Mapping[str, Any] | None) -> str | None:
    """The owning pod's uid of a claim made for a pod's extended resources (annotation + controller Pod)."""
    meta = (raw or {}).get("metadata") or {}
    if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
        return None
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "Pod" and isinstance(ref.get("uid"), str):
            return str(ref["uid"])
    return None


Handler = Callable[[Any, ev.ObjectEvent], None]  # an unbound per-kind handler of one of the state's parts


class ChangeLog:
    """What changed, so cached answers are dropped only where they depend on it.

    A node (its node-local slices, their devices' allocation state, the Node
    object), or everything (a shared pool reachable from many nodes, a
    DeviceClass). Entry i has sequence number `base + i`; None marks a change
    that concerns every node.
    """

    def __init__(self) -> None:
        self._entries: list[str | None] = []
        self._base = 0
        self._global_seq = 0

    @property
    def seq(self) -> int:
        """The sequence number the next change will get."""
        return self._base + len(self._entries)

    def changed_nodes_since(self, seq: int) -> list[str | None] | None:
        """Nodes changed at or after `seq`; None when every node may have (or the log no longer reaches back)."""
        if seq < self._base or self._global_seq > seq:
            return None
        return self._entries[seq - self._base :]

    def changed(self, node_name: str | None) -> None:
        if node_name is None:
            self._global_seq = self.seq + 1  # one past this change's sequence number
        self._entries.append(node_name)
        if len(self._entries) > CHANGE_LOG_MAX:
            half = len(self._entries) // 2
            del self._entries[:half]
            self._base += half


class ProblemReporter:
    """Problems reported once: classes, rules and patches once per spec, other kinds once per message while the object exists."""

    def __init__(self, on_problem: Callable[[Problem], None] | None, uid_of: Callable[[str, str, str], str]) -> None:
        self._on_problem = on_problem
        self._uid_of = uid_of
        # (kind, group, name) -> what was reported: spec tokens for _BLAMED_PER_SPEC, else messages.
        self._reported: dict[tuple[str, str, str], set[bytes | str]] = {}
        self._spec_tokens: dict[tuple[str, str, str], bytes] = {}
        # (kind, group, name) -> the last problem of a class, rule or patch with its current spec: what a
        # selector that fails at run time left, for the rule's own condition and kubectl dra to show.
        self.latest: dict[tuple[str, str, str], str] = {}

    def track_spec(self, event: ev.ObjectEvent) -> None:
        """A class, rule or patch with a new spec (or re-created) may be blamed again; a deleted object of any kind is forgotten.

        Forgetting on delete keeps one entry per faulty object that exists, not
        one per faulty pod or claim ever seen (a workload that keeps creating
        faulty pods would grow it for good), and a re-created object is new.
        """
        ident = (event.kind, event.group, event.key)
        if event.kind == ev.DEVICE_CLASS:
            # Rules and patches that use the class are evaluated again (and report again if they still fail).
            self.latest = {k: v for k, v in self.latest.items() if k[0] == ev.DEVICE_CLASS}
        if event.type == "DELETED":
            self._spec_tokens.pop(ident, None)
            self._reported.pop(ident, None)
            self.latest.pop(ident, None)
            return
        if event.kind not in _BLAMED_PER_SPEC:
            return
        meta = event.object.get("metadata") or {}
        spec = event.object.get("spec")
        if event.kind == ev.DEVICE_TAINT_RULE and isinstance(spec, dict) and isinstance(spec.get("taint"), dict):
            # The eviction controller stamps timeAdded on our CRD rules: not a new selector to blame again.
            spec = {**spec, "taint": {k: v for k, v in spec["taint"].items() if k != "timeAdded"}}
        token = orjson.dumps([meta.get("uid"), spec], option=orjson.OPT_SORT_KEYS)
        if self._spec_tokens.get(ident) != token:
            self._spec_tokens[ident] = token
            self._reported.pop(ident, None)
            self.latest.pop(ident, None)

    def report(self, problem: Problem) -> None:
        """Report a faulty object once (an Event and a metric downstream)."""
        ident = (problem.kind, problem.group, problem.name)
        if problem.kind in _BLAMED_PER_SPEC:
            self.latest[ident] = problem.message
        token = self._spec_tokens.get(ident, problem.message)
        seen = self._reported.setdefault(ident, set())
        if token in seen:
            return
        seen.add(token)
        if not problem.uid:
            uid = self._uid_of(problem.kind, problem.group, problem.name)
            problem = Problem(problem.kind, problem.group, problem.name, problem.message, uid, problem.reason)
        if self._on_problem is not None:
            self._on_problem(problem)


class ObjectStore:
    """Nodes, pods, claims, templates and volumes by key; a part of ClusterState, which reads and feeds it."""

    def __init__(self, ledger: AllocationLedger, changes: ChangeLog, report: Callable[[Problem], None]) -> None:
        self._ledger = ledger
        self._changes = changes
        self._report = report
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}  # only pods with resource claims or PVC volumes
        self.volumes = VolumeIndex()  # volume taints (tracker/volumes.py)
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.claim_statuses: dict[str, ClaimStatus] = {}  # what writes back to a claim need (tracker/claim_status.py)
        self.pod_statuses: dict[str, PodStatus] = {}  # conditions and volume tolerations (tracker/pod_status.py)
        # Claims generated from templates, by owning pod uid and pod claim name: found before
        # kube-controller-manager has written the pod's status.resourceClaimStatuses.
        self.generated_claims: dict[str, dict[str, str]] = defaultdict(dict)
        # Claims made for pods' extended resources, by owning pod uid (found before the pod's status names them).
        self.extended_claims: dict[str, str] = {}
        # claim key -> (generated for: (pod uid, pod claim name), extended resources of: pod uid), to unindex it.
        self._claim_owners: dict[str, tuple[tuple[str, str] | None, str | None]] = {}

    # ------------------------------------------------------------------ what ClusterState asks of its parts

    def handles(self, kind: str) -> bool:
        return kind in self._handlers

    def apply(self, event: ev.ObjectEvent) -> None:
        """Apply one event of a kind this store `handles` (raises ValidationError for an invalid object)."""
        self._handlers[event.kind](self, event)

    def _store(self, kind: str) -> Mapping[str, Any]:
        """The objects of `kind` held, by key."""
        stores: dict[str, Mapping[str, Any]] = {
            ev.NODE: self.nodes,
            ev.POD: self.pods,
            ev.RESOURCE_CLAIM: self.claims,
            ev.RESOURCE_CLAIM_TEMPLATE: self.templates,
            ev.PERSISTENT_VOLUME_CLAIM: self.volumes.pvcs,
            ev.PERSISTENT_VOLUME: self.volumes.pvs,
        }
        return stores.get(kind, {})

    def keys_of(self, kind: str, group: str) -> set[str]:
        return set(self._store(kind))

    def holds(self, kind: str, group: str, key: str) -> bool:
        return key in self._store(kind)

    def uid_of(self, kind: str, group: str, name: str) -> str:
        held: Any = self._store(kind).get(name)
        meta = getattr(held, "meta", None)
        return meta.uid if meta is not None else ""

    def version_of(self, event: ev.ObjectEvent) -> str:
        """The resourceVersion held after `event`: a claim keeps the newest of our write and its watch echo (see _on_claim)."""
        if event.kind == ev.RESOURCE_CLAIM:
            return self.claims[event.key].meta.resource_version
        return str((event.object.get("metadata") or {}).get("resourceVersion") or "")

    def is_echo(self, event: ev.ObjectEvent) -> bool:
        """The watch bringing back a claim or pod at the version we already hold (our own write's echo).

        Both sources send resourceVersion as a string; the held one is the parsed object's.
        """
        held: Pod | ResourceClaim | None
        if event.kind == ev.RESOURCE_CLAIM:
            held = self.claims.get(event.key)
        elif event.kind == ev.POD:
            held = self.pods.get(event.key)
        else:
            return False
        if held is None:
            return False
        rv = (event.object.get("metadata") or {}).get("resourceVersion")
        return bool(rv) and rv == held.meta.resource_version

    # ------------------------------------------------------------------ per-kind handlers

    def _on_node(self, event: ev.ObjectEvent) -> None:
        self._changes.changed(event.key)  # labels decide node selectors
        if event.type == "DELETED":
            self.nodes.pop(event.key, None)
        else:
            self.nodes[event.key] = parse_node(event.object)

    def _on_pod(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.volumes.set_pod(event.key, None)
            self.pods.pop(event.key, None)
            self.pod_statuses.pop(event.key, None)
            return
        pod = parse_pod(event.object)
        uses_volumes = self.volumes.set_pod(event.key, pod)
        if may_use_dra(pod) or uses_volumes:
            self.pods[event.key] = pod
            self.pod_statuses[event.key] = PodStatus.of(event.object, pod)
        else:
            # Only pods with claims or PVCs matter; one that lost them is forgotten.
            self.pods.pop(event.key, None)
            self.pod_statuses.pop(event.key, None)

    def _on_volume(self, event: ev.ObjectEvent) -> None:
        """A PVC or PV: keep its taints (and a PVC's bound volume); report a malformed annotation."""
        self.volumes.set_volume(event.kind, event.key, None if event.type == "DELETED" else event.object)
        held = self.volumes.pvcs.get(event.key) if event.kind == ev.PERSISTENT_VOLUME_CLAIM else self.volumes.pvs.get(event.key)
        if held is not None and held.malformed is not None:
            self._report(
                Problem(
                    event.kind, event.group, event.key, f"malformed volume taints, volume closed to every pod: {held.malformed}", held.uid
                )
            )

    def _on_claim(self, event: ev.ObjectEvent) -> None:
        old = self.claims.get(event.key)
        if old is not None and event.type != "DELETED" and _is_older(event.object, old):
            # A write we applied ourselves is newer than this (late) watch event:
            # going back would make allocated devices look free.
            return
        if old is not None:
            self._unindex_generated(event.key)
        if event.type == "DELETED":
            self._ledger.set_claim(event.key, ())
            self.claims.pop(event.key, None)
            self.claim_statuses.pop(event.key, None)
            return
        claim = parse_resource_claim(event.object)
        self.claims[event.key] = claim
        self.claim_statuses[event.key] = parse_claim_status(event.object)
        owner = _generated_for(event.object)
        if owner is not None:
            self.generated_claims[owner[0]][owner[1]] = event.key
        extended_owner = _extended_for(event.object)
        if extended_owner is not None:
            self.extended_claims[extended_owner] = event.key
        if owner is not None or extended_owner is not None:
            self._claim_owners[event.key] = (owner, extended_owner)
        self._record_allocation(claim)

    def _record_allocation(self, claim: ResourceClaim) -> None:
        """The claim's devices in the ledger (warning when two allocators hand out one device).

        The ledger diffs the claim's results with what it held: devices it
        keeps keep the counter consumption recorded when they were allocated.
        """
        if claim.allocation is not None:
            for result in claim.allocation.results:
                if result.admin_access or result.share_id is not None:
                    continue  # admin access does not take a device from others (as upstream); shares are counted per result
                holder = self._ledger.inflight.get(result.device_id)
                if holder is not None and holder != claim.key:
                    log.warning(
                        "device allocated by another allocator while we were allocating it: only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "inflight_for": holder},
                    )
                other = self._ledger.allocated.get(result.device_id)
                if other is not None and other != claim.key:
                    log.warning(
                        "device is allocated to two claims: only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "other": other},
                    )
        if claim.allocation is None:
            self._ledger.set_claim(claim.key, ())
            return
        record = counter_record(claim)
        if record is not None and record.problem:
            self._report(
                Problem(
                    ev.RESOURCE_CLAIM,
                    ev.GROUP_RESOURCE,
                    claim.key,
                    f"malformed counter record, its devices are charged at least what their slices say: {record.problem}",
                    claim.meta.uid,
                    COUNTER_RECORD_MALFORMED,
                )
            )
        self._ledger.set_claim(claim.key, claim.allocation.results, record.devices if record is not None else None)

    def _unindex_generated(self, key: str) -> None:
        owner, extended_owner = self._claim_owners.pop(key, (None, None))
        if extended_owner is not None and self.extended_claims.get(extended_owner) == key:
            del self.extended_claims[extended_owner]
        if owner is None:
            return
        by_name = self.generated_claims.get(owner[0])
        if by_name is not None and by_name.get(owner[1]) == key:
            del by_name[owner[1]]
            if not by_name:
                del self.generated_claims[owner[0]]

    def _on_template(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.templates.pop(event.key, None)
        else:
            self.templates[event.key] = parse_resource_claim_template(event.object)

    _handlers: ClassVar[dict[str, Handler]] = {
        ev.NODE: _on_node,
        ev.POD: _on_pod,
        ev.RESOURCE_CLAIM: _on_claim,
        ev.RESOURCE_CLAIM_TEMPLATE: _on_template,
        ev.PERSISTENT_VOLUME_CLAIM: _on_volume,
        ev.PERSISTENT_VOLUME: _on_volume,
    }

    # ------------------------------------------------------------------ queries

    def pod_claims(self, pod: Pod) -> tuple[list[ResourceClaim], Failure | None]:
        """The pod's claims in allocation order (allocator.pod_claims), or why they cannot be resolved yet.

        The claim for the pod's extended resources comes last, when it exists:
        named in the pod's status, or found by its owner before that status is written.
        """
        out: list[ResourceClaim] = []
        ns = pod.meta.namespace
        extended_named = False
        for ref in claim_refs(pod):
            if ref.name is None:
                # The controller creates the claim, then records it in the pod's status: the
                # claim it owns may be here before that status (or the scheduler's copy of it).
                owned = self.generated_claims.get(pod.meta.uid, {}).get(ref.pod_claim) if pod.meta.uid else None
                if owned is not None and owned in self.claims:
                    out.append(self.claims[owned])
                    continue
                return (
                    out,
                    plain(
                        REASON_CLAIMS_UNRESOLVED,
                        f"pod {pod.key}: the claim for pod claim {ref.pod_claim!r} (template {ns}/{ref.template}) has not been created yet",
                    ),
                )
            claim = self.claims.get(f"{ns}/{ref.name}")
            if claim is None:
                if ref.source == EXTENDED:
                    continue  # deleted after a failed bind: a new one is made at the next /bind
                return out, of_claim(REASON_CLAIMS_UNRESOLVED, f"{ns}/{ref.name}", f" (pod claim {ref.pod_claim!r}) not found")
            extended_named |= ref.source == EXTENDED
            out.append(claim)
        if not extended_named and pod.meta.uid:
            key = self.extended_claims.get(pod.meta.uid)
            if key is not None and key in self.claims:
                out.append(self.claims[key])
        return out, None
