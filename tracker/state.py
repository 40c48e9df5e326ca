"""ClusterState: everything the extender knows about the cluster, kept current.

Sources push ObjectEvents in; the state parses each object once, keeps the
patched device views (recomputing only the devices a change can touch), an
index from node to slices, the devices allocated to claims and the in-flight
ledger of allocations being written. Readers (filter, bind, eviction) get
plain values and never see a half-applied change: every mutation happens
synchronously on the event loop.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from allocator.device_view import DeviceView, SliceView
from allocator.parse import (
    ValidationError,
    parse_device_class,
    parse_device_taint_rule,
    parse_node,
    parse_pod,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
    parse_resource_slice_patch,
)
from allocator.tolerations import blocks_allocation
from allocator.types import (
    DeviceClass,
    DeviceID,
    DeviceTaintRule,
    Node,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    ResourceSlicePatch,
)
from tracker import events as ev
from tracker.ledger import AllocationLedger
from tracker.patched_view import SelectorContext, effective_view
from tracker.volumes import VolumeIndex

log = logging.getLogger("dra_extender.tracker")

# The kinds whose initial list gates readiness, as (kind, group). The optional APIs
# (rules, patches) count too: a filter answered before a served rule API is listed
# would ignore its taints. A source marks an optional kind synced (and empty) once
# it knows the API is not served, so a missing API does not block.
REQUIRED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        (ev.NODE, ev.GROUP_CORE),
        (ev.POD, ev.GROUP_CORE),
        (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE),
        (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE),
        (ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE),
        (ev.DEVICE_CLASS, ev.GROUP_RESOURCE),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER),
        (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER),
        (ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE),
        (ev.PERSISTENT_VOLUME, ev.GROUP_CORE),
    }
)

_ANY = None  # wildcard in selector index keys
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


def _resource_version(raw: Mapping[str, Any] | None) -> int | None:
    try:
        return int(((raw or {}).get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def _is_older(new: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    a, b = _resource_version(new), _resource_version(current)
    return a is not None and b is not None and a < b


def _spec_field(raw: Mapping[str, Any], name: str) -> Any:
    spec = raw.get("spec")
    return spec.get(name) if isinstance(spec, Mapping) else None


def _same_shape(old: ResourceSlice, new: ResourceSlice) -> bool:
    """Same driver, pool, node and device names: every index entry of the old slice still holds."""
    return (
        old.driver == new.driver
        and old.pool == new.pool
        and old.node_name == new.node_name
        and len(old.devices) == len(new.devices)
        and all(a.name == b.name for a, b in zip(old.devices, new.devices, strict=True))
    )


def _index_keys(driver: str, pool: str, device: str) -> list[tuple[str | None, str | None, str | None]]:
    """Every (driver, pool, device) wildcard bucket a device falls into."""
    return [(d, p, n) for d in (driver, _ANY) for p in (pool, _ANY) for n in (device, _ANY)]


POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


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


class ClusterState:
    def __init__(
        self,
        cel: object,
        *,
        required: Iterable[tuple[str, str]] = REQUIRED_KINDS,
        on_problem: Callable[[Problem], None] | None = None,
    ) -> None:
        self.cel = cel
        self.required = frozenset(required)
        self.synced: set[tuple[str, str]] = set()
        self.generation = 0  # bumped on every applied change
        self.on_problem = on_problem
        # (kind, group, name) -> what was reported: spec tokens for _BLAMED_PER_SPEC, else messages.
        self._reported: dict[tuple[str, str, str], set[bytes | str]] = {}
        self._spec_tokens: dict[tuple[str, str, str], bytes] = {}

        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}  # only pods with resource claims or PVC volumes
        self.volumes = VolumeIndex()  # volume taints (tracker/volumes.py)
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.rules: dict[tuple[str, str], DeviceTaintRule] = {}  # (group, name)
        self.patches: dict[str, ResourceSlicePatch] = {}
        self.raw_claims: dict[str, dict[str, Any]] = {}
        self.raw_pods: dict[str, dict[str, Any]] = {}
        # Claims generated from templates, by owning pod uid and pod claim name: found before
        # kube-controller-manager has written the pod's status.resourceClaimStatuses.
        self.generated_claims: dict[str, dict[str, str]] = defaultdict(dict)

        # slice -> device -> (attributes, capacity, version): the version names the device's
        # content in CEL cache keys; it changes only when attributes or capacity do.
        self._device_versions: dict[str, dict[str, tuple[object, object, int]]] = {}
        self._raw_devices: dict[str, dict[str, tuple[Any, Any]]] = {}  # slice -> device -> (raw, parsed)
        self._patch_versions: dict[str, int] = {}
        self._version_counter = 0
        self.slice_views: dict[str, SliceView] = {}
        self.devices: dict[DeviceID, DeviceView] = {}
        self._device_slice: dict[DeviceID, str] = {}
        self._devices_by_key: dict[tuple[str | None, str | None, str | None], set[DeviceID]] = defaultdict(set)
        self._node_slices: dict[str, set[str]] = defaultdict(set)  # node-local slices
        self._shared_slices: set[str] = set()  # reachable from more than one node
        self._rules_by_key: dict[tuple[str | None, str | None, str | None], set[tuple[str, str]]] = defaultdict(set)
        self._patches_by_key: dict[tuple[str | None, str | None, str | None], set[str]] = defaultdict(set)
        self._class_dependents: dict[str, set[tuple[str, str]]] = defaultdict(set)  # class -> rules/patches

        # A log of what changed, so cached answers are dropped only where they depend on it:
        # a node (its node-local slices, their devices' allocation state, the Node object),
        # or everything (a shared pool reachable from many nodes, a DeviceClass). Entry i has
        # sequence number change_log_base + i; None marks a change that concerns every node.
        self.change_log: list[str | None] = []
        self.change_log_base = 0
        self.global_change_seq = 0
        self.ledger = AllocationLedger(self._device_changed)
        self._taken_local: dict[str, set[DeviceID]] = defaultdict(set)  # node -> its taken node-local devices
        self.listeners: list[Callable[[ev.ObjectEvent], None]] = []
        # resourceVersion of every object the view holds, per (kind, group): lets an
        # operator (and the tests) compare the view with the API server's state.
        self.versions: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)

    # ------------------------------------------------------------------ versions

    @property
    def allocated(self) -> Mapping[DeviceID, str]:
        return self.ledger.allocated

    @property
    def inflight(self) -> Mapping[DeviceID, str]:
        return self.ledger.inflight

    @property
    def change_seq(self) -> int:
        """The sequence number the next change will get."""
        return self.change_log_base + len(self.change_log)

    def changed_nodes_since(self, seq: int) -> list[str | None] | None:
        """Nodes changed at or after `seq`; None when every node may have (or the log no longer reaches back)."""
        if seq < self.change_log_base or self.global_change_seq > seq:
            return None
        return self.change_log[seq - self.change_log_base :]

    def _changed(self, node_name: str | None) -> None:
        if node_name is None:
            self.global_change_seq = self.change_seq + 1  # one past this change's sequence number
        self.change_log.append(node_name)
        if len(self.change_log) > CHANGE_LOG_MAX:
            half = len(self.change_log) // 2
            del self.change_log[:half]
            self.change_log_base += half

    def _slice_changed(self, node_name: str | None) -> None:
        self._changed(node_name)

    def _device_changed(self, did: DeviceID) -> None:
        name = self._device_slice.get(did)
        s = self.slices.get(name) if name is not None else None
        node = s.node_name if s is not None else None
        self._slice_changed(node)
        if node is not None:
            self._track_taken(node, did)

    def _track_taken(self, node: str, did: DeviceID) -> None:
        if self.ledger.is_taken(did):
            self._taken_local[node].add(did)
        else:
            taken = self._taken_local.get(node)
            if taken is not None:
                taken.discard(did)
                if not taken:
                    del self._taken_local[node]

    def taken_on_node(self, node_name: str) -> int:
        """How many of the node's own (node-local) devices are allocated or in flight."""
        taken = self._taken_local.get(node_name)
        return len(taken) if taken else 0

    # ------------------------------------------------------------------ readiness

    @property
    def ready(self) -> bool:
        return self.required <= self.synced

    def missing(self) -> list[str]:
        return sorted(f"{k}.{g}" if g else k for k, g in self.required - self.synced)

    def mark_synced(self, kind: str, group: str) -> None:
        if (kind, group) not in self.synced:
            was_ready = self.ready
            self.synced.add((kind, group))
            log.info("initial state complete", extra={"kind": kind, "group": group})
            if self.ready and not was_ready:
                # Classes may have arrived after the slices: warm what is still cold.
                self._warm(self.devices.values(), self.classes.values())

    # ------------------------------------------------------------------ event intake

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        """A consistent full list of one kind: upsert all, delete what is not in it."""
        keys = set()
        for raw in objects:
            key = ev.object_key(kind, raw)
            keys.add(key)
            self.apply(ev.ObjectEvent("MODIFIED", kind, group, key, raw))
        for key in self._keys_of(kind, group) - keys:
            self.apply(ev.ObjectEvent("DELETED", kind, group, key, {}))

    def _store(self, kind: str) -> Mapping[str, Any]:
        return {
            ev.NODE: self.nodes,
            ev.POD: self.raw_pods,
            ev.RESOURCE_CLAIM: self.claims,
            ev.RESOURCE_CLAIM_TEMPLATE: self.templates,
            ev.DEVICE_CLASS: self.classes,
            ev.RESOURCE_SLICE: self.slices,
            ev.RESOURCE_SLICE_PATCH: self.patches,
            ev.PERSISTENT_VOLUME_CLAIM: self.volumes.pvcs,
            ev.PERSISTENT_VOLUME: self.volumes.pvs,
        }.get(kind, {})

    def _keys_of(self, kind: str, group: str) -> set[str]:
        if kind == ev.DEVICE_TAINT_RULE:
            return {name for (g, name) in self.rules if g == group}
        return set(self._store(kind))

    def _holds(self, kind: str, group: str, key: str) -> bool:
        if kind == ev.DEVICE_TAINT_RULE:
            return (group, key) in self.rules
        return key in self._store(kind)

    def apply(self, event: ev.ObjectEvent) -> None:
        handler = self._handlers.get(event.kind)
        if handler is None:
            return
        if event.type != "DELETED" and self._is_echo(event):
            return
        if event.kind in _BLAMED_PER_SPEC:
            self._track_spec(event)
        try:
            handler(self, event)
        except ValidationError as e:
            uid = str((event.object.get("metadata") or {}).get("uid") or "")
            self.report(Problem(event.kind, event.group, event.key, str(e), uid))
            log.warning(
                "ignoring invalid object",
                extra={"kind": event.kind, "object": event.key, "field": e.field, "err": e.reason},
            )
            return
        self.generation += 1
        versions = self.versions[(event.kind, event.group)]
        if event.type == "DELETED" or not self._holds(event.kind, event.group, event.key):
            versions.pop(event.key, None)
        else:
            # A claim keeps the newest of our write and its watch echo (see _on_claim).
            held = self.raw_claims[event.key] if event.kind == ev.RESOURCE_CLAIM else event.object
            versions[event.key] = str((held.get("metadata") or {}).get("resourceVersion") or "")
        for listener in self.listeners:
            listener(event)

    def _is_echo(self, event: ev.ObjectEvent) -> bool:
        """The watch bringing back a claim or pod at the version we already hold (our own write's echo)."""
        held = self.raw_claims if event.kind == ev.RESOURCE_CLAIM else self.raw_pods if event.kind == ev.POD else None
        if held is None:
            return False
        current = held.get(event.key)
        if current is None:
            return False
        rv = (event.object.get("metadata") or {}).get("resourceVersion")
        return bool(rv) and rv == (current.get("metadata") or {}).get("resourceVersion")

    def _next_version(self) -> int:
        self._version_counter += 1
        return self._version_counter

    def _track_spec(self, event: ev.ObjectEvent) -> None:
        ident = (event.kind, event.group, event.key)
        if event.type == "DELETED":
            self._spec_tokens.pop(ident, None)
            self._reported.pop(ident, None)
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

    def report(self, problem: Problem) -> None:
        """Report a faulty object once (an Event and a metric downstream).

        Classes, rules and patches are reported once per spec (a new spec or a
        re-created object may be reported again); other kinds once per message.
        """
        ident = (problem.kind, problem.group, problem.name)
        token = self._spec_tokens.get(ident, problem.message)
        seen = self._reported.setdefault(ident, set())
        if token in seen:
            return
        seen.add(token)
        if not problem.uid:
            uid = self._uid_of(problem.kind, problem.group, problem.name)
            problem = Problem(problem.kind, problem.group, problem.name, problem.message, uid)
        if self.on_problem is not None:
            self.on_problem(problem)

    def _uid_of(self, kind: str, group: str, name: str) -> str:
        held: Any = self.rules.get((group, name)) if kind == ev.DEVICE_TAINT_RULE else self._store(kind).get(name)
        meta = getattr(held, "meta", None)
        return meta.uid if meta is not None else ""

    def _selector_context(self) -> SelectorContext:
        def report(kind: str, group: str, name: str, message: str) -> None:
            self.report(Problem(kind, group, name, message))

        return SelectorContext(self.cel, self.classes, report)

    # ------------------------------------------------------------------ per-kind handlers

    def _on_node(self, event: ev.ObjectEvent) -> None:
        self._changed(event.key)  # labels decide node selectors
        if event.type == "DELETED":
            self.nodes.pop(event.key, None)
        else:
            self.nodes[event.key] = parse_node(event.object)

    def _on_pod(self, event: ev.ObjectEvent) -> None:
        uses_volumes = self.volumes.set_pod(event.key, None if event.type == "DELETED" else event.object)
        if event.type == "DELETED":
            self.pods.pop(event.key, None)
            self.raw_pods.pop(event.key, None)
            return
        pod = parse_pod(event.object)
        if pod.resource_claims or uses_volumes:
            self.pods[event.key] = pod
            self.raw_pods[event.key] = event.object
        else:
            # Only pods with claims or PVCs matter; one that lost them is forgotten.
            self.pods.pop(event.key, None)
            self.raw_pods.pop(event.key, None)

    def _on_volume(self, event: ev.ObjectEvent) -> None:
        """A PVC or PV: keep its taints (and a PVC's bound volume); report a malformed annotation."""
        self.volumes.set_volume(event.kind, event.key, None if event.type == "DELETED" else event.object)
        held = self.volumes.pvcs.get(event.key) if event.kind == ev.PERSISTENT_VOLUME_CLAIM else self.volumes.pvs.get(event.key)
        if held is not None and held.malformed is not None:
            self.report(
                Problem(
                    event.kind, event.group, event.key, f"malformed volume taints, volume closed to every pod: {held.malformed}", held.uid
                )
            )

    def _on_claim(self, event: ev.ObjectEvent) -> None:
        old = self.claims.get(event.key)
        if old is not None and event.type != "DELETED" and _is_older(event.object, self.raw_claims.get(event.key)):
            # A write we applied ourselves is newer than this (late) watch event:
            # going back would make allocated devices look free.
            return
        if old is not None:
            self._release_allocation(old)
            self._unindex_generated(event.key, self.raw_claims.get(event.key))
        if event.type == "DELETED":
            self.claims.pop(event.key, None)
            self.raw_claims.pop(event.key, None)
            return
        claim = parse_resource_claim(event.object)
        self.claims[event.key] = claim
        self.raw_claims[event.key] = event.object
        owner = _generated_for(event.object)
        if owner is not None:
            self.generated_claims[owner[0]][owner[1]] = event.key
        if claim.allocation is not None:
            for result in claim.allocation.results:
                if result.admin_access:
                    continue  # admin access does not take a device from others (as upstream)
                holder = self.ledger.inflight.get(result.device_id)
                if holder is not None and holder != claim.key:
                    log.warning(
                        "device allocated by another allocator while we were allocating it: only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "inflight_for": holder},
                    )
                other = self.ledger.allocated.get(result.device_id)
                if other is not None and other != claim.key:
                    log.warning(
                        "device is allocated to two claims: only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "other": other},
                    )
                self.ledger.allocate(result.device_id, claim.key)

    def _unindex_generated(self, key: str, raw: Mapping[str, Any] | None) -> None:
        owner = _generated_for(raw)
        if owner is None:
            return
        by_name = self.generated_claims.get(owner[0])
        if by_name is not None and by_name.get(owner[1]) == key:
            del by_name[owner[1]]
            if not by_name:
                del self.generated_claims[owner[0]]

    def _release_allocation(self, claim: ResourceClaim) -> None:
        if claim.allocation is None:
            return
        for result in claim.allocation.results:
            self.ledger.free(result.device_id, claim.key)

    def _on_template(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.templates.pop(event.key, None)
        else:
            self.templates[event.key] = parse_resource_claim_template(event.object)

    def _on_class(self, event: ev.ObjectEvent) -> None:
        self._changed(None)
        if event.type == "DELETED":
            self.classes.pop(event.key, None)
        else:
            device_class = parse_device_class(event.object)
            self.classes[event.key] = device_class
            for i, expression in enumerate(device_class.selectors):
                try:
                    self.cel.compile(expression)  # type: ignore[attr-defined]
                except ValueError as e:
                    self.report(Problem(ev.DEVICE_CLASS, event.group, event.key, f"spec.selectors[{i}]: {e}"))
            if self.synced:
                self._warm(self.devices.values(), [device_class])
        # Rules and patches that select by this class see a different set now.
        affected: set[DeviceID] = set()
        for kind, name in self._class_dependents.get(event.key, ()):
            if kind == "patch":
                patch = self.patches.get(name)
                if patch is not None:
                    affected |= self._devices_matching(patch.filter.driver, patch.filter.pool, patch.filter.device)
            else:
                group, _, rule_name = name.partition("|")
                rule = self.rules.get((group, rule_name))
                if rule is not None and rule.selector is not None:
                    s = rule.selector
                    affected |= self._devices_matching(s.driver, s.pool, s.device)
        self._recompute_devices(affected)

    def _on_slice(self, event: ev.ObjectEvent) -> None:
        name = event.key
        old = self.slices.get(name)
        if event.type == "DELETED":
            if old is not None:
                self._forget_cel(old, [d.name for d in old.devices], self._device_versions.get(name, {}))
                self._unindex_slice(old)
            self.slices.pop(name, None)
            self.slice_views.pop(name, None)
            self._device_versions.pop(name, None)
            self._raw_devices.pop(name, None)
            return
        previous = None
        if old is not None and old.driver == _spec_field(event.object, "driver"):
            previous = self._raw_devices.get(name)
        new = parse_resource_slice(event.object, previous=previous)
        self._remember_devices(name, event.object, new)
        self.slices[name] = new
        if old is not None and _same_shape(old, new):
            # Same devices in the same place (a taint, attribute or generation update): the
            # indexes stand; only the views are computed again.
            self._rebuild_slice_view(name)
            return
        if old is not None:
            self._unindex_slice(old)
        for device in new.devices:
            did = DeviceID(new.driver, new.pool, device.name)
            self._device_slice[did] = name
            for k in _index_keys(did.driver, did.pool, did.device):
                self._devices_by_key[k].add(did)
        if new.node_name is not None:
            self._node_slices[new.node_name].add(name)
            for device in new.devices:
                self._track_taken(new.node_name, DeviceID(new.driver, new.pool, device.name))
        else:
            self._shared_slices.add(name)
        self._rebuild_slice_view(name)

    def _remember_devices(self, name: str, raw: Mapping[str, Any], parsed: ResourceSlice) -> None:
        """Raw and parsed devices (to parse only what an update changes) and per-device CEL versions.

        A device keeps its version, and so its cached selector results, while
        its attributes and capacity stay the same objects (see parse_resource_slice);
        the CEL cache entries of versions that are gone are dropped.
        """
        raw_devices = (raw.get("spec") or {}).get("devices") or []
        self._raw_devices[name] = {d.name: (rd, d) for rd, d in zip(raw_devices, parsed.devices, strict=False)}
        old_versions = self._device_versions.get(name, {})
        versions: dict[str, tuple[object, object, int]] = {}
        for d in parsed.devices:
            prev = old_versions.get(d.name)
            if prev is not None and prev[0] is d.attributes and prev[1] is d.capacity:
                versions[d.name] = prev
            else:
                versions[d.name] = (d.attributes, d.capacity, self._next_version())
        self._device_versions[name] = versions
        old = self.slices.get(name)
        if old is not None:
            gone = [d.name for d in old.devices if versions.get(d.name) is not old_versions.get(d.name)]
            self._forget_cel(old, gone, old_versions)

    def _forget_cel(self, old: ResourceSlice, devices: Iterable[str], versions: Mapping[str, tuple[object, object, int]]) -> None:
        """Drop the CEL cache entries (activations, results) of device versions that are gone."""
        forget = getattr(self.cel, "forget", None)
        if forget is None:
            return
        view = self.slice_views.get(old.meta.name)
        current = {d.id.device: d.cel_key for d in view.devices} if view is not None else {}
        for device in devices:
            if device in current:
                forget(current[device])
            version = versions.get(device)
            if version is not None:
                forget(("orig", old.meta.name, version[2], device))  # patched_view.original_view's key

    def _unindex_slice(self, old: ResourceSlice) -> None:
        for device in old.devices:
            did = DeviceID(old.driver, old.pool, device.name)
            if self._device_slice.get(did) == old.meta.name:
                del self._device_slice[did]
                self.devices.pop(did, None)
                for k in _index_keys(did.driver, did.pool, did.device):
                    bucket = self._devices_by_key.get(k)
                    if bucket is not None:
                        bucket.discard(did)
                        if not bucket:
                            del self._devices_by_key[k]
        self._slice_changed(old.node_name)
        if old.node_name is not None:
            taken = self._taken_local.get(old.node_name)
            if taken is not None:
                taken.difference_update(DeviceID(old.driver, old.pool, d.name) for d in old.devices)
                if not taken:
                    del self._taken_local[old.node_name]
            bucket = self._node_slices.get(old.node_name)
            if bucket is not None:
                bucket.discard(old.meta.name)
                if not bucket:
                    del self._node_slices[old.node_name]
        else:
            self._shared_slices.discard(old.meta.name)

    def _on_rule(self, event: ev.ObjectEvent) -> None:
        ident = (event.group, event.key)
        affected: set[DeviceID] = set()
        old = self.rules.get(ident)
        if old is not None:
            affected |= self._unindex_rule(ident, old)
        if event.type == "DELETED":
            self.rules.pop(ident, None)
        else:
            rule = parse_device_taint_rule(event.object, group=event.group or ev.GROUP_RESOURCE)
            self.rules[ident] = rule
            if rule.selector is not None:
                s = rule.selector
                self._rules_by_key[(s.driver, s.pool, s.device)].add(ident)
                if s.device_class_name:
                    self._class_dependents[s.device_class_name].add(("rule", f"{ident[0]}|{ident[1]}"))
                affected |= self._devices_matching(s.driver, s.pool, s.device)
        self._recompute_devices(affected)

    def _unindex_rule(self, ident: tuple[str, str], rule: DeviceTaintRule) -> set[DeviceID]:
        if rule.selector is None:
            return set()
        s = rule.selector
        bucket = self._rules_by_key.get((s.driver, s.pool, s.device))
        if bucket is not None:
            bucket.discard(ident)
        if s.device_class_name:
            self._class_dependents[s.device_class_name].discard(("rule", f"{ident[0]}|{ident[1]}"))
        return self._devices_matching(s.driver, s.pool, s.device)

    def _on_patch(self, event: ev.ObjectEvent) -> None:
        name = event.key
        affected: set[DeviceID] = set()
        old = self.patches.get(name)
        if old is not None:
            f = old.filter
            self._patches_by_key[(f.driver, f.pool, f.device)].discard(name)
            if f.device_class_name:
                self._class_dependents[f.device_class_name].discard(("patch", name))
            affected |= self._devices_matching(f.driver, f.pool, f.device)
        if event.type == "DELETED":
            self.patches.pop(name, None)
            self._patch_versions.pop(name, None)
        else:
            patch = parse_resource_slice_patch(event.object)
            self.patches[name] = patch
            self._patch_versions[name] = self._next_version()
            f = patch.filter
            self._patches_by_key[(f.driver, f.pool, f.device)].add(name)
            if f.device_class_name:
                self._class_dependents[f.device_class_name].add(("patch", name))
            affected |= self._devices_matching(f.driver, f.pool, f.device)
        self._recompute_devices(affected)

    _handlers: ClassVar[dict[str, Callable[[ClusterState, ev.ObjectEvent], None]]] = {
        ev.NODE: _on_node,
        ev.POD: _on_pod,
        ev.RESOURCE_CLAIM: _on_claim,
        ev.RESOURCE_CLAIM_TEMPLATE: _on_template,
        ev.DEVICE_CLASS: _on_class,
        ev.RESOURCE_SLICE: _on_slice,
        ev.DEVICE_TAINT_RULE: _on_rule,
        ev.RESOURCE_SLICE_PATCH: _on_patch,
        ev.PERSISTENT_VOLUME_CLAIM: _on_volume,
        ev.PERSISTENT_VOLUME: _on_volume,
    }

    # ------------------------------------------------------------------ patched views

    def _devices_matching(self, driver: str | None, pool: str | None, device: str | None) -> set[DeviceID]:
        return set(self._devices_by_key.get((driver, pool, device), ()))

    def _candidates(self, did: DeviceID) -> tuple[list[ResourceSlicePatch], list[DeviceTaintRule]]:
        if not self.rules and not self.patches:
            return [], []  # the common case: nothing to look up per device
        patches = [self.patches[n] for k in _index_keys(did.driver, did.pool, did.device) for n in self._patches_by_key.get(k, ())]
        rules = [self.rules[i] for k in _index_keys(did.driver, did.pool, did.device) for i in self._rules_by_key.get(k, ())]
        return patches, rules

    def _compute_device(self, slice_: ResourceSlice, index: int, ctx: SelectorContext) -> DeviceView:
        device = slice_.devices[index]
        did = DeviceID(slice_.driver, slice_.pool, device.name)
        patches, rules = self._candidates(did)
        return effective_view(
            ctx,
            slice_,
            device,
            patches,
            rules,
            self.devices.get(did),
            self._device_versions[slice_.meta.name][device.name][2],
            self._patch_versions,
        )

    def _rebuild_slice_view(self, name: str) -> None:
        s = self.slices[name]
        ctx = self._selector_context()
        views = []
        for i in range(len(s.devices)):
            view = self._compute_device(s, i, ctx)
            if self._device_slice.get(view.id) == name:
                self.devices[view.id] = view
            views.append(view)
        self._set_slice_view(s, tuple(views))
        self._warm(views, self.classes.values())

    def _warm(self, devices: Iterable[DeviceView], classes: Iterable[DeviceClass]) -> None:
        """Evaluate class selectors when devices or classes change, not on the scheduler's clock.

        A cold selector costs hundreds of microseconds per device; paid here, a
        filter over thousands of nodes is answered from the cache.
        """
        cel = self.cel
        compiled = []
        for device_class in classes:
            for expression in device_class.selectors:
                try:
                    compiled.append(cel.compile(expression))  # type: ignore[attr-defined]
                except ValueError:
                    continue  # reported when the class arrived
        if not compiled:
            return
        for device in devices:
            for selector in compiled:
                try:
                    if not cel.evaluate(selector, device):  # type: ignore[attr-defined]
                        break  # the class's later selectors are not needed for this device
                except ValueError:
                    break

    def _set_slice_view(self, s: ResourceSlice, views: tuple[DeviceView, ...]) -> None:
        self._slice_changed(s.node_name)
        self.slice_views[s.meta.name] = SliceView(
            name=s.meta.name,
            driver=s.driver,
            pool=s.pool,
            generation=s.generation,
            resource_slice_count=s.resource_slice_count,
            devices=views,
            node_name=s.node_name,
            node_selector=s.node_selector,
            all_nodes=s.all_nodes,
            per_device_node_selection=s.per_device_node_selection,
        )

    def _recompute_devices(self, affected: set[DeviceID]) -> None:
        if not affected:
            return
        ctx = self._selector_context()
        by_slice: dict[str, list[DeviceID]] = defaultdict(list)
        for did in affected:
            name = self._device_slice.get(did)
            if name is not None:
                by_slice[name].append(did)
        for name, ids in by_slice.items():
            s = self.slices[name]
            view = self.slice_views[name]
            wanted = {d.device for d in ids}
            new_devices = list(view.devices)
            changed = False
            for i, d in enumerate(s.devices):
                if d.name not in wanted:
                    continue
                nv = self._compute_device(s, i, ctx)
                if nv is not new_devices[i]:
                    before = new_devices[i].cel_key
                    if before != nv.cel_key and isinstance(before, tuple) and before[:1] == ("patched",):
                        forget = getattr(self.cel, "forget", None)
                        if forget is not None:
                            forget(before)  # a patched version replaced; the original's key stays in use
                    new_devices[i] = nv
                    self.devices[nv.id] = nv
                    changed = True
            if changed:
                self._set_slice_view(s, tuple(new_devices))
                self._warm(self.slice_views[name].devices, self.classes.values())

    # ------------------------------------------------------------------ queries

    def pod_claims(self, pod: Pod) -> tuple[list[ResourceClaim], str | None]:
        """The pod's claims in pod order, or why they cannot be resolved yet."""
        out: list[ResourceClaim] = []
        ns = pod.meta.namespace
        for pc in pod.resource_claims:
            if pc.resource_claim_name is not None:
                name = pc.resource_claim_name
            elif pc.name not in pod.claim_statuses:
                # The controller creates the claim, then records it in the pod's status: the
                # claim it owns may be here before that status (or the scheduler's copy of it).
                owned = self.generated_claims.get(pod.meta.uid, {}).get(pc.name) if pod.meta.uid else None
                if owned is not None and owned in self.claims:
                    out.append(self.claims[owned])
                    continue
                return out, (
                    f"pod {pod.key}: the claim for pod claim {pc.name!r} (template "
                    f"{ns}/{pc.resource_claim_template_name}) has not been created yet"
                )
            else:
                generated = pod.claim_statuses[pc.name]
                if generated is None:
                    continue  # no claim needed for this entry (upstream semantics)
                name = generated
            claim = self.claims.get(f"{ns}/{name}")
            if claim is None:
                return out, f"claim {ns}/{name} (pod claim {pc.name!r}) not found"
            out.append(claim)
        return out, None

    def node(self, name: str) -> Node | None:
        return self.nodes.get(name)

    def slices_for_node(self, node_name: str) -> list[SliceView]:
        """Slices that may reach `node_name`: its own node-local ones and every shared one."""
        names = list(self._node_slices.get(node_name, ()))
        names.extend(self._shared_slices)
        return [self.slice_views[n] for n in names if n in self.slice_views]

    def device(self, did: DeviceID) -> DeviceView | None:
        return self.devices.get(did)

    def is_taken(self, did: DeviceID) -> bool:
        return self.ledger.is_taken(did)

    def device_state_counts(self) -> dict[str, int]:
        counts = {"free": 0, "allocated": 0, "tainted": 0}
        for did, view in self.devices.items():
            if did in self.allocated:
                counts["allocated"] += 1
            elif any(blocks_allocation(t) for t in view.taints):
                counts["tainted"] += 1
            else:
                counts["free"] += 1
        return counts
