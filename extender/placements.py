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
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Placement:
    deadline: float
    decided: asyncio.Event = field(default_factory=asyncio.Event)


class PlacementGate:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._pending: dict[str, _Placement] = {}

    def expect_bind(self, pod_uid: str) -> None:
        """`pod_uid` passed /filter and its /bind will allocate devices."""
        if self.timeout > 0 and pod_uid:
            self._pending[pod_uid] = _Placement(time.monotonic() + self.timeout)

    def decided(self, pod_uid: str) -> None:
        """The pod's /bind has recorded its devices (or failed): later filters may go on."""
        placement = self._pending.pop(pod_uid, None)
        if placement is not None:
            placement.decided.set()

    def pending(self) -> int:
        return len(self._pending)

    async def wait(self, pod_uid: str) -> tuple[float, int]:
        """Wait for the binds of pods placed before `pod_uid`; returns (seconds waited, waits expired)."""
        self.decided(pod_uid)  # a pod back in /filter is not being bound
        if not self._pending:
            return 0.0, 0
        start = time.monotonic()
        expired = 0
        while self._pending:
            uid, placement = min(self._pending.items(), key=lambda item: item[1].deadline)
            left = placement.deadline - time.monotonic()
            if left > 0:
                try:
                    await asyncio.wait_for(placement.decided.wait(), left)
                    continue
                except asyncio.TimeoutError:
                    pass
            if self._pending.get(uid) is placement:
                del self._pending[uid]
                expired += 1
        return time.monotonic() - start, expired
