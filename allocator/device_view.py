"""What allocation sees of published devices: the *patched* view.

The tracker builds these from ResourceSlices, DeviceTaintRules and
ResourceSlicePatches; the allocator only reads them. A device view carries
its effective attributes/capacity (after patches), its effective taints
(slice taints, then rule taints) and its effective node reach (the slice's,
or the device's own with perDeviceNodeSelection).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from allocator.node_selection import reaches
from allocator.quantity import Quantity
from allocator.types import (
    AttributeValue,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    DeviceID,
    DeviceTaint,
    Node,
    NodeSelector,
)


@dataclass(frozen=True, slots=True)
class DeviceView:
    id: DeviceID
    cel_key: Hashable  # changes whenever anything a selector can see changes
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
    taints: tuple[DeviceTaint, ...] = ()
    taint_sources: tuple[str, ...] = ()  # parallel to taints
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    allow_multiple_allocations: bool = False
    capacity_policies: Mapping[str, CapacityRequestPolicy] = field(default_factory=dict)
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    refused: str = ""  # why the device is never allocated (allocator/parse/slices.py); "" if usable

    @property
    def driver(self) -> str:
        return self.id.driver

    @property
    def name(self) -> str:
        return self.id.device

    def reachable_from(self, node: Node) -> bool:
        return reaches(node, self.node_name, self.all_nodes, self.node_selector)


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class SliceView:
    """A ResourceSlice with patched devices; node fields are the slice's own.

    Compared and hashed by identity: the tracker replaces a view whenever
    anything in it changes, so a view is its own version, and caches keyed by
    it (the allocator's selector memo) drop with it.
    """

    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    devices: tuple[DeviceView, ...]
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    shared_counters: tuple[CounterSet, ...] = ()

    def reachable_from(self, node: Node) -> bool:
        """Whether this slice takes part in pool gathering for `node` (upstream GatherPools).

        With perDeviceNodeSelection the slice counts for completeness; its devices are checked one by one.
        """
        return reaches(node, self.node_name, self.all_nodes, self.node_selector, otherwise=self.per_device_node_selection)
