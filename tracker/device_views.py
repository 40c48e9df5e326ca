"""The patched device views: slices, DeviceTaintRules, ResourceSlicePatches and DeviceClasses.

What upstream's resourceslice/tracker does: every device as the allocator
and the eviction controller see it, the driver's slice with the patches'
attributes and the rules' taints applied (tracker/patched_view.py), kept
current by recomputing only the devices a change can touch (the indexes in
tracker/device_index.py: by node, pool and device, and the rules and
patches by driver, pool and device, with wildcards), and the class
selectors warmed in the CEL cache on the event loop rather than on the
scheduler's clock (tracker/warmup.py). A part of tracker/state.py's ClusterState: it shares the ledger, the change
log and the problem reporter with the object store (tracker/store.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from allocator.counters import CounterTally
from allocator.device_view import DeviceView, SliceView
from allocator.parse import (
    device_digest,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_slice,
    parse_resource_slice_patch,
)
from allocator.quantity import format_quantity
from allocator.tolerations import blocks_allocation
from allocator.types import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    DeviceClass,
    DeviceID,
    DeviceTaint,
    DeviceTaintRule,
    ResourceSlice,
    ResourceSlicePatch,
)
from tracker import events as ev
from tracker.device_index import SelectorIndex, SliceIndex
from tracker.ledger import AllocationLedger
from tracker.patched_view import SelectorContext, effective_view
from tracker.store import ChangeLog, Handler, Problem
from tracker.warmup import SelectorWarmup

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

_RECOMPUTING = frozenset({ev.DEVICE_CLASS, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH})
# A slice's handler computes its devices' views (rule and patch selectors included) for at
# most this long; the rest get a provisional view, carrying this taint so that nothing is
# allocated on what is not known yet, and are computed in the background.
SLICE_HANDLER_SECONDS = 0.05
PENDING_TAINT = DeviceTaint("resource.dra-extender.io/selectors-pending", EFFECT_NO_SCHEDULE)
PENDING_SOURCE = "pending"

# The warm-up gives the event loop back after this much work, so probes, verbs and signals
# are served between its slices however many devices or how costly the class selectors.
WARM_SLICE_SECONDS = 0.02

log = logging.getLogger(__name__)


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


def _same_reach(old: ResourceSlice, new: ResourceSlice) -> bool:
    """The slice-level fields a device view is made of are unchanged."""
    return (
        old.meta.name == new.meta.name
        and old.driver == new.driver
        and old.pool == new.pool
        and old.node_name == new.node_name
        and old.node_selector == new.node_selector
        and old.all_nodes == new.all_nodes
        and old.per_device_node_selection == new.per_device_node_selection
    )


def _canonical(value: Any) -> bytes:
    """A digest of the canonical JSON (sorted keys) of a device's raw JSON, to compare with its last version's.

    16 bytes, not the JSON itself: orjson's output keeps a 4 KB buffer per
    object, more than the raw dict it replaces.
    """
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


class DeviceViews:
    """Every device's patched view, indexed by node, slice and (driver, pool, device); a part of ClusterState."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        ledger: AllocationLedger,
        changes: ChangeLog,
        report: Callable[[Problem], None],
        *,
        release: Callable[[ev.ObjectEvent], None],
        started: Callable[[], bool],
    ) -> None:
        """`release` tells the listeners of an event held back (see `hold_back`); `started`: some kind has its initial state."""
        self.cel = cel
        self._ledger = ledger
        self._changes = changes
        self._report = report
        self._release = release
        self._started = started
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.rules: dict[tuple[str, str], DeviceTaintRule] = {}  # (group, name)
        self.patches: dict[str, ResourceSlicePatch] = {}

        # slice -> device -> (attributes, capacity, version): the version names the device's
        # content in CEL cache keys; it changes only when attributes or capacity do.
        self._device_versions: dict[str, dict[str, tuple[object, object, int]]] = {}
        self._raw_devices: dict[str, dict[str, tuple[Any, Any]]] = {}  # slice -> device -> (DeviceDigest of the raw device, parsed)
        self._patch_versions: dict[str, int] = {}
        self._version_counter = 0
        self.slice_views: dict[str, SliceView] = {}
        self.devices: dict[DeviceID, DeviceView] = {}
        self._no_execute: set[DeviceID] = set()  # devices whose view carries a NoExecute taint
        self._index = SliceIndex(self.slices)
        self._selectors = SelectorIndex()
        self._taken_local: dict[str, set[DeviceID]] = defaultdict(set)  # node -> its taken node-local devices
        self._warmup = SelectorWarmup(cel, lambda did: self.devices.get(did))
        self._warm_task: asyncio.Task[None] | None = None
        # Devices whose views a rule, patch or class change asked to recompute, done in slices
        # on the loop (their selectors may be costly), and the events held back meanwhile.
        self._pending_recompute: set[DeviceID] = set()
        self._deferring = False  # the event being applied left work in _pending_recompute
        self._held_events: list[ev.ObjectEvent] = []
        self._views_ready = False

    # ------------------------------------------------------------------ allocation state per node

    def _slice_changed(self, node_name: str | None) -> None:
        self._changes.changed(node_name)

    def _pool_changed(self, s: ResourceSlice) -> None:
        """A slice changed: the nodes whose verdicts may depend on it must decide again.

        In a pool with shared counters a device on one node spends counters a
        device on another node may need: every node of the pool is affected.
        """
        if not s.shared_counters and not self._index.has_counters(s.driver, s.pool):
            self._slice_changed(s.node_name)
            return
        for node in self._index.pool_nodes(s.driver, s.pool, also=s.node_name):
            self._slice_changed(node)

    def device_changed(self, did: DeviceID) -> None:
        """A device was allocated, freed, reserved or released: its node (or its pool's nodes) must decide again."""
        name = self._index.slice_name(did)
        s = self.slices.get(name) if name is not None else None
        node = s.node_name if s is not None else None
        view = self.devices.get(did)
        if s is not None and view is not None and view.consumes_counters:
            for other in self._index.pool_nodes(s.driver, s.pool, also=node):
                self._slice_changed(other)
        else:
            self._slice_changed(node)
        if node is not None:
            self._track_taken(node, did)

    def _track_taken(self, node: str, did: DeviceID) -> None:
        if self._ledger.is_taken(did):
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

    # ------------------------------------------------------------------ what ClusterState asks of its parts

    def handles(self, kind: str) -> bool:
        return kind in self._handlers

    def apply(self, event: ev.ObjectEvent) -> None:
        """Apply one event of a kind these views `handle` (raises ValidationError for an invalid object)."""
        self._handlers[event.kind](self, event)

    def views_ready(self) -> bool:
        """Asked once every required kind is listed: the first time, the views those lists ask for
        must be computed (a rule listed after the slices must taint them before the first /filter);
        later recomputes are lag, as a watch event's is."""
        if not self._views_ready:
            if self._pending_recompute:
                return False
            self._views_ready = True
        return True

    def hold_back(self, event: ev.ObjectEvent) -> bool:
        """Whether the listeners hear of `event` later, through `release`.

        Listeners (the eviction controller) read the views this event changes: they hear
        of it once those are computed, after the events held before it.
        """
        if self._deferring or (self._held_events and event.kind in _RECOMPUTING):
            self._deferring = False
            self._held_events.append(event)
            return True
        return False

    def warm_all(self) -> None:
        """Every required kind has its initial state: classes may have arrived after the slices, warm what is still cold."""
        self._warm(self.devices.values(), self.classes.values())

    def _store(self, kind: str) -> Mapping[str, Any]:
        if kind == ev.DEVICE_CLASS:
            return self.classes
        if kind == ev.RESOURCE_SLICE:
            return self.slices
        if kind == ev.RESOURCE_SLICE_PATCH:
            return self.patches
        return {}

    def keys_of(self, kind: str, group: str) -> set[str]:
        if kind == ev.DEVICE_TAINT_RULE:
            return {name for (g, name) in self.rules if g == group}
        return set(self._store(kind))

    def holds(self, kind: str, group: str, key: str) -> bool:
        if kind == ev.DEVICE_TAINT_RULE:
            return (group, key) in self.rules
        return key in self._store(kind)

    def uid_of(self, kind: str, group: str, name: str) -> str:
        held: Any = self.rules.get((group, name)) if kind == ev.DEVICE_TAINT_RULE else self._store(kind).get(name)
        return held.meta.uid if held is not None else ""

    # ------------------------------------------------------------------ per-kind handlers

    def _next_version(self) -> int:
        self._version_counter += 1
        return self._version_counter

    def _selector_context(self) -> SelectorContext:
        def report(kind: str, group: str, name: str, message: str) -> None:
            self._report(Problem(kind, group, name, message))

        return SelectorContext(self.cel, self.classes, report)

    def _on_class(self, event: ev.ObjectEvent) -> None:
        self._changes.changed(None)
        if event.type == "DELETED":
            self.classes.pop(event.key, None)
        else:
            device_class = parse_device_class(event.object)
            self.classes[event.key] = device_class
            for i, expression in enumerate(device_class.selectors):
                try:
                    self.cel.compile(expression)
                except ValueError as e:
                    self._report(Problem(ev.DEVICE_CLASS, event.group, event.key, f"spec.selectors[{i}]: {e}"))
            if self._started():
                self._warm(self.devices.values(), [device_class])
        # Rules and patches that select by this class see a different set now.
        affected: set[DeviceID] = set()
        for kind, name in self._selectors.dependents(event.key):
            if kind == "patch":
                patch = self.patches.get(name)
                if patch is not None:
                    affected |= self._index.devices_matching(patch.filter.driver, patch.filter.pool, patch.filter.device)
            else:
                group, _, rule_name = name.partition("|")
                rule = self.rules.get((group, rule_name))
                if rule is not None and rule.selector is not None:
                    s = rule.selector
                    affected |= self._index.devices_matching(s.driver, s.pool, s.device)
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
        new = parse_resource_slice(event.object, previous=previous, encode=_canonical)
        self._remember_devices(name, event.object, new)
        self.slices[name] = new
        if old is not None and _same_shape(old, new):
            # Same devices in the same place (a taint, attribute or generation update): the
            # indexes stand; only the views of devices that changed are computed again.
            self._rebuild_slice_view(name, old)
            return
        if old is not None:
            self._unindex_slice(old)
        self._index.add(name, new)
        if new.node_name is not None:
            for device in new.devices:
                self._track_taken(new.node_name, DeviceID(new.driver, new.pool, device.name))
        self._rebuild_slice_view(name)

    def _remember_devices(self, name: str, raw: Mapping[str, Any], parsed: ResourceSlice) -> None:
        """Raw and parsed devices (to parse only what an update changes) and per-device CEL versions.

        A device keeps its version, and so its cached selector results, while
        its attributes and capacity stay the same objects (see parse_resource_slice);
        the CEL cache entries of versions that are gone are dropped.
        """
        raw_devices = (raw.get("spec") or {}).get("devices") or []
        kept: dict[str, tuple[Any, Any]] = {}
        for rd, d in zip(raw_devices, parsed.devices, strict=False):
            try:
                kept[d.name] = (device_digest(rd, _canonical), d)
            except TypeError:  # not JSON (a manifest's YAML value): keep the raw device itself
                kept[d.name] = (rd, d)
        self._raw_devices[name] = kept
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
        forget = self.cel.forget
        view = self.slice_views.get(old.meta.name)
        current = {d.id.device: d.cel_key for d in view.devices} if view is not None else {}
        for device in devices:
            if device in current:
                forget(current[device])
            version = versions.get(device)
            if version is not None:
                forget(("orig", old.meta.name, version[2], device))  # patched_view.original_view's key

    def _unindex_slice(self, old: ResourceSlice) -> None:
        for did in self._index.remove_devices(old):
            self.devices.pop(did, None)
            self._no_execute.discard(did)
        self._pool_changed(old)
        self._index.remove_slice(old)
        if old.node_name is not None:
            taken = self._taken_local.get(old.node_name)
            if taken is not None:
                taken.difference_update(DeviceID(old.driver, old.pool, d.name) for d in old.devices)
                if not taken:
                    del self._taken_local[old.node_name]

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
                self._selectors.add_rule(ident, rule)
                affected |= self._index.devices_matching(s.driver, s.pool, s.device)
        self._recompute_devices(affected)

    def _unindex_rule(self, ident: tuple[str, str], rule: DeviceTaintRule) -> set[DeviceID]:
        if rule.selector is None:
            return set()
        s = rule.selector
        self._selectors.remove_rule(ident, rule)
        return self._index.devices_matching(s.driver, s.pool, s.device)

    def _on_patch(self, event: ev.ObjectEvent) -> None:
        name = event.key
        affected: set[DeviceID] = set()
        old = self.patches.get(name)
        if old is not None:
            f = old.filter
            self._selectors.remove_patch(name, old)
            affected |= self._index.devices_matching(f.driver, f.pool, f.device)
        if event.type == "DELETED":
            self.patches.pop(name, None)
            self._patch_versions.pop(name, None)
        else:
            patch = parse_resource_slice_patch(event.object)
            self.patches[name] = patch
            self._patch_versions[name] = self._next_version()
            f = patch.filter
            self._selectors.add_patch(name, patch)
            affected |= self._index.devices_matching(f.driver, f.pool, f.device)
        self._recompute_devices(affected)

    _handlers: ClassVar[dict[str, Handler]] = {
        ev.DEVICE_CLASS: _on_class,
        ev.RESOURCE_SLICE: _on_slice,
        ev.DEVICE_TAINT_RULE: _on_rule,
        ev.RESOURCE_SLICE_PATCH: _on_patch,
    }

    # ------------------------------------------------------------------ patched views

    def _set_device(self, view: DeviceView) -> None:
        self.devices[view.id] = view
        if any(t.effect == EFFECT_NO_EXECUTE for t in view.taints):
            self._no_execute.add(view.id)
        else:
            self._no_execute.discard(view.id)

    def may_evict(self) -> bool:
        """Whether a NoExecute taint may apply to some device: one on a published device, or a rule with one.

        False lets the eviction controller skip its pass over every allocated
        claim, which every claim change would otherwise cost.
        """
        return bool(self._no_execute) or any(r.taint.effect == EFFECT_NO_EXECUTE for r in self.rules.values())

    def _candidates(self, did: DeviceID) -> tuple[list[ResourceSlicePatch], list[DeviceTaintRule]]:
        if not self.rules and not self.patches:
            return [], []  # the common case: nothing to look up per device
        patches = [self.patches[n] for n in self._selectors.patches_for(did)]
        rules = [self.rules[i] for i in self._selectors.rules_for(did)]
        return patches, rules

    def _needs_selectors(self, did: DeviceID) -> bool:
        """Whether a rule or patch that may touch the device needs a selector evaluated to know."""
        patches, rules = self._candidates(did)
        return any(p.filter.selectors or p.filter.device_class_name for p in patches) or any(
            r.selector is not None and (r.selector.selectors or r.selector.device_class_name) for r in rules
        )

    def _compute_device(self, slice_: ResourceSlice, index: int, ctx: SelectorContext, *, provisional: bool = False) -> DeviceView:
        """The device's view; `provisional`: without the rules and patches that need a selector
        evaluated (the costly part), tainted PENDING_TAINT until computed in full."""
        device = slice_.devices[index]
        did = DeviceID(slice_.driver, slice_.pool, device.name)
        patches, rules = self._candidates(did)
        if provisional:
            patches = [p for p in patches if not p.filter.selectors and not p.filter.device_class_name]
            rules = [r for r in rules if r.selector is None or (not r.selector.selectors and not r.selector.device_class_name)]
            view = effective_view(
                ctx,
                slice_,
                device,
                patches,
                rules,
                None,
                self._device_versions[slice_.meta.name][device.name][2],
                self._patch_versions,
            )
            return replace(view, taints=(*view.taints, PENDING_TAINT), taint_sources=(*view.taint_sources, PENDING_SOURCE))
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

    def _rebuild_slice_view(self, name: str, old: ResourceSlice | None = None) -> None:
        """The slice's device views; with `old` (the slice's last version, same shape), a device
        parsed to the very same object as before keeps its view: nothing it depends on changed
        (rules, patches and classes recompute views themselves when they change)."""
        s = self.slices[name]
        ctx = self._selector_context()
        before = self.slice_views.get(name) if old is not None and _same_reach(old, s) else None
        kept = before.devices if before is not None and old is not None and len(before.devices) == len(s.devices) else None
        views = []
        fresh = []
        until = self._handler_deadline()
        later: set[DeviceID] = set()
        for i, device in enumerate(s.devices):
            if kept is not None and old is not None and device is old.devices[i] and kept[i].id.device == device.name:
                view = kept[i]
            elif until is not None and time.monotonic() > until and self._needs_selectors(DeviceID(s.driver, s.pool, device.name)):
                view = self._compute_device(s, i, ctx, provisional=True)
                later.add(view.id)
            else:
                view = self._compute_device(s, i, ctx)
                fresh.append(view)
            if self._index.slice_name(view.id) == name:
                self._set_device(view)
            views.append(view)
        self._set_slice_view(s, tuple(views))
        self._warm(fresh, self.classes.values())
        if later:
            self._defer_recompute(later)

    def _handler_deadline(self) -> float | None:
        """Until when a slice's handler computes views itself: None without an event loop (all of them)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return time.monotonic() + SLICE_HANDLER_SECONDS

    def _warm(self, devices: Iterable[DeviceView], classes: Iterable[DeviceClass]) -> None:
        """Evaluate class selectors when devices or classes change (tracker/warmup.py).

        On an event loop the work runs in the background task, in slices of
        WARM_SLICE_SECONDS, so it never holds the loop; without one (tools,
        synchronous tests) it runs in place.
        """
        classes = tuple(c for c in classes if c.selectors)
        if not classes:
            return
        devices = tuple(devices)
        if not devices:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._warmup.now(devices, classes)
            return
        self._warmup.enqueue(devices, classes)
        if self._warm_task is None or self._warm_task.done():
            self._warm_task = loop.create_task(self._warm_later(), name="warm-selectors")

    async def _warm_later(self) -> None:
        """Recompute pending views, then drain the warm-up queue, yielding to the loop after every slice of work."""
        try:
            while self._pending_recompute or self._warmup.pending:
                if self._pending_recompute:
                    pending, self._pending_recompute = self._pending_recompute, set()
                    left = self._recompute_now(pending, time.monotonic() + WARM_SLICE_SECONDS)
                    self._pending_recompute |= left
                    if not self._pending_recompute:
                        held, self._held_events = self._held_events, []
                        for event in held:
                            self._release(event)
                    await asyncio.sleep(0)
                    continue
                await self._warmup.drain_one(WARM_SLICE_SECONDS, lambda: bool(self._pending_recompute))
        finally:
            self._warm_task = None

    def _set_slice_view(self, s: ResourceSlice, views: tuple[DeviceView, ...]) -> None:
        self._pool_changed(s)
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
            shared_counters=s.shared_counters,
        )

    def _recompute_devices(self, affected: set[DeviceID]) -> None:
        """Recompute the views of devices a rule, patch or class change touches.

        Their selectors may be costly: on an event loop, what does not fit in one
        slice of WARM_SLICE_SECONDS continues in the background task, in slices, and
        the event reaches the listeners once it is done (and the store is not ready
        before the initial views are); without a loop, all in place.
        """
        if not affected:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._recompute_now(affected, None)
            return
        if not self._pending_recompute:
            affected = self._recompute_now(affected, time.monotonic() + WARM_SLICE_SECONDS)  # most are done here
            if not affected:
                return
        self._defer_recompute(affected, loop)

    def _defer_recompute(self, affected: set[DeviceID], loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Recompute these views in the background task; the event being applied waits for it."""
        self._pending_recompute |= affected
        self._deferring = True
        if self._warm_task is None or self._warm_task.done():
            self._warm_task = (loop or asyncio.get_running_loop()).create_task(self._warm_later(), name="warm-selectors")

    def _recompute_now(self, affected: set[DeviceID], until: float | None) -> set[DeviceID]:
        """Recompute until `until` (monotonic; None: all); returns the devices left to do."""
        ctx = self._selector_context()
        by_slice: dict[str, list[DeviceID]] = defaultdict(list)
        for did in affected:
            name = self._index.slice_name(did)
            if name is not None:
                by_slice[name].append(did)
        left: set[DeviceID] = set()
        progressed = False  # at least one device per call
        for name, ids in by_slice.items():
            if until is not None and progressed and time.monotonic() > until:
                left.update(ids)
                continue
            s = self.slices[name]
            view = self.slice_views[name]
            wanted = {d.device for d in ids}
            new_devices = list(view.devices)
            changed = False
            for i, d in enumerate(s.devices):
                if d.name not in wanted:
                    continue
                if until is not None and progressed and time.monotonic() > until:
                    left.add(DeviceID(s.driver, s.pool, d.name))  # the next slice of work
                    continue
                progressed = True
                nv = self._compute_device(s, i, ctx)
                if nv is not new_devices[i]:
                    before = new_devices[i].cel_key
                    if before != nv.cel_key and isinstance(before, tuple) and before[:1] == ("patched",):
                        self.cel.forget(before)  # a patched version replaced; the original's key stays in use
                    new_devices[i] = nv
                    self._set_device(nv)
                    changed = True
            if changed:
                self._set_slice_view(s, tuple(new_devices))
                self._warm(self.slice_views[name].devices, self.classes.values())
        return left

    # ------------------------------------------------------------------ queries

    def slices_for_node(self, node_name: str) -> list[SliceView]:
        """Slices that may reach `node_name`: its own node-local ones and every shared one."""
        names = self._index.for_node(node_name)
        return [self.slice_views[n] for n in names if n in self.slice_views]

    def device(self, did: DeviceID) -> DeviceView | None:
        return self.devices.get(did)

    def slice_of(self, did: DeviceID) -> ResourceSlice | None:
        """The slice a device is published in, as the driver wrote it."""
        name = self._index.slice_name(did)
        return self.slices.get(name) if name is not None else None

    def sharing(self, did: DeviceID) -> dict[str, Any]:
        """What a device's counters and shares look like now, for /debug/devices and kubectl dra devices.

        `countersLeft`: its pool's counter sets minus what allocated devices
        (in flight included) consume; `shares`: share ID -> claim;
        `capacityLeft`: its capacity minus what the shares consume.
        """
        view = self.devices.get(did)
        if view is None:
            return {}
        out: dict[str, Any] = {}
        if view.consumes_counters:
            views = self.pool_slices(did.driver, did.pool)
            sets = {cs.name: cs.counters for v in views for cs in v.shared_counters}
            left = CounterTally(self._ledger).available(did.pool, sets, views)
            out["consumesCounters"] = {u.counter_set: {k: str(q) for k, q in u.counters.items()} for u in view.consumes_counters}
            out["countersLeft"] = {
                u.counter_set: {k: format_quantity(v) for k, v in left.get(u.counter_set, {}).items()} for u in view.consumes_counters
            }
        if view.allow_multiple_allocations:
            consumed = self._ledger.consumed_capacity(did) or {}
            out["shares"] = dict(sorted(self._ledger.shares(did).items()))
            out["capacityLeft"] = {
                k: format_quantity(q.value - (consumed[k].value if k in consumed else 0)) for k, q in sorted(view.capacity.items())
            }
        return out

    def pool_slices(self, driver: str, pool: str) -> list[SliceView]:
        """Every slice of a pool, whichever nodes it reaches (for pools only partly reachable from a node)."""
        return [self.slice_views[n] for n in self._index.pool(driver, pool) if n in self.slice_views]

    def device_state_counts(self) -> dict[str, int]:
        counts = {"free": 0, "allocated": 0, "tainted": 0}
        for did, view in self.devices.items():
            if did in self._ledger.allocated:
                counts["allocated"] += 1
            elif any(blocks_allocation(t) for t in view.taints):
                counts["tainted"] += 1
            else:
                counts["free"] += 1
        return counts
