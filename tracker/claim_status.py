"""What the binder and the binding conditions read of a claim beyond the allocator's ResourceClaim, parsed once.

The allocator's ResourceClaim (allocator/parse/claims.py) carries the spec, the
allocation and the parsed reservations; writing a claim back needs a little
more, as the API server sent it: the `status.reservedFor` entries (sent
back unchanged in the binder's merge patches), whether `status.allocation`
is set, and the drivers' per-device conditions (binding conditions). The
store parses this at intake; the binder parses its own writes' responses
the same way, so nothing past the edge reads claim JSON.

Lenient on purpose: the store parses the claim with the validating parser
first, and a response to our own write is the API server's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.types import DeviceID


@dataclass(frozen=True, slots=True)
class DeviceCondition:
    """One condition a driver reported for an allocated device (status.devices[].conditions[])."""

    type: str | None
    true: bool  # status == "True"
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """A claim's identity, version and status as the API server last reported them."""

    namespace: str
    name: str
    resource_version: str  # opaque; "" when absent
    finalizers: tuple[str, ...] = ()
    reserved_for: tuple[Mapping[str, Any], ...] = ()  # the entries as received: our patches send them back unchanged
    allocated: bool = False  # status.allocation is set
    allocated_devices: frozenset[DeviceID] = frozenset()  # what status.allocation names
    device_conditions: Mapping[tuple[str, str, str], tuple[DeviceCondition, ...]] = field(default_factory=dict)

    @property
    def reserved_uids(self) -> tuple[Any, ...]:
        """The uid of every consumer the claim is reserved for."""
        return tuple(r.get("uid") for r in self.reserved_for)


def parse_claim_status(raw: Mapping[str, Any]) -> ClaimStatus:
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    allocation = status.get("allocation")
    return ClaimStatus(
        namespace=meta.get("namespace") or "",
        name=meta.get("name") or "",
        resource_version=str(meta.get("resourceVersion") or ""),
        finalizers=tuple(meta.get("finalizers") or ()),
        reserved_for=tuple(status.get("reservedFor") or ()),
        allocated=bool(allocation),
        allocated_devices=_allocation_devices(allocation) if isinstance(allocation, dict) else frozenset(),
        device_conditions=_device_conditions(status.get("devices")),
    )


def _allocation_devices(allocation: Mapping[str, Any]) -> frozenset[DeviceID]:
    results = ((allocation.get("devices") or {}).get("results")) or []
    return frozenset(DeviceID(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results if isinstance(r, dict))


def _device_conditions(devices: Any) -> dict[tuple[str, str, str], tuple[DeviceCondition, ...]]:
    """By (driver, pool, device); a later entry for the same device replaces an earlier one, as before."""
    out: dict[tuple[str, str, str], tuple[DeviceCondition, ...]] = {}
    for d in devices if isinstance(devices, list) else ():
        if not isinstance(d, dict):
            continue
        conditions = []
        listed = d.get("conditions")
        for c in listed if isinstance(listed, list) else ():
            if not isinstance(c, dict):
                continue
            kind = c.get("type")
            conditions.append(
                DeviceCondition(
                    type=kind if isinstance(kind, str) else None,
                    true=c.get("status") == "True",
                    reason=str(c.get("reason", "")),
                    message=str(c.get("message", "")),
                )
            )
        out[(str(d.get("driver")), str(d.get("pool")), str(d.get("device")))] = tuple(conditions)
    return out
