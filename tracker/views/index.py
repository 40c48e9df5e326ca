"""The device views' indexes: where slices and devices are, and which rules and patches may touch a device.

Kept apart from the views themselves (tracker/views/devices.py) so that each
answers one question: `SliceIndex` which slices a node reaches, which slice
holds a device and which devices a selector names; `SelectorIndex` which
rules and patches may touch a device, and which select by a class.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from allocator.types import DeviceID, DeviceTaintRule, ResourceSlice, ResourceSlicePatch

_ANY = None  # wildcard in selector index keys

Key = tuple[str | None, str | None, str | None]  # (driver, pool, device), None: any
_K = TypeVar("_K")
_M = TypeVar("_M")


def _discard(index: dict[_K, set[_M]], key: _K, member: _M) -> None:
    """Remove `member` from its bucket, and the bucket when it empties (rules and patches churn)."""
    bucket = index.get(key)
    if bucket is not None:
        bucket.discard(member)
        if not bucket:
            del index[key]


def _index_keys(driver: str, pool: str, device: str) -> list[Key]:
    """Every (driver, pool, device) wildcard bucket a device falls into."""
    return [(d, p, n) for d in (driver, _ANY) for p in (pool, _ANY) for n in (device, _ANY)]


class SliceIndex:
    """Slices by node and pool, and each device's slice, over the views' `slices` (read, never written here)."""

    def __init__(self, slices: Mapping[str, ResourceSlice]) -> None:
        self._slices = slices
        self._device_slice: dict[DeviceID, str] = {}
        self._node_slices: dict[str, set[str]] = defaultdict(set)  # node-local slices
        self._shared_slices: set[str] = set()  # reachable from more than one node
        self._pools: dict[tuple[str, str], set[str]] = defaultdict(set)  # (driver, pool) -> slice names

    def add(self, name: str, new: ResourceSlice) -> None:
        for device in new.devices:
            self._device_slice[DeviceID(new.driver, new.pool, device.name)] = name
        self._pools[(new.driver, new.pool)].add(name)
        if new.node_name is not None:
            self._node_slices[new.node_name].add(name)
        else:
            self._shared_slices.add(name)

    def remove_devices(self, old: ResourceSlice) -> Iterator[DeviceID]:
        """Forget the devices the old slice still held; yields each one forgotten."""
        for device in old.devices:
            did = DeviceID(old.driver, old.pool, device.name)
            if self._device_slice.get(did) == old.meta.name:
                del self._device_slice[did]
                yield did

    def remove_slice(self, old: ResourceSlice) -> None:
        """Forget the old slice in the pool and node indexes (after `remove_devices`)."""
        members = self._pools.get((old.driver, old.pool))
        if members is not None:
            members.discard(old.meta.name)
            if not members:
                del self._pools[(old.driver, old.pool)]
        if old.node_name is not None:
            node_slices = self._node_slices.get(old.node_name)
            if node_slices is not None:
                node_slices.discard(old.meta.name)
                if not node_slices:
                    del self._node_slices[old.node_name]
        else:
            self._shared_slices.discard(old.meta.name)

    def slice_name(self, did: DeviceID) -> str | None:
        return self._device_slice.get(did)

    def for_node(self, node_name: str) -> list[str]:
        """Slices that may reach `node_name`: its own node-local ones and every shared one."""
        names = list(self._node_slices.get(node_name, ()))
        names.extend(self._shared_slices)
        return names

    def pool(self, driver: str, pool: str) -> Iterable[str]:
        return self._pools.get((driver, pool), ())

    def has_counters(self, driver: str, pool: str) -> bool:
        for name in self.pool(driver, pool):
            other = self._slices.get(name)
            if other is not None and other.shared_counters:
                return True
        return False

    def pool_nodes(self, driver: str, pool: str, also: str | None = None) -> Sequence[str | None]:
        """The nodes a pool's slices are local to; [None] (every node) if one of them is not node-local."""
        nodes: set[str] = set()
        for name in self.pool(driver, pool):
            other = self._slices.get(name)
            if other is None:
                continue
            if other.node_name is None:
                return [None]
            nodes.add(other.node_name)
        if also is None and not nodes:
            return [None]
        if also is not None:
            nodes.add(also)
        return sorted(nodes)

    def devices_matching(self, driver: str | None, pool: str | None, device: str | None) -> set[DeviceID]:
        """The known devices a (driver, pool, device) selector names (None: any).

        Derived from the pool index and the device -> slice map, not kept as
        an index of its own: one set per device key cost ~1 KB a device
        (42 MB at 40,000 devices) for lookups made only when a rule, patch or
        class changes. A selector with a pool reads that pool's slices; one
        without scans every device.
        """
        known = self._device_slice
        if pool is None:
            return {did for did in known if (driver is None or did.driver == driver) and (device is None or did.device == device)}
        if driver is not None and device is not None:
            did = DeviceID(driver, pool, device)
            return {did} if did in known else set()
        keys = [(driver, pool)] if driver is not None else [k for k in self._pools if k[1] == pool]
        out: set[DeviceID] = set()
        for d, p in keys:
            for slice_name in self._pools.get((d, p), ()):
                found = self._slices.get(slice_name)
                if found is None:
                    continue
                for dev in found.devices:
                    if device is None or dev.name == device:
                        did = DeviceID(d, p, dev.name)
                        if did in known:
                            out.add(did)
        return out


class SelectorIndex:
    """Rules and patches by the (driver, pool, device) they name, and by the class they select with."""

    def __init__(self) -> None:
        self._rules_by_key: dict[Key, set[tuple[str, str]]] = defaultdict(set)
        self._patches_by_key: dict[Key, set[str]] = defaultdict(set)
        self._class_dependents: dict[str, set[tuple[str, str]]] = defaultdict(set)  # class -> rules/patches

    def add_rule(self, ident: tuple[str, str], rule: DeviceTaintRule) -> None:
        s = rule.selector
        if s is None:
            return
        self._rules_by_key[(s.driver, s.pool, s.device)].add(ident)
        if s.device_class_name:
            self._class_dependents[s.device_class_name].add(("rule", f"{ident[0]}|{ident[1]}"))

    def remove_rule(self, ident: tuple[str, str], rule: DeviceTaintRule) -> None:
        s = rule.selector
        if s is None:
            return
        _discard(self._rules_by_key, (s.driver, s.pool, s.device), ident)
        if s.device_class_name:
            _discard(self._class_dependents, s.device_class_name, ("rule", f"{ident[0]}|{ident[1]}"))

    def add_patch(self, name: str, patch: ResourceSlicePatch) -> None:
        f = patch.filter
        self._patches_by_key[(f.driver, f.pool, f.device)].add(name)
        if f.device_class_name:
            self._class_dependents[f.device_class_name].add(("patch", name))

    def remove_patch(self, name: str, patch: ResourceSlicePatch) -> None:
        f = patch.filter
        _discard(self._patches_by_key, (f.driver, f.pool, f.device), name)
        if f.device_class_name:
            _discard(self._class_dependents, f.device_class_name, ("patch", name))

    def dependents(self, class_name: str) -> Iterable[tuple[str, str]]:
        """("rule", "group|name") and ("patch", name) of what selects by the class."""
        return self._class_dependents.get(class_name, ())

    def rules_for(self, did: DeviceID) -> Iterator[tuple[str, str]]:
        for k in _index_keys(did.driver, did.pool, did.device):
            yield from self._rules_by_key.get(k, ())

    def patches_for(self, did: DeviceID) -> Iterator[str]:
        for k in _index_keys(did.driver, did.pool, did.device):
            yield from self._patches_by_key.get(k, ())
