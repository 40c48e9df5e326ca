"""Which Kubernetes 1.36 beta DRA features the allocator and the extender honour.

Each field mirrors a kube-scheduler feature gate (all beta and on by default
in 1.36); turning one off behaves as a scheduler with that gate off does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Features:
    """Feature switches threaded from `dra-extender serve` flags to the allocator and extender."""

    partitionable_devices: bool = True  # DRAPartitionableDevices
    consumable_capacity: bool = True  # DRAConsumableCapacity
    binding_conditions: bool = True  # DRADeviceBindingConditions + DRAResourceClaimDeviceStatus
    extended_resources: bool = True  # DRAExtendedResource


DEFAULT_FEATURES = Features()
