"""Kubernetes Events (core/v1 Event objects) about the objects the extender acts on or finds faulty.

Not the object-change events of tracker/events.py: these are written to the
API server for `kubectl describe` to show. A source records them through
`EventWriter.create_event` (the API server posts them through its writes,
tracker/apiserver/writes.py; the manifest source logs them); `EventRecorder`
fires them without waiting, so a slow API server never holds the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from tracker.source import EventWriter
from tracker.timestamps import rfc3339

COMPONENT = "dra-extender"


class ProblemLike(Protocol):
    """A faulty object, as tracker.store.Problem describes it."""

    @property
    def kind(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def name(self) -> str: ...  # namespace/name or name
    @property
    def message(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def reason(self) -> str: ...  # the Event's reason; "" for Invalid (or InvalidSelector)


def problem_event(problem: ProblemLike, api_version: str) -> dict[str, Any]:
    """The Warning Event about one faulty object (docs/design.md#faulty-objects-and-warning-events)."""
    return {
        "type": "Warning",
        "reason": problem.reason or ("InvalidSelector" if "selector" in problem.message else "Invalid"),
        "message": problem.message,
        "involvedObject": {
            "kind": problem.kind,
            "name": problem.name.rpartition("/")[2],
            **({"namespace": problem.name.partition("/")[0]} if "/" in problem.name else {}),
            **({"uid": problem.uid} if problem.uid else {}),
            "apiVersion": api_version,
        },
    }


def event_object(event: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """The core/v1 Event to create for `event` ({type, reason, message, involvedObject}), in the object's namespace."""
    involved = event.get("involvedObject") or {}
    namespace = involved.get("namespace") or "default"
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved.get('name', COMPONENT)}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": event.get("reason", ""),
        "message": event.get("message", ""),
        "type": event.get("type", "Normal"),
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    """Fire-and-forget Events through a source; keeps each pending write referenced until it is done."""

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer
        self.pending: set[asyncio.Future[None]] = set()

    def record(self, event: dict[str, Any]) -> None:
        self._fire(self.writer.create_event(event))

    def problem(self, problem: ProblemLike) -> None:
        """The Warning Event about a faulty object, at the apiVersion the source serves its kind at."""
        self.record(problem_event(problem, self.writer.api_version(problem.kind, problem.group)))

    def _fire(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(write)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
