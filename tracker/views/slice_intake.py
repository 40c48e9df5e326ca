"""ResourceSlice intake: each event parsed, parsing again only the devices an update changed, and indexed.

One part of the device views (tracker/views/devices.py), the hot path of a
driver's slice updates: the raw devices' digests let the parser reuse a
device it parsed before (see parse_resource_slice), an update of the same
devices in the same place keeps the indexes and the views of the devices it
did not change, and the CEL cache entries of device versions that are gone
are dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from allocator.parse import device_digest, parse_resource_slice
from allocator.types import ResourceSlice
from tracker import events as ev
from tracker.views.builder import CelVersions, ViewBuilder
from tracker.views.digests import RawDevices
from tracker.views.index import SliceIndex
from tracker.views.node_changes import NodeChanges
from tracker.views.recompute import Recompute


class SliceIntake:
    """Applies ResourceSlice events to the slices (a map it writes, shared with the other parts)."""

    def __init__(
        self,
        slices: dict[str, ResourceSlice],
        versions: CelVersions,
        index: SliceIndex,
        builder: ViewBuilder,
        recompute: Recompute,
        nodes: NodeChanges,
        raw_devices: RawDevices | None = None,
    ) -> None:
        self._slices = slices
        self._versions = versions
        self._index = index
        self._builder = builder
        self._recompute = recompute
        self._nodes = nodes
        # slice -> device -> (DeviceDigest of the raw device, parsed); shared with the builder, whose views' digests read it
        self._raw_devices: RawDevices = raw_devices if raw_devices is not None else {}

    def apply(self, event: ev.ObjectEvent) -> None:
        name = event.key
        old = self._slices.get(name)
        if event.type == "DELETED":
            self._delete(name, old)
            return
        previous = None
        if old is not None and old.driver == _spec_field(event.object, "driver"):
            previous = self._raw_devices.get(name)
        new = parse_resource_slice(event.object, previous=previous, encode=_canonical)
        self._remember_devices(name, event.object, new)
        self._slices[name] = new
        self._nodes.slice_published(new)
        if old is not None and _same_shape(old, new):
            # Same devices in the same place (a taint, attribute or generation update): the
            # indexes stand; only the views of devices that changed are computed again.
            self._recompute.rebuild_slice(name, old)
            return
        if old is not None:
            self._unindex(old)
        self._index.add(name, new)
        self._nodes.slice_added(new)
        self._recompute.rebuild_slice(name)

    def _delete(self, name: str, old: ResourceSlice | None) -> None:
        if old is not None:
            self._builder.forget_cel(old, [d.name for d in old.devices], self._versions.devices.get(name, {}))
            self._unindex(old)
        self._slices.pop(name, None)
        self._builder.forget_slice(name)
        self._versions.devices.pop(name, None)
        self._raw_devices.pop(name, None)

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
        old_versions = self._versions.remember(name, parsed)
        versions = self._versions.devices[name]
        old = self._slices.get(name)
        if old is not None:
            gone = [d.name for d in old.devices if versions.get(d.name) is not old_versions.get(d.name)]
            self._builder.forget_cel(old, gone, old_versions)

    def _unindex(self, old: ResourceSlice) -> None:
        for did in self._index.remove_devices(old):
            self._builder.drop_device(did)
        self._nodes.pool_changed(old)
        self._index.remove_slice(old)
        self._nodes.slice_removed(old)


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


def _canonical(value: Any) -> bytes:
    """A digest of the canonical JSON (sorted keys) of a device's raw JSON, to compare with its last version's.

    16 bytes, not the JSON itself: orjson's output keeps a 4 KB buffer per
    object, more than the raw dict it replaces.
    """
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
