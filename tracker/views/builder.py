"""The view builder: each device's patched view (tracker/views/patched.py) from its slice and the rules, patches and classes.

One part of the device views (tracker/views/devices.py): it holds the views
(per slice and per device) and the content versions that name a device in
CEL cache keys; the intake parts (tracker/views/slice_intake.py,
tracker/views/selector_intake.py) store the objects, and the scheduler
(tracker/views/recompute.py) decides when views are computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from allocator.device_selector import reads_attributes
from allocator.device_view import DeviceView, SliceView
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
from tracker.store import Problem
from tracker.views.digests import RawDevices, slice_digest
from tracker.views.index import SelectorIndex, SliceIndex
from tracker.views.patched import SelectorContext, applicable_patches, effective_view, original_view, patch_sources

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

# A device computed without the rules and patches that need a selector evaluated carries this
# taint, so that nothing is allocated on what is not known yet (see ViewBuilder.compute).
PENDING_TAINT = DeviceTaint("resource.dra-extender.io/selectors-pending", EFFECT_NO_SCHEDULE)
PENDING_SOURCE = "pending"

Version = tuple[object, object, int]  # (attributes, capacity, version number)


@dataclass(frozen=True, slots=True)
class DeviceObjects:
    """The objects the views are made of, as stored by the intake parts (the maps are shared, never replaced)."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    slices: dict[str, ResourceSlice] = field(default_factory=dict)
    rules: dict[tuple[str, str], DeviceTaintRule] = field(default_factory=dict)  # (group, name)
    patches: dict[str, ResourceSlicePatch] = field(default_factory=dict)


class CelVersions:
    """The version numbers that name a device's content and a patch in CEL cache keys.

    A device keeps its version, and so its cached selector results, while its
    attributes and capacity stay the same objects (see parse_resource_slice).
    """

    def __init__(self) -> None:
        self.devices: dict[str, dict[str, Version]] = {}  # slice -> device -> version
        self.patches: dict[str, int] = {}
        self._counter = 0

    def next(self) -> int:
        self._counter += 1
        return self._counter

    def remember(self, name: str, parsed: ResourceSlice) -> dict[str, Version]:
        """Version the slice's devices, keeping unchanged ones'; returns the versions before."""
        old_versions = self.devices.get(name, {})
        versions: dict[str, Version] = {}
        for d in parsed.devices:
            prev = old_versions.get(d.name)
            if prev is not None and prev[0] is d.attributes and prev[1] is d.capacity:
                versions[d.name] = prev
            else:
                versions[d.name] = (d.attributes, d.capacity, self.next())
        self.devices[name] = versions
        return old_versions

    def patch_changed(self, name: str) -> None:
        self.patches[name] = self.next()


class ViewBuilder:
    """Computes device views and holds them: by slice, by device, and which carry a NoExecute taint."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        objects: DeviceObjects,
        versions: CelVersions,
        index: SliceIndex,
        selectors: SelectorIndex,
        *,
        report: Callable[[Problem], None],
        slice_changed: Callable[[ResourceSlice], None],
        raw_devices: RawDevices | None = None,
    ) -> None:
        """`slice_changed`: a slice's view was set (the nodes whose verdicts depend on it must decide again);
        `raw_devices`: the slice intake's digests of the raw devices, which the views' content digests are made of."""
        self._cel = cel
        self._objects = objects
        self._versions = versions
        self._index = index
        self._selectors = selectors
        self._report = report
        self._slice_changed = slice_changed
        self.slice_views: dict[str, SliceView] = {}
        self._raw_devices: RawDevices = raw_devices if raw_devices is not None else {}
        # slice name -> (content digest of its view (tracker/views/digests.py), its devices held in shares if
        # allocated); absent: never shared
        self.slice_digests: dict[str, tuple[bytes, tuple[DeviceID, ...]]] = {}
        self.devices: dict[DeviceID, DeviceView] = {}
        self.no_execute: set[DeviceID] = set()  # devices whose view carries a NoExecute taint
        # Devices whose view carries a taint that blocks allocation (NoSchedule, NoExecute): kept here so that
        # /metrics counts the tainted devices without a pass over every view (~0.36 s at 280,000 devices).
        self.blocked: set[DeviceID] = set()

    def context(self) -> SelectorContext:
        def report(kind: str, group: str, name: str, message: str) -> None:
            self._report(Problem(kind, group, name, message))

        return SelectorContext(self._cel, self._objects.classes, report)

    def set_device(self, view: DeviceView) -> None:
        self.devices[view.id] = view
        if any(t.effect == EFFECT_NO_EXECUTE for t in view.taints):
            self.no_execute.add(view.id)
        else:
            self.no_execute.discard(view.id)
        if any(blocks_allocation(t) for t in view.taints):
            self.blocked.add(view.id)
        else:
            self.blocked.discard(view.id)

    def drop_device(self, did: DeviceID) -> None:
        self.devices.pop(did, None)
        self.no_execute.discard(did)
        self.blocked.discard(did)

    def _candidates(self, did: DeviceID) -> tuple[list[ResourceSlicePatch], list[DeviceTaintRule]]:
        rules, patches = self._objects.rules, self._objects.patches
        if not rules and not patches:
            return [], []  # the common case: nothing to look up per device
        return [patches[n] for n in self._selectors.patches_for(did)], [rules[i] for i in self._selectors.rules_for(did)]

    def patched_by(self, slice_: ResourceSlice, index: int) -> dict[tuple[str, str], str]:
        """Which patch set each patched attribute and capacity of the slice's device (for the operator's views; not cached)."""
        device = slice_.devices[index]
        patches, _ = self._candidates(DeviceID(slice_.driver, slice_.pool, device.name))
        if not patches:
            return {}
        version = self._versions.devices[slice_.meta.name][device.name][2]
        ctx = self.context()
        return patch_sources(applicable_patches(ctx, patches, original_view(slice_, device, version)))

    def needs_selectors(self, did: DeviceID) -> bool:
        """Whether a rule or patch that may touch the device needs a selector evaluated to know."""
        patches, rules = self._candidates(did)
        return any(reads_attributes(p.filter) for p in patches) or any(
            r.selector is not None and reads_attributes(r.selector) for r in rules
        )

    def compute(self, slice_: ResourceSlice, index: int, ctx: SelectorContext, *, provisional: bool = False) -> DeviceView:
        """The device's view; `provisional`: without the rules and patches that need a selector
        evaluated (the costly part), tainted PENDING_TAINT until computed in full."""
        device = slice_.devices[index]
        did = DeviceID(slice_.driver, slice_.pool, device.name)
        patches, rules = self._candidates(did)
        version = self._versions.devices[slice_.meta.name][device.name][2]
        if provisional:
            patches = [p for p in patches if not reads_attributes(p.filter)]
            rules = [r for r in rules if r.selector is None or not reads_attributes(r.selector)]
            view = effective_view(ctx, slice_, device, patches, rules, None, version, self._versions.patches)
            return replace(view, taints=(*view.taints, PENDING_TAINT), taint_sources=(*view.taint_sources, PENDING_SOURCE))
        return effective_view(ctx, slice_, device, patches, rules, self.devices.get(did), version, self._versions.patches)

    def rebuild(self, name: str, old: ResourceSlice | None, until: float | None) -> tuple[list[DeviceView], set[DeviceID]]:
        """The slice's device views; returns those computed afresh and the devices left provisional.

        With `old` (the slice's last version, same shape), a device parsed to
        the very same object as before keeps its view: nothing it depends on
        changed (rules, patches and classes recompute views themselves when
        they change). After `until` (monotonic; None: never), a device whose
        rules or patches need a selector evaluated gets a provisional view.
        """
        s = self._objects.slices[name]
        ctx = self.context()
        before = self.slice_views.get(name) if old is not None and _same_reach(old, s) else None
        kept = before.devices if before is not None and old is not None and len(before.devices) == len(s.devices) else None
        views = []
        fresh = []
        later: set[DeviceID] = set()
        for i, device in enumerate(s.devices):
            if kept is not None and old is not None and device is old.devices[i] and kept[i].id.device == device.name:
                view = kept[i]
            elif until is not None and time.monotonic() > until and self.needs_selectors(DeviceID(s.driver, s.pool, device.name)):
                view = self.compute(s, i, ctx, provisional=True)
                later.add(view.id)
            else:
                view = self.compute(s, i, ctx)
                fresh.append(view)
            if self._index.slice_name(view.id) == name:
                self.set_device(view)
            views.append(view)
        self.set_slice_view(s, tuple(views))
        return fresh, later

    def recompute(self, name: str, wanted: set[str], ctx: SelectorContext, budget: Budget) -> tuple[set[DeviceID], bool]:
        """Recompute the slice's `wanted` devices within `budget`; returns those left and whether a view changed."""
        s = self._objects.slices[name]
        new_devices = list(self.slice_views[name].devices)
        left: set[DeviceID] = set()
        changed = False
        for i, d in enumerate(s.devices):
            if d.name not in wanted:
                continue
            if budget.over():
                left.add(DeviceID(s.driver, s.pool, d.name))  # the next slice of work
                continue
            budget.spend()
            nv = self.compute(s, i, ctx)
            if nv is not new_devices[i]:
                before = new_devices[i].cel_key
                if before != nv.cel_key and isinstance(before, tuple) and before[:1] == ("patched",):
                    self._cel.forget(before)  # a patched version replaced; the original's key stays in use
                new_devices[i] = nv
                self.set_device(nv)
                changed = True
        if changed:
            self.set_slice_view(s, tuple(new_devices))
        return left, changed

    def set_slice_view(self, s: ResourceSlice, views: tuple[DeviceView, ...]) -> None:
        self._slice_changed(s)
        view = self.slice_views[s.meta.name] = SliceView(
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
        digest = slice_digest(view, self._raw_devices.get(s.meta.name))
        if digest is None:
            self.slice_digests.pop(s.meta.name, None)
        else:
            self.slice_digests[s.meta.name] = (digest, tuple(d.id for d in views if d.allow_multiple_allocations))

    def forget_slice(self, name: str) -> None:
        """A slice deleted: its view and digest go."""
        self.slice_views.pop(name, None)
        self.slice_digests.pop(name, None)

    def forget_cel(self, old: ResourceSlice, devices: Iterable[str], versions: Mapping[str, Version]) -> None:
        """Drop the CEL cache entries (activations, results) of device versions that are gone."""
        forget = self._cel.forget
        view = self.slice_views.get(old.meta.name)
        current = {d.id.device: d.cel_key for d in view.devices} if view is not None else {}
        for device in devices:
            if device in current:
                forget(current[device])
            version = versions.get(device)
            if version is not None:
                forget(("orig", old.meta.name, version[2], device))  # tracker.views.patched.original_view's key


class Budget:
    """A slice of recompute work: over once `until` (monotonic; None: never) is past, after at least one device."""

    __slots__ = ("_progressed", "_until")

    def __init__(self, until: float | None) -> None:
        self._until = until
        self._progressed = False

    def over(self) -> bool:
        return self._until is not None and self._progressed and time.monotonic() > self._until

    def spend(self) -> None:
        self._progressed = True


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
