"""The bind side of device binding conditions (extender/bind/conditions.py): wait, time out, deallocate.

/bind writes the allocation and answers an error while the conditions are
pending, keeping the allocation and checking the binding timeout when it
falls due; a failure condition or the timeout deallocates the claims
(upstream's PostFilter) so the pod is scheduled again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from allocator.extended_resources import is_extended_claim
from allocator.types import Pod, ResourceClaim
from extender.bind.background import BackgroundTasks
from extender.bind.claim_writes import BIND_ATTEMPTS, ClaimWrites
from extender.bind.conditions import (
    FAILED_REASON,
    PENDING,
    PENDING_REASON,
    READY,
    TIMED_OUT,
    Readiness,
    pending_for,
    pending_message,
    readiness,
    worst,
)
from extender.bind.pod_owners import BINDING, UNDOING, PodOwners
from serving.metrics import Metrics
from tracker import events as ev
from tracker.claim_status import ClaimStatus, parse_claim_status
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
        owners: PodOwners,
        *,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.source = source
        self.writer = writer
        self.metrics = metrics
        self.background = background
        self.owners = owners  # one owner of a pod's claims at a time: its /bind, or their deallocation
        self.timeout = timeout  # the binding timeout (seconds from the allocation's timestamp)
        self.clock = clock  # seconds since the epoch; tests set a fake one
        self._timeouts: dict[str, asyncio.TimerHandle] = {}  # pod uid -> its binding-timeout check
        self._due: dict[str, tuple[Pod, list[str]]] = {}  # pod uid -> the pod and the claim keys that check looks at

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def worst_of(self, claims: list[ResourceClaim]) -> Readiness | None:
        """The claims' readiness to act on (extender.bind.conditions.worst), None when all are ready."""
        now = self._now()
        return worst([readiness(c, self.state.claim_status(c.key), timeout=self.timeout, now=now) for c in claims])

    async def check(self, pod: Pod, uid: str, node: str, keys: list[str]) -> str | None:
        """None when the pod may be bound now; else /bind's answer (the allocation is kept while pending).

        Called by the pod's /bind, which owns the pod's claims (extender/bind/pod_owners.py):
        no deallocation of them runs meanwhile.
        """
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
        kept = await self.failed(pod, uid, waiting, bad)
        if kept:
            return f"pod {pod.key}: {bad.message}, but claims {', '.join(kept)} became ready meanwhile and keep their allocation; retried"
        return f"pod {pod.key}: {bad.message}; the claim was deallocated and the pod is scheduled again"

    async def failed(
        self,
        pod: Pod,
        uid: str,
        claims: list[ResourceClaim],
        bad: Readiness,
        *,
        snapshot: dict[str, tuple[ResourceClaim, ClaimStatus | None]] | None = None,
        keep_ready: bool = True,
    ) -> list[str]:
        """A failure condition or the timeout: deallocate so the pod is scheduled again; returns the claims kept.

        Only the owner of the pod's claims calls this. Each claim is judged on
        `snapshot` (what the decision saw, taken before any await) and written
        against that resourceVersion: if the claim changed meanwhile (the
        driver reported it ready) the write conflicts, and the claim is judged
        again as the API server has it. With `keep_ready` a claim that is
        ready then keeps its allocation, and a bound pod keeps them all.
        """
        if snapshot is None:
            snapshot = self._snapshot(claims)
        if await self._bound(pod, uid):
            log.info("pod bound meanwhile: its claims keep their allocation", extra={"pod": pod.key})
            return [c.key for c in claims]
        warned: list[bool] = []

        def warn() -> None:
            if not warned:
                warned.append(True)
                self._pod_event(pod, uid, "Warning", FAILED_REASON, bad.message)

        kept = []
        for claim in claims:
            judged, held = snapshot.get(claim.key, (claim, None))
            if not await self._deallocate(judged, held, uid, keep_ready, warn):
                kept.append(claim.key)
        return kept

    def failed_in_background(self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness, *, keep_ready: bool = True) -> bool:
        """Deallocate in the background unless the pod's claims have an owner already (its /bind, or a deallocation).

        Decided now, on the state as it is now; False when another owner has them.
        """
        if self.owners.take(uid, UNDOING) is not None:
            return False
        snapshot = self._snapshot(claims)
        task = self.background.spawn(self.failed(pod, uid, claims, bad, snapshot=snapshot, keep_ready=keep_ready), name=f"dealloc/{uid}")
        task.add_done_callback(lambda _t: self.owners.release(uid, UNDOING))
        return True

    def _snapshot(self, claims: list[ResourceClaim]) -> dict[str, tuple[ResourceClaim, ClaimStatus | None]]:
        return {c.key: (self.state.claims.get(c.key, c), self.state.claim_status(c.key)) for c in claims}

    async def _bound(self, pod: Pod, uid: str) -> bool:
        """Whether the API server has the pod bound (then nothing is deallocated); unknown counts as bound."""
        try:
            raw = await self.source.get(ev.POD, pod.meta.namespace, pod.meta.name)
        except SourceError as e:
            log.error("could not read the pod before deallocating its claims; kept", extra={"pod": pod.key, "err": e.message})
            return True
        if raw is None or (raw.get("metadata") or {}).get("uid") != uid:
            return False
        return bool((raw.get("spec") or {}).get("nodeName"))

    async def _deallocate(
        self, claim: ResourceClaim, held: ClaimStatus | None, uid: str, keep_ready: bool, warn: Callable[[], None]
    ) -> bool:
        """Upstream's PostFilter deallocation: allocation, reservedFor and device status cleared, if only this pod holds it.

        An extended-resource claim made for the pod is deleted instead (a new
        one is made at its next /bind). False when the claim keeps its
        allocation because it is ready (with `keep_ready`).
        """
        ns, _, name = claim.key.partition("/")
        for _ in range(BIND_ATTEMPTS):
            try:
                if held is None:
                    raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
                    if raw is None:
                        return True
                    self.writer.apply(raw)
                    held = parse_claim_status(raw)
                    claim = self.state.claims.get(claim.key, claim)
                if any(u != uid for u in held.reserved_uids):
                    return True  # another pod uses it: upstream leaves it allocated too
                if held.allocated:
                    if keep_ready and readiness(claim, held, timeout=self.timeout, now=self._now()).state == READY:
                        log.info("binding conditions met meanwhile: the claim keeps its allocation", extra={"claim": claim.key})
                        return False
                    warn()
                    if not self.writer.leadership.may_write():
                        log.warning("not leading: the claim's deallocation is left to the new leader", extra={"claim": claim.key})
                        return True
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
                return True
            except Conflict:
                held = None  # changed since it was judged: judge it again as the API server has it
                continue
            except SourceError as e:
                if e.status != 404:
                    log.error("could not deallocate a claim whose binding failed", extra={"claim": claim.key, "err": e.message})
                return True
        return True

    def _expire_later(self, pod: Pod, uid: str, claims: list[ResourceClaim]) -> None:
        """Check the binding timeout when it falls due, even if the pod is not retried by then."""
        if uid in self._timeouts:
            return
        started = [readiness_start(c) for c in claims]
        now = self.clock()
        due = max([t for t in started if t is not None] or [now]) + self.timeout - now
        self._due[uid] = (pod, [c.key for c in claims])
        self._timeouts[uid] = asyncio.get_running_loop().call_later(max(0.0, due) + 0.5, self.expire, uid)

    def expire(self, uid: str) -> None:
        """The binding-timeout check of pod `uid`, as its timer runs it when due.

        Judged on the state now; when the pod's /bind owns its claims, that
        bind judges the timeout itself, and this check looks again a second
        later in case the bind ends without.
        """
        handle = self._timeouts.pop(uid, None)
        if handle is not None:
            handle.cancel()
        entry = self._due.pop(uid, None)
        if entry is None:
            return
        pod, keys = entry
        fresh = [self.state.claims[k] for k in keys if k in self.state.claims]
        waiting = pending_for(fresh, uid)
        bad = self.worst_of(waiting)
        if bad is None or bad.state != TIMED_OUT:
            return
        if not self.failed_in_background(pod, uid, waiting, bad) and self.owners.holder(uid) == BINDING:
            self._due[uid] = entry
            self._timeouts[uid] = asyncio.get_running_loop().call_later(1.0, self.expire, uid)

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
