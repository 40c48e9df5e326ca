"""Which Kubernetes DRA features allocation follows (upstream's feature gates).

Kubernetes 1.36 turns all four on by default (beta), and its scheduler then
runs the *incubating* structured allocator. A cluster may switch a gate off;
the extender's flags say so, and allocation then behaves as upstream's does
with that gate off.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Features:
    partitionable_devices: bool = True  # DRAPartitionableDevices: shared counters, per-device node selection
    consumable_capacity: bool = True  # DRAConsumableCapacity: shared devices, capacity requests
    binding_conditions: bool = True  # DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus)
    extended_resources: bool = True  # DRAExtendedResource: extended resources backed by a DeviceClass


DEFAULT_FEATURES = Features()  # Kubernetes 1.36's defaults
