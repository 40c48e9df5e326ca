"""Pods that passed /filter and whose /bind has not arrived yet.

kube-scheduler runs one scheduling cycle at a time but binds asynchronously:
after pod A's /filter (and /prioritize) it picks a node, assumes the pod and
starts A's binding in a goroutine, then pops pod B at once. B's /filter
usually arrives before A's /bind, when the extender has not yet chosen A's
devices; answered then, it offers A's devices again and one of the two binds
fails (and costs its pod a 1-10 s backoff).

The gate closes that window: a /filter first waits until every pod that
passed an earlier /filter has had its /bind decided (devices recorded in the
in-flight ledger), each wait bounded by a deadline so a pod that is never
bound (another plugin rejected it, the scheduler lost leadership) delays the
next /filter once, by at most `timeout`. Pods whose claims are all allocated
already take no devices at /bind and are not waited for.

A client that calls /filter without ever binding (a what-if tool, a test
driver, a scheduler whose binds go elsewhere) would make every /filter wait
out the bound. So the gate starts off and turns on with the first /bind of a
pod it saw pass /filter; after `STREAK_OFF` waits in a row that expired, it
is off again until such a /bind arrives. (The price: the pods filtered before
the first /bind after a start are not held back from each other.)

Most of the time no wait is needed at all: the gate remembers, for each
placement, the nodes /filter offered it and the claims its /bind will
allocate, and /filter first asks whether those pods could take this pod's
devices (`in_flight`, see `ContestedNodes.withhold` in filter/contested.py). Nodes where the
earlier pods and this one fit together are offered at once; a node where
they might not is withheld. Only a pod left with no such node waits here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Placement:
    """A pod that passed /filter: where it may go and what its /bind will allocate."""

    deadline: float
    nodes: frozenset[str] = frozenset()
    claims: tuple[str, ...] = ()  # keys of the claims its /bind allocates
    decided: asyncio.Event = field(default_factory=asyncio.Event)


STREAK_OFF = 3  # expired waits in a row after which the gate waits no more until a /bind arrives


class PlacementGate:
    def __init__(self, timeout: float, *, armed: bool = False) -> None:
        self.timeout = timeout
        self._pending: dict[str, Placement] = {}
        # Off until the first /bind of a pod it saw in /filter: a client that only asks
        # /filter (a what-if tool, a test driver) gets every node that fits, never one
        # held back for a bind that will not come.
        self._expired_streak = 0 if armed else STREAK_OFF

    @property
    def waiting(self) -> bool:
        """False while binds have stopped coming (see the module docstring)."""
        return self._expired_streak < STREAK_OFF

    def expect_bind(self, pod_uid: str, nodes: frozenset[str] = frozenset(), claims: tuple[str, ...] = ()) -> None:
        """`pod_uid` passed /filter (offered `nodes`) and its /bind will allocate `claims`."""
        if self.timeout > 0 and pod_uid:
            now = time.monotonic()
            if not self.waiting:
                # Nobody waits: only keep the expectations that may still be met.
                for uid in [u for u, p in self._pending.items() if p.deadline <= now]:
                    del self._pending[uid]
            self._pending[pod_uid] = Placement(now + self.timeout, nodes, claims)

    def forget(self, pod_uid: str) -> None:
        """The pod is back in /filter: it is not being bound (and nobody waits for it)."""
        placement = self._pending.pop(pod_uid, None)
        if placement is not None:
            placement.decided.set()

    def in_flight(self) -> list[Placement]:
        """Placements whose /bind may still come; none while the gate is off.

        One whose deadline passed is dropped here and counts as a wait that
        expired (the bind did not come), as in `wait`.
        """
        if not self._pending or not self.waiting:
            return []
        now = time.monotonic()
        live = []
        for uid, placement in list(self._pending.items()):
            if placement.deadline > now:
                live.append(placement)
            else:
                del self._pending[uid]
                self._expired_streak += 1
        return live if self.waiting else []

    def decided(self, pod_uid: str) -> None:
        """The pod's /bind has recorded its devices (or failed): later filters may go on."""
        placement = self._pending.pop(pod_uid, None)
        if placement is not None:
            placement.decided.set()
            if not self.waiting:  # binds come again: forget what went stale meanwhile
                now = time.monotonic()
                for uid in [u for u, p in self._pending.items() if p.deadline <= now]:
                    del self._pending[uid]
            self._expired_streak = 0

    def pending(self) -> int:
        return len(self._pending)

    async def wait(self, pod_uid: str) -> tuple[float, int]:
        """Wait for the binds of pods placed before `pod_uid`; returns (seconds waited, waits expired)."""
        self.forget(pod_uid)
        if not self._pending or not self.waiting:
            return 0.0, 0
        start = time.monotonic()
        expired = 0
        # Only the pods placed before this call: ones placed while it waits (concurrent
        # clients) would otherwise keep it waiting past its own budget.
        before = dict(self._pending)
        while True:
            waiting_for = [(u, p) for u, p in before.items() if self._pending.get(u) is p]
            if not waiting_for:
                break
            uid, placement = min(waiting_for, key=lambda item: item[1].deadline)
            left = placement.deadline - time.monotonic()
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        await placement.decided.wait()
                    continue
                except TimeoutError:
                    pass
            if self._pending.get(uid) is placement:
                del self._pending[uid]
                expired += 1
                self._expired_streak += 1
                if not self.waiting:
                    break
        return time.monotonic() - start, expired
