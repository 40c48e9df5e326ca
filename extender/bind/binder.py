"""/bind: decide a pod's devices under one lock, then write claims and the Binding concurrently.

Only the decision is serialized (allocate on the chosen node against the
allocated and in-flight devices, record the choice in the in-flight
ledger): that is what keeps a device from being handed out twice. The API
writes that follow (the delete-protection finalizer, the claim status, the
pod's Binding) run concurrently across pods, so a slow write delays only its
own pod. Every bind answers within `timeout` (below kube-scheduler's
`httpTimeout`); a bind that fails or runs out of time undoes what it wrote,
in the background, before its in-flight devices are released.

The Binder decides and sequences; its collaborators do one job each:
claim writes (extender/bind/claim_writes.py), the undo of a failed bind
(extender/bind/undo.py) and the binding-conditions wait
(extender/bind/wait.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from allocator.allocation import Allocator
from allocator.extended_resources import (
    class_mapping,
    create_requests_and_mappings,
    dra_resources,
    in_memory_claim,
    is_extended_claim,
)
from allocator.failures import REASON_BINDING_CONDITIONS, REASON_NOT_BOUND, Failure, plain
from allocator.features import DEFAULT_FEATURES, Features
from allocator.parse import ValidationError, parse_pod
from allocator.pod_claims import being_deleted, may_use_dra
from allocator.types import AllocationResult, Node, Pod, ResourceClaim
from extender.bind.background import BackgroundTasks
from extender.bind.claim_writes import BIND_ATTEMPTS, BindFailed, ClaimWrites, Extended, ForeignAllocations, NotLeading, Written
from extender.bind.conditions import Readiness
from extender.bind.pod_owners import BINDING, PodOwners
from extender.bind.undo import BindUndo
from extender.bind.wait import BindingWait
from extender.placements import PlacementGate
from extender.wire import BindingArgs
from serving.metrics import Metrics
from tracker import events as ev
from tracker.leadership_gate import MayWriteBy
from tracker.ledger import Reservation
from tracker.source import BindingSource, Conflict, SourceError
from tracker.state import ClusterState
from tracker.timestamps import rfc3339

__all__ = ["BIND_ATTEMPTS", "DEFAULT_BIND_TIMEOUT", "BindFailed", "Binder"]

log = logging.getLogger("dra_extender.bind")
_T = TypeVar("_T")

DEFAULT_BIND_TIMEOUT = 4.0  # kube-scheduler's default httpTimeout is 5 s and covers /bind


class _BindingFailed(SourceError):
    """Creating the pod's Binding failed (after the claims were written)."""

    status = 0


class Binder:
    def __init__(
        self,
        state: ClusterState,
        source: BindingSource,
        allocator: Allocator[Any],  # over whichever selector engine the state has (tracker: SelectorEngine[Any])
        metrics: Metrics,
        gate: PlacementGate,
        *,
        leadership: MayWriteBy,
        timeout: float = DEFAULT_BIND_TIMEOUT,
        features: Features = DEFAULT_FEATURES,
        binding_timeout: float = 600.0,
    ) -> None:
        self.state = state
        self.features = features
        self.binding_timeout = binding_timeout
        self.source = source
        self.allocator = allocator
        self.metrics = metrics
        self.gate = gate
        self.leadership = leadership  # asked before each write; a bind may wait out a fresh Lease's hand-over
        self.timeout = timeout
        self.lock = asyncio.Lock()  # held for decisions only, never across an API call
        background = BackgroundTasks()
        self.owners = PodOwners()  # a pod's claims: bound by its /bind or deallocated, never both at once
        self.claims = ClaimWrites(state, source, ForeignAllocations(state, metrics, leadership), timeout, leadership)
        self.undo = BindUndo(source, self.claims, background, self._release, leadership)
        self.binding = BindingWait(state, source, self.claims, metrics, background, self.owners, timeout=binding_timeout)

    # ------------------------------------------------------------------ entry point

    async def bind(self, args: BindingArgs, *, deadline: float | None = None) -> Failure | None:
        """None when the pod is bound, else why not (the scheduler retries the pod with backoff).

        `deadline` (time.monotonic()): when the caller's request started counting, else now + timeout.
        """
        uid = args.pod_uid
        try:
            deadline = deadline if deadline is not None else time.monotonic() + self.timeout
            if not await self.leadership.may_write_by(deadline):
                self.metrics.binds.labels("not_leader").inc()
                return plain(REASON_NOT_BOUND, "not leader")
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    pod = await self._pod(args)
            except TimeoutError:
                return plain(REASON_NOT_BOUND, f"pod {args.pod_namespace}/{args.pod_name}: reading the pod timed out")
            uid = args.pod_uid or pod.meta.uid
            if not may_use_dra(pod, extended_resources=self.features.extended_resources):
                self.gate.decided(uid)
                return await self._bind_pod(args, uid, deadline)
            return await self._bind_with_claims(pod, uid, args, deadline)
        except BindFailed as e:
            return e.failure
        finally:
            self.gate.decided(uid)

    async def _pod(self, args: BindingArgs) -> Pod:
        """The pod as the state holds it (parsed at intake), else as the API server has it."""
        key = f"{args.pod_namespace}/{args.pod_name}"
        pod = self.state.pods.get(key)
        if pod is None:
            raw = await self._call(self.source.get(ev.POD, args.pod_namespace, args.pod_name), f"reading pod {key}")
            if raw is None:
                raise BindFailed(f"pod {key} not found")
            try:
                pod = parse_pod(raw)
            except ValidationError as e:
                raise BindFailed(f"pod {key}: {e}") from None
        if args.pod_uid and pod.meta.uid and pod.meta.uid != args.pod_uid:
            raise BindFailed(f"pod {key}: UID {pod.meta.uid} does not match the requested {args.pod_uid}")
        return pod

    async def _call(self, coro: Awaitable[_T], what: str) -> _T:
        try:
            return await coro
        except SourceError as e:
            raise BindFailed(f"{what}: {e.message}") from None

    # ------------------------------------------------------------------ decide, then write

    async def _bind_with_claims(self, pod: Pod, uid: str, args: BindingArgs, deadline: float) -> Failure | None:
        """The pod's claims are this bind's alone until it and the undo of its writes are done (extender/bind/pod_owners.py)."""
        busy = self.owners.take(uid, BINDING)
        if busy is not None:
            self.metrics.binds.labels("claims_busy").inc()
            return plain(REASON_NOT_BOUND, f"pod {pod.key}: not bound now, {busy}; the pod is scheduled again")
        undos: list[asyncio.Future[Any]] = []
        try:
            return await self._decide_and_write(pod, uid, args, deadline, undos)
        finally:
            self.owners.release_after(uid, BINDING, undos)

    async def _decide_and_write(
        self, pod: Pod, uid: str, args: BindingArgs, deadline: float, undos: list[asyncio.Future[Any]]
    ) -> Failure | None:
        for attempt in range(BIND_ATTEMPTS):
            await self.claims.fetch_missing(pod, deadline)
            async with self.lock:
                claims, allocations, hold, extended = self._decide(pod, args.node)
            self.gate.decided(uid)
            written: list[Written] = []
            try:
                answer = await self._write_and_bind(pod, uid, args, deadline, claims, allocations, hold, extended, written)
                if answer is not None:
                    return answer
                self.metrics.binds.labels("ok").inc()
                # One line per pod, with what it was given (a line per claim would double the logging cost of a bind).
                allocated = {key: sorted(str(r.device_id) for r in alloc.results) for key, alloc in allocations.items()}
                log.info("bound pod", extra={"pod": pod.key, "node": args.node, "attempt": attempt + 1, "allocated": allocated})
                return None
            except Conflict as e:
                # A claim changed under us (another pod reserved it, a status echo): decide again.
                log.info("claim changed while binding; retrying", extra={"pod": pod.key, "attempt": attempt + 1, "err": e.message})
                await self.undo.run(pod, uid, args.node, written, hold)
                await self.claims.refresh(pod, deadline)
            except TimeoutError:
                self.metrics.binds.labels("timeout").inc()
                undos.append(await self.undo.within(deadline, pod, uid, args.node, written, hold))
                return plain(
                    REASON_NOT_BOUND,
                    f"binding pod {pod.key} to {args.node}: timed out after {self.timeout:g}s; its claim writes are being undone",
                )
            except SourceError as e:
                binding = isinstance(e, _BindingFailed)
                label = "not_leader" if isinstance(e, NotLeading) else "binding_failed" if binding else "write_failed"
                self.metrics.binds.labels(label).inc()
                undos.append(await self.undo.within(deadline, pod, uid, args.node, written, hold))
                what = "" if isinstance(e, NotLeading) else "creating the Binding: " if binding else "writing its claims: "
                return plain(REASON_NOT_BOUND, f"binding pod {pod.key} to {args.node}: {what}{e.message}")
            except BaseException:
                undos.append(self.undo.in_background(pod, uid, args.node, written, hold))
                raise
        self.metrics.binds.labels("conflict").inc()
        return plain(REASON_NOT_BOUND, f"pod {pod.key}: claims kept changing while binding ({BIND_ATTEMPTS} attempts)")

    async def _write_and_bind(
        self,
        pod: Pod,
        uid: str,
        args: BindingArgs,
        deadline: float,
        claims: list[ResourceClaim],
        allocations: dict[str, AllocationResult],
        hold: Reservation,
        extended: Extended | None,
        written: list[Written],
    ) -> Failure | None:
        """The decision's writes within the bind's budget; None once bound, else why not (binding conditions pending or failed)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        async with asyncio.timeout(left):
            extended_key = ""
            for claim in claims:
                allocation = allocations.get(claim.key)
                if extended is not None and claim is extended.claim:
                    if not extended.exists:
                        created = await self.claims.create_extended(pod, extended, written)
                        self._hold_as(hold, allocations, claim.key, created.key, written)
                        claim = created
                    extended_key = claim.key
                await self.claims.write(claim, allocation, pod, uid, written)
            if extended is not None:
                # Also for a claim allocated before a restart: the kubelet takes the claim and the mapping from here.
                await self.claims.record_extended(pod, extended, extended_key)
            self._release(hold)  # the view holds the allocations now
            keys = list(dict.fromkeys([*(w.key for w in written), *(c.key for c in claims)]))
            if self.features.binding_conditions:
                answer = await self.binding.check(pod, uid, args.node, keys)
                if answer is not None:
                    return plain(REASON_BINDING_CONDITIONS, answer)
            await self._create_binding(args, uid)
        return None

    def _decide(self, pod: Pod, node_name: str) -> tuple[list[ResourceClaim], dict[str, AllocationResult], Reservation, Extended | None]:
        """Under the lock, without I/O: allocate against allocated + in-flight devices and hold them."""
        if not self.leadership.may_write():
            # Checked under the lock: binds queued when leadership ended must not allocate.
            self.metrics.binds.labels("not_leader").inc()
            raise BindFailed("not leader")
        claims, problem = self.state.pod_claims(pod)
        if problem is not None:
            self.metrics.binds.labels("claims_unresolved").inc()
            raise BindFailed(problem)
        deleted = being_deleted(claims)
        if deleted is not None:
            self.metrics.binds.labels("unschedulable").inc()
            raise BindFailed(deleted.prefixed(REASON_NOT_BOUND, f"cannot bind pod {pod.key} to {node_name}: "))
        node = self.state.node(node_name) or Node(node_name)
        claims, extended = self._extended_claim(pod, claims, node)
        # As in-tree: `allocationTimestamp` only with binding conditions (upstream writes it when
        # DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are both on; it bounds their wait).
        timestamp = rfc3339() if self.features.binding_conditions else ""
        outcome = self.state.allocate_on(self.allocator, node, claims, timestamp=timestamp)
        if outcome.failure is not None:
            self.metrics.binds.labels("unschedulable").inc()
            raise BindFailed(outcome.failure.prefixed(REASON_NOT_BOUND, f"cannot bind pod {pod.key} to {node_name}: "))
        hold = self.state.reserve(outcome.allocations)
        self.metrics.inflight.set(len(self.state.inflight))
        return claims, dict(outcome.allocations), hold, extended

    def _extended_claim(self, pod: Pod, claims: list[ResourceClaim], node: Node) -> tuple[list[ResourceClaim], Extended | None]:
        """The pod's claims with, last, an in-memory claim for the extended resources DRA serves on `node`.

        An allocated extended-resource claim (an earlier bind whose binding
        conditions were pending) is used as it is; an unallocated one is stale
        and replaced (upstream's PostFilter deletes it too).
        """
        if not self.features.extended_resources or not pod.containers_if_extended:
            return claims, None
        existing = next((c for c in claims if is_extended_claim(c)), None)
        mapping = class_mapping(self.state.classes)
        if existing is not None and existing.allocation is not None:
            if pod.extended_claim_name == existing.meta.name:
                return claims, None
            # Allocated, but the pod's status does not name it yet (the extender stopped between the two writes).
            return claims, self._recorded(pod, existing, mapping, node)
        own = [c for c in claims if c is not existing]
        resources = dra_resources(pod, mapping, node)
        if not resources:
            return own, None
        requests, mappings = create_requests_and_mappings(pod, resources, mapping)
        claim = in_memory_claim(pod, requests)
        return [*own, claim], Extended(claim, mappings, existing)

    def _recorded(self, pod: Pod, claim: ResourceClaim, mapping: dict[str, str], node: Node) -> Extended:
        """The mapping to write for an extended-resource claim allocated earlier: rebuilt from the pod, checked against the claim.

        The requests are made from the pod and the classes the same way each
        time, so their names are the claim's; a claim without one of them
        (a class changed meanwhile) cannot serve the pod, and the bind fails
        rather than write a mapping the kubelet cannot follow.
        """
        _requests, mappings = create_requests_and_mappings(pod, dra_resources(pod, mapping, node), mapping)
        names = {r.name for r in claim.requests}
        missing = sorted({m.request_name for m in mappings} - names)
        if not mappings or missing:
            self.metrics.binds.labels("unschedulable").inc()
            raise BindFailed(
                f"pod {pod.key}: its extended-resource claim {claim.key} is allocated but has no request "
                f"{', '.join(missing) or 'for its extended resources'} the pod needs on node {node.name}; delete the claim to have a new one made"
            )
        return Extended(claim, mappings, exists=True)

    def _hold_as(
        self, hold: Reservation, allocations: dict[str, AllocationResult], memory_key: str, created_key: str, written: list[Written]
    ) -> None:
        """From now on the in-flight devices of the extended-resource claim are held under the name the API server gave it.

        The allocation this bind writes next arrives under that name; held
        under the in-memory one, the tracker would take this process's own
        write for another allocator's (docs/operator-guide.md). Release and
        reserve again with no await between: no decision sees the devices
        free. Claims whose allocation has landed already are held by the
        view, and are not held again (a share held again would be dropped
        with the hold).
        """
        landed = {w.key for w in written if w.allocated and w.reserved}
        hold.release()
        renamed = self.state.reserve(
            {created_key if key == memory_key else key: alloc for key, alloc in allocations.items() if key not in landed}
        )
        hold.devices, hold.shares = renamed.devices, renamed.shares
        self.metrics.inflight.set(len(self.state.inflight))

    def _release(self, hold: Reservation) -> None:
        hold.release()
        self.metrics.inflight.set(len(self.state.inflight))

    # ------------------------------------------------------------------ the Binding

    async def _create_binding(self, args: BindingArgs, uid: str) -> None:
        if not self.leadership.may_write():  # each claim write asked first; so does the Binding
            raise NotLeading(f"not leader: leadership ended before binding pod {args.pod_namespace}/{args.pod_name}")
        try:
            await self.source.bind_pod(args.pod_namespace, args.pod_name, uid, args.node)
        except SourceError as e:
            # Not a claim conflict to retry: the pod is bound elsewhere, gone, or the write failed.
            raise _BindingFailed(e.message) from None

    async def _bind_pod(self, args: BindingArgs, uid: str, deadline: float) -> Failure | None:
        """A pod without claims: just the Binding."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._create_binding(args, uid)
        except TimeoutError:
            self.metrics.binds.labels("timeout").inc()
            return plain(
                REASON_NOT_BOUND, f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}: timed out after {self.timeout:g}s"
            )
        except SourceError as e:
            self.metrics.binds.labels("binding_failed").inc()
            return plain(REASON_NOT_BOUND, f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}: {e.message}")
        self.metrics.binds.labels("ok").inc()
        log.info("bound pod", extra={"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node})
        return None

    # ------------------------------------------------------------------ binding conditions (for /filter)

    def binding_failed_in_background(
        self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness, *, keep_ready: bool = True
    ) -> None:
        """A failure condition or the timeout seen by /filter: deallocate in the background, unless the pod's claims have an owner.

        Only the leader writes: a standby replica's /filter answers the same, and leaves the claims to the leader.
        """
        if self.leadership.may_write():
            self.binding.failed_in_background(pod, uid, claims, bad, keep_ready=keep_ready)

    def binding_readiness(self, claims: list[ResourceClaim]) -> Readiness | None:
        """The worst readiness of claims with pending binding conditions; None when all are ready."""
        return self.binding.worst_of(claims)
