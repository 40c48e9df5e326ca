"""Which nodes must decide again when a slice or a device changes, and each node's taken node-local devices.

One part of the device views (tracker/views/devices.py): cached verdicts are
per node (the change log, tracker/store.py), and in a pool with shared
counters a device on one node spends counters a device on another node may
need, so a change there concerns every node of the pool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from allocator.device_view import DeviceView
from allocator.types import DeviceID, ResourceSlice
from tracker.ledger import AllocationLedger
from tracker.store import ChangeLog
from tracker.views.index import SliceIndex


class NodeChanges:
    """Tells the change log which nodes a change concerns; counts each node's allocated or in-flight devices."""

    def __init__(
        self,
        changes: ChangeLog,
        ledger: AllocationLedger,
        index: SliceIndex,
        slices: Mapping[str, ResourceSlice],
        devices: Mapping[DeviceID, DeviceView],
    ) -> None:
        self._changes = changes
        self._ledger = ledger
        self._index = index
        self._slices = slices
        self._devices = devices
        self._taken_local: dict[str, set[DeviceID]] = defaultdict(set)  # node -> its taken node-local devices

    def pool_changed(self, s: ResourceSlice) -> None:
        """A slice changed: the nodes whose verdicts may depend on it must decide again.

        In a pool with shared counters a device on one node spends counters a
        device on another node may need: every node of the pool is affected.
        """
        if not s.shared_counters and not self._index.has_counters(s.driver, s.pool):
            self._changes.changed(s.node_name)
            return
        for node in self._index.pool_nodes(s.driver, s.pool, also=s.node_name):
            self._changes.changed(node)

    def device_changed(self, did: DeviceID) -> None:
        """A device was allocated, freed, reserved or released: its node (or its pool's nodes) must decide again."""
        name = self._index.slice_name(did)
        s = self._slices.get(name) if name is not None else None
        node = s.node_name if s is not None else None
        view = self._devices.get(did)
        # A held device may consume counters it no longer says it does (kept as allocated): any pool with counters.
        if s is not None and ((view is not None and view.consumes_counters) or self._index.has_counters(s.driver, s.pool)):
            for other in self._index.pool_nodes(s.driver, s.pool, also=node):
                self._changes.changed(other)
        else:
            self._changes.changed(node)
        if node is not None:
            self.track_taken(node, did)

    def track_taken(self, node: str, did: DeviceID) -> None:
        if self._ledger.is_taken(did):
            self._taken_local[node].add(did)
        else:
            taken = self._taken_local.get(node)
            if taken is not None:
                taken.discard(did)
                if not taken:
                    del self._taken_local[node]

    def slice_published(self, s: ResourceSlice) -> None:
        """Every version of a slice: the ledger learns what its held devices consume of their pool's counters
        (the first time it sees them, and whenever a version says they consume more)."""
        learn = self._ledger.learn
        for device in s.devices:
            learn(DeviceID(s.driver, s.pool, device.name), device.consumes_counters)

    def slice_added(self, s: ResourceSlice) -> None:
        """A node-local slice's devices may be taken already (a claim listed before its slice)."""
        if s.node_name is not None:
            for device in s.devices:
                self.track_taken(s.node_name, DeviceID(s.driver, s.pool, device.name))

    def slice_removed(self, old: ResourceSlice) -> None:
        if old.node_name is not None:
            taken = self._taken_local.get(old.node_name)
            if taken is not None:
                taken.difference_update(DeviceID(old.driver, old.pool, d.name) for d in old.devices)
                if not taken:
                    del self._taken_local[old.node_name]

    def taken_on_node(self, node_name: str) -> int:
        """How many of the node's own (node-local) devices are allocated or in flight."""
        taken = self._taken_local.get(node_name)
        return len(taken) if taken else 0
