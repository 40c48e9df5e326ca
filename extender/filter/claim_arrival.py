"""A pod's claims as /filter sees them, waiting briefly for ones kube-controller-manager has not created yet."""

from __future__ import annotations

import asyncio
import time

from allocator.failures import REASON_CLAIMS_UNRESOLVED, Failure, of_claim
from allocator.pod_claims import TEMPLATE, being_deleted, claim_refs
from allocator.types import Pod, ResourceClaim
from serving.metrics import Metrics
from tracker import events as ev
from tracker.state import ClusterState

MAX_RESERVED_FOR = 256  # resource.k8s.io ResourceClaimReservedForMaxSize
DEFAULT_CLAIM_WAIT = 1.0  # seconds a /filter waits for a claim generated from a template


class ClaimArrival:
    def __init__(self, state: ClusterState, metrics: Metrics, claim_wait: float = DEFAULT_CLAIM_WAIT) -> None:
        self.state = state
        self.metrics = metrics
        self.claim_wait = claim_wait
        self._changed = asyncio.Event()
        state.subscribe(self._notice)

    def _notice(self, event: ev.ObjectEvent) -> None:
        if event.kind in (ev.RESOURCE_CLAIM, ev.POD):
            self._changed.set()

    def claims_for(self, pod: Pod) -> tuple[list[ResourceClaim], Failure | None]:
        """The pod's claims, or why they cannot be used (not created yet, not found, being deleted, reserved for too many)."""
        claims, problem = self.state.pod_claims(pod)
        if problem is None:
            problem = being_deleted(claims)
        if problem is None:
            for claim in claims:
                if len(claim.reserved_for) >= MAX_RESERVED_FOR and not any(r.uid == pod.meta.uid for r in claim.reserved_for):
                    problem = of_claim(REASON_CLAIMS_UNRESOLVED, claim.key, f" is already reserved for {MAX_RESERVED_FOR} consumers")
                    break
        return claims, problem

    async def when_created(self, pod: Pod) -> tuple[list[ResourceClaim], Failure | None]:
        """The pod's claims, waiting up to `claim_wait` for ones not created yet.

        kube-scheduler often pops a pod before kube-controller-manager has
        created its claims from their templates; rejecting it then costs the
        pod a backoff and a requeue. A short wait here usually sees the claim
        arrive through the watch (see docs/kube-scheduler.md for the measured
        trade-off: the scheduling cycle is sequential, so the pods behind it
        wait too).
        """
        claims, problem = self.claims_for(pod)
        if problem is None or self.claim_wait <= 0 or not self._may_come(pod):
            return claims, problem
        start = time.monotonic()
        deadline = start + self.claim_wait
        while problem is not None and self._may_come(pod):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._changed.clear()
            try:
                async with asyncio.timeout(left):
                    await self._changed.wait()
            except TimeoutError:
                break
            fresh = self.state.pods.get(pod.key)
            if fresh is not None and pod.meta.uid and fresh.meta.uid == pod.meta.uid:
                pod = fresh  # the controller may have written resourceClaimStatuses
            claims, problem = self.claims_for(pod)
        self.metrics.claim_wait.labels("arrived" if problem is None else "missing").observe(time.monotonic() - start)
        return claims, problem

    def _may_come(self, pod: Pod) -> bool:
        """Only a claim from a template is created for the pod; a named one must already exist."""
        return any(
            ref.may_come or (ref.source == TEMPLATE and f"{pod.meta.namespace}/{ref.name}" not in self.state.claims)
            for ref in claim_refs(pod)
        )
