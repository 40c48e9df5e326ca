"""The one shape in which cluster state flows from a source into the tracker.

Both sources (a manifest directory, the API server's reflectors) emit these,
so the state and everything downstream are source-agnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

GROUP_CORE = ""
GROUP_RESOURCE = "resource.k8s.io"
GROUP_EXTENDER = "resource.dra-extender.io"

# Canonical kinds the tracker understands.
NODE = "Node"
POD = "Pod"
NAMESPACE = "Namespace"
RESOURCE_SLICE = "ResourceSlice"
RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
DEVICE_CLASS = "DeviceClass"
DEVICE_TAINT_RULE = "DeviceTaintRule"
RESOURCE_SLICE_PATCH = "ResourceSlicePatch"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
PERSISTENT_VOLUME = "PersistentVolume"

NAMESPACED_KINDS = frozenset({POD, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, PERSISTENT_VOLUME_CLAIM})
KNOWN_KINDS = frozenset(
    {
        NODE,
        POD,
        NAMESPACE,
        RESOURCE_SLICE,
        RESOURCE_CLAIM,
        RESOURCE_CLAIM_TEMPLATE,
        DEVICE_CLASS,
        DEVICE_TAINT_RULE,
        RESOURCE_SLICE_PATCH,
        PERSISTENT_VOLUME_CLAIM,
        PERSISTENT_VOLUME,
    }
)


@dataclass(frozen=True, slots=True)
class ObjectEvent:
    """One change of one object.

    `group` tells the two DeviceTaintRule kinds apart (`resource.k8s.io` vs
    `resource.dra-extender.io`); `key` is `namespace/name` or `name`.
    `object` is the raw API JSON (for DELETED: the last known state).
    """

    type: EventType
    kind: str
    group: str
    key: str
    object: dict[str, Any]


class EventSink(Protocol):
    """Where a source delivers state (implemented by tracker.state.ClusterState)."""

    def apply(self, event: ObjectEvent) -> None: ...

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        """A full, consistent list of one kind: objects missing from it are deleted."""
        ...

    def mark_synced(self, kind: str, group: str) -> None:
        """The initial state of this kind is complete (readiness)."""
        ...

    @property
    def ready(self) -> bool:
        """Every required kind's initial state is complete."""
        ...


def object_key(kind: str, raw: dict[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    name: str = meta.get("name", "")
    if kind in NAMESPACED_KINDS:
        return f"{meta.get('namespace') or 'default'}/{name}"
    return name


def object_uid(raw: dict[str, Any]) -> str:
    """metadata.uid of an event's object; "" when absent."""
    return str((raw.get("metadata") or {}).get("uid") or "")
