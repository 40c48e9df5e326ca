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
from typing import Any

import orjson

from allocator.device_view import DeviceView, SliceView
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
from tracker import events as ev
from tracker.patched_view import SelectorContext, effective_view

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
    }
)

_ANY = None  # wildcard in selector index keys

# Objects blamed with one Event per spec (DESIGN §4: "one deduplicated Warning Event on
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


def _index_keys(driver: str, pool: str, device: str) -> list[tuple[str | None, str | None, str | None]]:
    """Every (driver, pool, device) wildcard bucket a device falls into."""
    return [(d, p, n) for d in (driver, _ANY) for p in (pool, _ANY) for n in (device, _ANY)]


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
        self.problem_count = 0

        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}  # only pods with resource claims
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.rules: dict[tuple[str, str], DeviceTaintRule] = {}  # (group, name)
        self.patches: dict[str, ResourceSlicePatch] = {}
        self.raw_claims: dict[str, dict[str, Any]] = {}
        self.raw_pods: dict[str, dict[str, Any]] = {}

        self._slice_versions: dict[str, int] = {}
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

        self.allocated: dict[DeviceID, str] = {}  # device -> claim key
        self.inflight: dict[DeviceID, str] = {}  # device -> claim key, while /bind writes
        self.listeners: list[Callable[[ev.ObjectEvent], None]] = []
        # resourceVersion of every object the view holds, per (kind, group): lets an
        # operator (and the tests) compare the view with the API server's state.
        self.versions: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)

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
        if event.kind in _BLAMED_PER_SPEC:
            self._track_spec(event)
        try:
            handler(self, event)
        except ValidationError as e:
            uid = str((event.object.get("metadata") or {}).get("uid") or "")
            self._report(Problem(event.kind, event.group, event.key, str(e), uid))
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

    def _next_version(self) -> int:
        self._version_counter += 1
        return self._version_counter

    def report(self, problem: Problem) -> None:
        """Report a faulty object once (an Event and a metric downstream).

        Classes, rules and patches are reported once per spec (a new spec or a
        re-created object may be reported again); other kinds once per message.
        """
        self._report(problem)

    def _track_spec(self, event: ev.ObjectEvent) -> None:
        ident = (event.kind, event.group, event.key)
        if event.type == "DELETED":
            self._spec_tokens.pop(ident, None)
            self._reported.pop(ident, None)
            return
        meta = event.object.get("metadata") or {}
        token = orjson.dumps([meta.get("uid"), event.object.get("spec")], option=orjson.OPT_SORT_KEYS)
        if self._spec_tokens.get(ident) != token:
            self._spec_tokens[ident] = token
            self._reported.pop(ident, None)

    def _report(self, problem: Problem) -> None:
        ident = (problem.kind, problem.group, problem.name)
        token = self._spec_tokens.get(ident, problem.message)
        seen = self._reported.setdefault(ident, set())
        if token in seen:
            return
        seen.add(token)
        self.problem_count += 1
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
            self._report(Problem(kind, group, name, message))

        return SelectorContext(self.cel, self.classes, report)

    # ------------------------------------------------------------------ per-kind handlers

    def _on_node(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.nodes.pop(event.key, None)
        else:
            self.nodes[event.key] = parse_node(event.object)

    def _on_pod(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.pods.pop(event.key, None)
            self.raw_pods.pop(event.key, None)
            return
        pod = parse_pod(event.object)
        if pod.resource_claims:
            self.pods[event.key] = pod
            self.raw_pods[event.key] = event.object
        else:
            # Only pods with claims matter; one that lost them is forgotten.
            self.pods.pop(event.key, None)
            self.raw_pods.pop(event.key, None)

    def _on_claim(self, event: ev.ObjectEvent) -> None:
        old = self.claims.get(event.key)
        if old is not None and event.type != "DELETED" and _is_older(event.object, self.raw_claims.get(event.key)):
            # A write we applied ourselves is newer than this (late) watch event:
            # going back would make allocated devices look free.
            return
        if old is not None:
            self._release_allocation(old)
        if event.type == "DELETED":
            self.claims.pop(event.key, None)
            self.raw_claims.pop(event.key, None)
            return
        claim = parse_resource_claim(event.object)
        self.claims[event.key] = claim
        self.raw_claims[event.key] = event.object
        if claim.allocation is not None:
            for result in claim.allocation.results:
                if result.admin_access:
                    continue  # admin access does not take a device from others (as upstream)
                holder = self.inflight.get(result.device_id)
                if holder is not None and holder != claim.key:
                    log.warning(
                        "device allocated by another allocator while we were allocating it: "
                        "only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "inflight_for": holder},
                    )
                other = self.allocated.get(result.device_id)
                if other is not None and other != claim.key:
                    log.warning(
                        "device is allocated to two claims: only one allocator may manage a device pool",
                        extra={"device": str(result.device_id), "claim": claim.key, "other": other},
                    )
                self.allocated[result.device_id] = claim.key

    def _release_allocation(self, claim: ResourceClaim) -> None:
        if claim.allocation is None:
            return
        for result in claim.allocation.results:
            if self.allocated.get(result.device_id) == claim.key:
                del self.allocated[result.device_id]

    def _on_template(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.templates.pop(event.key, None)
        else:
            self.templates[event.key] = parse_resource_claim_template(event.object)

    def _on_class(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.classes.pop(event.key, None)
        else:
            device_class = parse_device_class(event.object)
            self.classes[event.key] = device_class
            for i, expression in enumerate(device_class.selectors):
                try:
                    self.cel.compile(expression)  # type: ignore[attr-defined]
                except ValueError as e:
                    self._report(Problem(ev.DEVICE_CLASS, event.group, event.key, f"spec.selectors[{i}]: {e}"))
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
        if old is not None:
            self._unindex_slice(old)
            # Every version of a slice has keys of its own: the old ones are never asked again.
            self._forget_cel(old, self.slice_views.get(name), self._slice_versions.get(name))
        if event.type == "DELETED":
            self.slices.pop(name, None)
            self.slice_views.pop(name, None)
            self._slice_versions.pop(name, None)
            return
        new = parse_resource_slice(event.object)
        self.slices[name] = new
        self._slice_versions[name] = self._next_version()
        for device in new.devices:
            did = DeviceID(new.driver, new.pool, device.name)
            self._device_slice[did] = name
            for k in _index_keys(did.driver, did.pool, did.device):
                self._devices_by_key[k].add(did)
        if new.node_name is not None:
            self._node_slices[new.node_name].add(name)
        else:
            self._shared_slices.add(name)
        self._rebuild_slice_view(name)

    def _forget_cel(self, old: ResourceSlice, view: SliceView | None, version: int | None) -> None:
        """Drop the CEL cache entries (activations, results) of a slice version that is gone."""
        forget = getattr(self.cel, "forget", None)
        if forget is None:
            return
        if view is not None:
            for device in view.devices:
                forget(device.cel_key)
        if version is not None:
            for device in old.devices:
                forget(("orig", old.meta.name, version, device.name))  # patched_view.original_view's key

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
        if old.node_name is not None:
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

    _handlers: dict[str, Callable[[ClusterState, ev.ObjectEvent], None]] = {
        ev.NODE: _on_node,
        ev.POD: _on_pod,
        ev.RESOURCE_CLAIM: _on_claim,
        ev.RESOURCE_CLAIM_TEMPLATE: _on_template,
        ev.DEVICE_CLASS: _on_class,
        ev.RESOURCE_SLICE: _on_slice,
        ev.DEVICE_TAINT_RULE: _on_rule,
        ev.RESOURCE_SLICE_PATCH: _on_patch,
    }

    # ------------------------------------------------------------------ patched views

    def _devices_matching(self, driver: str | None, pool: str | None, device: str | None) -> set[DeviceID]:
        return set(self._devices_by_key.get((driver, pool, device), ()))

    def _candidates(self, did: DeviceID) -> tuple[list[ResourceSlicePatch], list[DeviceTaintRule]]:
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
            self._slice_versions[slice_.meta.name],
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
        return did in self.allocated or did in self.inflight

    def taken_by(self, did: DeviceID) -> str | None:
        return self.allocated.get(did) or self.inflight.get(did)

    def device_state_counts(self) -> dict[str, int]:
        counts = {"free": 0, "allocated": 0, "tainted": 0}
        for did, view in self.devices.items():
            if did in self.allocated:
                counts["allocated"] += 1
            elif any(t.effect in ("NoSchedule", "NoExecute") for t in view.taints):
                counts["tainted"] += 1
            else:
                counts["free"] += 1
        return counts
