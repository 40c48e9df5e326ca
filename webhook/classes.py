"""The DeviceClasses' extended resource names, kept current by the tracker's reflector (list once, then watch).

The webhook used to re-list DeviceClasses inside `/mutate` at most every
30 s: a pod created within 30 s of its class went to the default scheduler
unchanged, and two schedulers allocated the same device. A watch delivers a
new class within milliseconds, and no request ever waits for a list.

Only `spec.extendedResourceName` is read, straight from the JSON: a class the
allocator would refuse (a selector it cannot compile, a config it does not
know) still names a resource its pods must not take to another scheduler.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tracker import events as ev

log = logging.getLogger("dra_extender.webhook")


class DeviceClassNames:
    """The EventSink the DeviceClass reflector feeds: each class's extendedResourceName, by class name."""

    def __init__(self) -> None:
        self._by_class: dict[str, str] = {}
        self._synced = False
        self._waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------ the EventSink

    def apply(self, event: ev.ObjectEvent) -> None:
        if event.kind != ev.DEVICE_CLASS:
            return
        if event.type == "DELETED":
            self._by_class.pop(event.key, None)
            return
        name = _extended_name(event.object)
        if name:
            if self._by_class.get(event.key) != name:
                log.info("DeviceClass serves an extended resource", extra={"class": event.key, "resource": name})
            self._by_class[event.key] = name
        else:
            self._by_class.pop(event.key, None)

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        if kind != ev.DEVICE_CLASS:
            return
        self._by_class = {key: name for raw in objects if (name := _extended_name(raw)) and (key := ev.object_key(kind, raw))}

    def mark_synced(self, kind: str, group: str) -> None:
        if kind != ev.DEVICE_CLASS or self._synced:
            return
        self._synced = True
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    @property
    def ready(self) -> bool:
        """The first list is in: every class that existed then is known (the watch follows from there)."""
        return self._synced

    # ------------------------------------------------------------------ readers

    def served(self) -> frozenset[str]:
        """Every extendedResourceName some class names (a clash's loser included: routing it is safe either way)."""
        return frozenset(self._by_class.values())

    async def wait_ready(self, timeout: float) -> bool:
        """Whether the first list is in within `timeout` seconds."""
        if self._synced:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(waiter)
        except TimeoutError:
            return self._synced
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return True


def _extended_name(raw: Any) -> str:
    spec = raw.get("spec") if isinstance(raw, dict) else None
    name = spec.get("extendedResourceName") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else ""
