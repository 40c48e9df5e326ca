"""The bind side of device binding conditions (extender/binding_conditions.py): wait, time out, deallocate.

/bind writes the allocation and answers an error while the conditions are
pending, keeping the allocation and checking the binding timeout when it
falls due; a failure condition or the timeout deallocates the claims
(upstream's PostFilter) so the pod is scheduled again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from allocator.extended_resources import is_extended_claim
from allocator.types import Pod, ResourceClaim
from extender.background import BackgroundTasks
from extender.binding_conditions import (
    FAILED_REASON,
    PENDING,
    PENDING_REASON,
    TIMED_OUT,
    Readiness,
    pending_for,
    pending_message,
    readiness,
    worst,
)
from extender.claim_writes import BIND_ATTEMPTS, ClaimWrites
from extender.metrics import Metrics
from tracker import events as ev
from tracker.claim_status import parse_claim_status
from tracker.source import BindingSource, Conflict, SourceError
from tracker.state import ClusterState
from tracker.timestamps import parse_rfc3339

log = logging.getLogger("dra_extender.bind")


class BindingWait:
    def __init__(
        self,
        state: ClusterState,
        source: BindingSource,
        writer: ClaimWrites,
        metrics: Metrics,
        background: BackgroundTasks,
        *,
        timeout: float,
    ) -> None:
        self.state = state
        self.source = source
        self.writer = writer
        self.metrics = metrics
        self.background = background
        self.timeout = timeout  # the binding timeout (seconds from the allocation's timestamp)
        self._timeouts: dict[str, asyncio.TimerHandle] = {}  # pod uid -> its binding-timeout check

    def worst_of(self, claims: list[ResourceClaim]) -> Readiness | None:
        """The claims' readiness to act on (extender.binding_conditions.worst), None when all are ready."""
        return worst([readiness(c, self.state.claim_status(c.key), timeout=self.timeout) for c in claims])

    async def check(self, pod: Pod, uid: str, node: str, keys: list[str]) -> str | None:
        """None when the pod may be bound now; else /bind's answer (the allocation is kept while pending)."""
        claims = [self.state.claims[k] for k in keys if k in self.state.claims]
        waiting = pending_for(claims, uid)
        if not waiting:
            return None
        bad = self.worst_of(waiting)
        if bad is None:
            return None
        if bad.state == PENDING:
            self.metrics.binds.labels("binding_conditions_pending").inc()
            self._pod_event(pod, uid, "Normal", PENDING_REASON, pending_message(node))
            self._expire_later(pod, uid, waiting)
            return (
                f"pod {pod.key}: {pending_message(node)} (claim {bad.claim}); its devices stay allocated and the pod is "
                "bound once the driver reports them ready"
            )
        self.metrics.binds.labels("binding_conditions_failed").inc()
        await self.failed(pod, uid, waiting, bad)
        return f"pod {pod.key}: {bad.message}; the claim was deallocated and the pod is scheduled again"

    async def failed(self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness) -> None:
        """A failure condition or the timeout: a Warning on the pod, then deallocate so it is scheduled again."""
        self._pod_event(pod, uid, "Warning", FAILED_REASON, bad.message)
        for claim in claims:
            await self._deallocate(claim, uid)

    def failed_in_background(self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness) -> None:
        if self.background.running(f"dealloc/{uid}"):
            return  # one deallocation per pod at a time
        self.background.spawn(self.failed(pod, uid, claims, bad), name=f"dealloc/{uid}")

    async def _deallocate(self, claim: ResourceClaim, uid: str) -> None:
        """Upstream's PostFilter deallocation: allocation, reservedFor and device status cleared, if only this pod holds it.

        An extended-resource claim made for the pod is deleted instead (a new
        one is made at its next /bind).
        """
        ns, _, name = claim.key.partition("/")
        for _ in range(BIND_ATTEMPTS):
            held = self.state.claim_status(claim.key)
            try:
                if held is None:
                    raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
                    if raw is None:
                        return
                    held = parse_claim_status(raw)
                if any(u != uid for u in held.reserved_uids):
                    return  # another pod uses it: upstream leaves it allocated too
                if held.allocated:
                    patch = {
                        "metadata": {"resourceVersion": held.resource_version},
                        "status": {"allocation": None, "reservedFor": None, "devices": None},
                    }
                    raw = await self.source.patch_claim(ns, name, patch, status=True)
                    self.writer.apply(raw)
                    held = parse_claim_status(raw)
                await self.writer.drop_finalizer(held)
                if is_extended_claim(claim):
                    await self.source.delete_claim(ns, name, claim.meta.uid)
                log.info("deallocated claim after its binding failed", extra={"claim": claim.key})
                return
            except Conflict:
                continue
            except SourceError as e:
                if e.status != 404:
                    log.error("could not deallocate a claim whose binding failed", extra={"claim": claim.key, "err": e.message})
                return

    def _expire_later(self, pod: Pod, uid: str, claims: list[ResourceClaim]) -> None:
        """Check the binding timeout when it falls due, even if the pod is not retried by then."""
        if uid in self._timeouts:
            return
        started = [readiness_start(c) for c in claims]
        due = max([t for t in started if t is not None] or [time.time()]) + self.timeout - time.time()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timeouts.pop(uid, None)
            keys = [c.key for c in claims]
            fresh = [self.state.claims[k] for k in keys if k in self.state.claims]
            waiting = pending_for(fresh, uid)
            bad = self.worst_of(waiting)
            if bad is not None and bad.state == TIMED_OUT:
                self.failed_in_background(pod, uid, waiting, bad)

        self._timeouts[uid] = loop.call_later(max(0.0, due) + 0.5, fire)

    def _pod_event(self, pod: Pod, uid: str, kind: str, reason: str, message: str) -> None:
        event = {
            "type": kind,
            "reason": reason,
            "message": message,
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.meta.namespace, "name": pod.meta.name, "uid": uid},
        }
        self.background.spawn(self.source.create_event(event))


def readiness_start(claim: ResourceClaim) -> float | None:
    """The allocation's timestamp (seconds since the epoch): where the binding timeout counts from."""
    parsed = parse_rfc3339(claim.allocation.allocation_timestamp) if claim.allocation is not None else None
    return parsed.timestamp() if parsed is not None else None
