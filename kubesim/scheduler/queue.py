"""kube-scheduler's scheduling queue: activeQ, backoffQ and the unschedulable pods, with their moves (backend/queue/*.go)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeVar

from kubesim.scheduler.config import EXTENDER, SchedulerConfig, key_of, now


@dataclass(eq=False)
class QueuedPod:
    key: str
    uid: str
    pod: dict[str, Any]
    priority: int
    timestamp: float  # when (re)added: activeQ order and backoff start
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    plugins: frozenset[str] = frozenset()  # UnschedulablePlugins of the last attempt
    backoff_expiration: float | None = None
    popped_seq: int = 0  # the queue's event counter when popped (events during the cycle)
    updated_in_flight: bool = False
    gen: int = 0  # bumped on every move: heap entries of older generations are stale


# The heaps' entries: the ordering fields, then the pod's generation at the push (older ones are stale) and the pod.
_Active = tuple[int, float, int, int, QueuedPod]  # -priority, timestamp, tie
_Backoff = tuple[float, int, float, int, int, QueuedPod]  # backoff expiry, -priority, timestamp, tie
_ErrorBackoff = tuple[float, int, int, QueuedPod]  # backoff expiry, tie
_Entry = _Active | _Backoff | _ErrorBackoff
_B = TypeVar("_B", _Backoff, _ErrorBackoff)  # one of the two backoff heaps


class SchedulingQueue:
    """activeQ, backoffQ (rejected pods), error backoffQ, unschedulable pods, in-flight pods (scheduling_queue.go)."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.active: list[_Active] = []
        self.backoff: list[_Backoff] = []
        self.error_backoff: list[_ErrorBackoff] = []
        self.unschedulable: dict[str, QueuedPod] = {}
        self.where: dict[str, str] = {}  # key -> active | backoff | error_backoff | unschedulable | in_flight
        self.pods: dict[str, QueuedPod] = {}
        self.event_seq = 0
        self.wake = asyncio.Event()
        self._tie = itertools.count()
        self.moves: Counter[str] = Counter()

    # -- backoff (backoff_queue.go)
    def _align(self, t: float) -> float:
        return math.floor(t) if self.cfg.pop_from_backoff else t

    def backoff_time(self, p: QueuedPod) -> float:
        count = p.consecutive_errors if p.consecutive_errors > 0 else p.unschedulable_count
        if count == 0:
            return -math.inf
        if p.backoff_expiration is None:
            d = self.cfg.initial_backoff * 2 ** (count - 1)
            p.backoff_expiration = self._align(p.timestamp + min(d, self.cfg.max_backoff))
        return p.backoff_expiration

    def backing_off(self, p: QueuedPod) -> bool:
        return not self.backoff_time(p) < self._align(now())

    # -- moves
    def _to_active(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.unschedulable.pop(p.key, None)
        self.where[p.key] = "active"
        heapq.heappush(self.active, (-p.priority, p.timestamp, next(self._tie), p.gen, p))
        self.moves[f"active:{event}"] += 1
        self.wake.set()

    def _to_backoff(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.unschedulable.pop(p.key, None)
        if p.plugins:
            self.where[p.key] = "backoff"
            heapq.heappush(self.backoff, (self.backoff_time(p), -p.priority, p.timestamp, next(self._tie), p.gen, p))
            self.wake.set()  # PopFromBackoffQ: a waiting Pop takes it
        else:
            self.where[p.key] = "error_backoff"
            heapq.heappush(self.error_backoff, (self.backoff_time(p), next(self._tie), p.gen, p))
        self.moves[f"backoff:{event}"] += 1

    def _to_unschedulable(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.where[p.key] = "unschedulable"
        self.unschedulable[p.key] = p
        self.moves[f"unschedulable:{event}"] += 1

    def _requeue_after_backoff(self, p: QueuedPod, event: str) -> None:
        if self.backing_off(p):
            self._to_backoff(p, event)
        else:
            self._to_active(p, event)

    @staticmethod
    def _valid(entry: _Entry, where: dict[str, str], name: str) -> bool:
        p: QueuedPod = entry[-1]
        return entry[-2] == p.gen and where.get(p.key) == name

    # -- the API of PriorityQueue
    def add(self, pod: dict[str, Any]) -> None:
        k = key_of(pod)
        if k in self.pods:
            return
        p = QueuedPod(k, pod["metadata"].get("uid", ""), pod, int((pod.get("spec") or {}).get("priority") or 0), now())
        self.pods[k] = p
        self._to_active(p, "UnscheduledPodAdd")

    async def pop(self) -> QueuedPod:
        while True:
            while self.active:
                entry: _Entry = heapq.heappop(self.active)
                if self._valid(entry, self.where, "active"):
                    return self._in_flight(entry[-1])
            if self.cfg.pop_from_backoff:
                while self.backoff:
                    entry = heapq.heappop(self.backoff)
                    if self._valid(entry, self.where, "backoff"):
                        self.moves["active:PopFromBackoffQ"] += 1
                        return self._in_flight(entry[-1])
            self.wake.clear()
            await self.wake.wait()

    def _in_flight(self, p: QueuedPod) -> QueuedPod:
        p.gen += 1
        p.attempts += 1
        p.backoff_expiration = None
        p.popped_seq = self.event_seq
        p.updated_in_flight = False
        self.where[p.key] = "in_flight"
        return p

    def done(self, p: QueuedPod) -> None:
        """The pod left the scheduling cycle for binding (bindingCycle calls Done after WaitOnPermit)."""
        if self.where.get(p.key) == "in_flight":
            self.where[p.key] = "binding"

    def forget(self, key: str) -> None:
        """A bound or deleted pod leaves every queue."""
        p = self.pods.pop(key, None)
        if p is not None:
            p.gen += 1
        self.where.pop(key, None)
        self.unschedulable.pop(key, None)

    def add_unschedulable_if_not_present(self, p: QueuedPod, rejected: bool) -> str:
        """AddUnschedulableIfNotPresent with queueing hints: where the pod goes after a failed attempt."""
        if p.key not in self.pods:
            return "gone"
        if rejected:
            p.unschedulable_count += 1
            p.consecutive_errors = 0
            p.plugins = frozenset({EXTENDER})
        else:
            p.consecutive_errors += 1
            p.plugins = frozenset()
        p.timestamp = now()
        p.backoff_expiration = None
        if not p.plugins or self.event_seq > p.popped_seq or p.updated_in_flight:
            self._requeue_after_backoff(p, "ScheduleAttemptFailure")
        else:
            self._to_unschedulable(p, "ScheduleAttemptFailure")
        return self.where[p.key]

    def move_all(self, event: str) -> None:
        """MoveAllToActiveOrBackoffQueue for an event the "Extender" registers (default hint: Queue)."""
        self.event_seq += 1  # recorded for in-flight pods
        for p in list(self.unschedulable.values()):
            self._requeue_after_backoff(p, event)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """An unscheduled pod changed (its own update is a Pod event: it requeues the pod itself)."""
        k = key_of(new)
        p = self.pods.get(k)
        if p is None:
            self.add(new)
            return
        p.pod = new
        where = self.where.get(k)
        if where == "in_flight":
            p.updated_in_flight = True
        elif where == "unschedulable":
            self._requeue_after_backoff(p, "UnscheduledPodUpdate")

    def flush_backoff_completed(self) -> None:
        self._flush_completed(self.backoff, "backoff")
        self._flush_completed(self.error_backoff, "error_backoff")

    def _flush_completed(self, heap: list[_B], name: str) -> None:
        while heap:
            entry = heap[0]
            if not self._valid(entry, self.where, name):
                heapq.heappop(heap)
                continue
            if self.backing_off(entry[-1]):
                break
            heapq.heappop(heap)
            self._to_active(entry[-1], "BackoffComplete")

    def flush_unschedulable_leftover(self) -> None:
        t = now()
        for p in list(self.unschedulable.values()):
            if t - p.timestamp > self.cfg.max_in_unschedulable:
                self._requeue_after_backoff(p, "UnschedulableTimeout")

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.where.values()))
