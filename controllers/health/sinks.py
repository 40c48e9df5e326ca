"""The health controller's own reflector sinks: the raw objects (policies; nodes slimmed to their conditions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracker import events as ev


class ObjectSink:
    """A reflector's sink of our own (policies, nodes): the raw objects, and whether the first list is in."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = False
        self._changed = changed

    def apply(self, event: ev.ObjectEvent) -> None:
        if event.type == "DELETED":
            self.objects.pop(event.key, None)
        else:
            self.objects[event.key] = event.object
        self._changed()

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self._changed()

    def mark_synced(self, kind: str, group: str) -> None:
        self.synced = True
        self._changed()

    @property
    def ready(self) -> bool:
        return self.synced


class NodeSink(ObjectSink):
    """Nodes kept as their name and conditions only (a Node's status also holds images, addresses, capacity)."""

    @staticmethod
    def _slim(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": obj["metadata"]["name"]}, "status": {"conditions": (obj.get("status") or {}).get("conditions") or []}}

    def apply(self, event: ev.ObjectEvent) -> None:
        super().apply(ev.ObjectEvent(event.type, event.kind, event.group, event.key, self._slim(event.object)))

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        super().replace(kind, group, [self._slim(o) for o in objects])
