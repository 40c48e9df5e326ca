"""DeviceClass, DeviceTaintRule and ResourceSlicePatch intake: what changes the views of devices a selector names.

One part of the device views (tracker/views/devices.py): each event is parsed
and stored, the selector index updated (tracker/views/index.py), and the
views of the devices the old and the new object may touch recomputed
(tracker/views/recompute.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from allocator.parse import parse_device_class, parse_device_taint_rule, parse_resource_slice_patch
from allocator.types import DeviceID, DeviceTaintRule
from tracker import events as ev
from tracker.store import ChangeLog, Problem
from tracker.views.builder import CelVersions, DeviceObjects, ViewBuilder
from tracker.views.index import SelectorIndex, SliceIndex
from tracker.views.recompute import Recompute

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine


class SelectorIntake:
    """Applies class, rule and patch events to their maps (shared with the other parts, written only here)."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        objects: DeviceObjects,
        versions: CelVersions,
        index: SliceIndex,
        selectors: SelectorIndex,
        builder: ViewBuilder,
        recompute: Recompute,
        *,
        changes: ChangeLog,
        report: Callable[[Problem], None],
        started: Callable[[], bool],
    ) -> None:
        """`started`: some kind has its initial state (a class is warmed only then)."""
        self._cel = cel
        self._objects = objects
        self._versions = versions
        self._index = index
        self._selectors = selectors
        self._builder = builder
        self._recompute = recompute
        self._changes = changes
        self._report = report
        self._started = started

    def on_class(self, event: ev.ObjectEvent) -> None:
        self._changes.changed(None)
        classes = self._objects.classes
        if event.type == "DELETED":
            classes.pop(event.key, None)
        else:
            device_class = parse_device_class(event.object)
            classes[event.key] = device_class
            for i, expression in enumerate(device_class.selectors):
                try:
                    self._cel.compile(expression)
                except ValueError as e:
                    self._report(Problem(ev.DEVICE_CLASS, event.group, event.key, f"spec.selectors[{i}]: {e}"))
            if self._started():
                self._recompute.warm(self._builder.devices.values(), [device_class])
        self._recompute.devices(self._class_dependents(event.key))

    def _class_dependents(self, class_name: str) -> set[DeviceID]:
        """The devices of the rules and patches that select by the class: they see a different set now."""
        affected: set[DeviceID] = set()
        for kind, name in self._selectors.dependents(class_name):
            if kind == "patch":
                patch = self._objects.patches.get(name)
                if patch is not None:
                    affected |= self._index.devices_matching(patch.filter.driver, patch.filter.pool, patch.filter.device)
            else:
                group, _, rule_name = name.partition("|")
                rule = self._objects.rules.get((group, rule_name))
                if rule is not None and rule.selector is not None:
                    s = rule.selector
                    affected |= self._index.devices_matching(s.driver, s.pool, s.device)
        return affected

    def on_rule(self, event: ev.ObjectEvent) -> None:
        ident = (event.group, event.key)
        rules = self._objects.rules
        affected: set[DeviceID] = set()
        old = rules.get(ident)
        if old is not None:
            affected |= self._unindex_rule(ident, old)
        if event.type == "DELETED":
            rules.pop(ident, None)
        else:
            rule = parse_device_taint_rule(event.object, group=event.group or ev.GROUP_RESOURCE)
            rules[ident] = rule
            if rule.selector is not None:
                s = rule.selector
                self._selectors.add_rule(ident, rule)
                affected |= self._index.devices_matching(s.driver, s.pool, s.device)
        self._recompute.devices(affected)

    def _unindex_rule(self, ident: tuple[str, str], rule: DeviceTaintRule) -> set[DeviceID]:
        if rule.selector is None:
            return set()
        s = rule.selector
        self._selectors.remove_rule(ident, rule)
        return self._index.devices_matching(s.driver, s.pool, s.device)

    def on_patch(self, event: ev.ObjectEvent) -> None:
        name = event.key
        patches = self._objects.patches
        affected: set[DeviceID] = set()
        old = patches.get(name)
        if old is not None:
            f = old.filter
            self._selectors.remove_patch(name, old)
            affected |= self._index.devices_matching(f.driver, f.pool, f.device)
        if event.type == "DELETED":
            patches.pop(name, None)
            self._versions.patches.pop(name, None)
        else:
            patch = parse_resource_slice_patch(event.object)
            patches[name] = patch
            self._versions.patch_changed(name)
            f = patch.filter
            self._selectors.add_patch(name, patch)
            affected |= self._index.devices_matching(f.driver, f.pool, f.device)
        self._recompute.devices(affected)
