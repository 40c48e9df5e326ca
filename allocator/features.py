"""Which Kubernetes DRA features allocation follows (upstream's feature gates).

A gate's default depends on the cluster's minor: upstream's
pkg/features/kube_features.go has all four alpha and off in 1.34 and 1.35
and beta and on from 1.36 (1.37 keeps them on), and 1.36's scheduler then
runs the *incubating* structured allocator. The extender follows the
defaults of the minor its API server reports (`defaults_for`); a cluster that
switches a gate says so with the extender's flags, and allocation then
behaves as upstream's does with that gate so.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# The first minor (1.x) whose defaults turn the four gates on: beta in 1.36.
FIRST_MINOR_ON = 36


@dataclass(frozen=True, slots=True)
class Features:
    partitionable_devices: bool = True  # DRAPartitionableDevices: shared counters, per-device node selection
    consumable_capacity: bool = True  # DRAConsumableCapacity: shared devices, capacity requests
    binding_conditions: bool = True  # DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus)
    extended_resources: bool = True  # DRAExtendedResource: extended resources backed by a DeviceClass

    def gate_map(self) -> dict[str, bool]:
        """Each upstream feature gate's name and whether it is on."""
        return {GATES[f.name]: getattr(self, f.name) for f in fields(self)}

    def gates(self) -> str:
        """`DRAPartitionableDevices=true,...` as kube-scheduler's --feature-gates spells them (for logs)."""
        return ",".join(f"{gate}={str(on).lower()}" for gate, on in self.gate_map().items())


# Each switch's upstream feature gate.
GATES = {
    "partitionable_devices": "DRAPartitionableDevices",
    "consumable_capacity": "DRAConsumableCapacity",
    "binding_conditions": "DRADeviceBindingConditions",
    "extended_resources": "DRAExtendedResource",
}

DEFAULT_FEATURES = Features()  # Kubernetes 1.36's defaults


def defaults_for(minor: int) -> Features:
    """The gates' defaults of Kubernetes 1.<minor>: off before 1.36 (alpha or absent), on from it."""
    on = minor >= FIRST_MINOR_ON
    return Features(partitionable_devices=on, consumable_capacity=on, binding_conditions=on, extended_resources=on)
