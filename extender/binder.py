"""/bind: decide a pod's devices under one lock, then write claims and the Binding concurrently.

Only the decision is serialized (allocate on the chosen node against the
allocated and in-flight devices, record the choice in the in-flight
ledger): that is what keeps a device from being handed out twice. The API
writes that follow (the delete-protection finalizer, the claim status, the
pod's Binding) run concurrently across pods, so a slow write delays only its
own pod. Every bind answers within `timeout` (below kube-scheduler's
`httpTimeout`); a bind that fails or runs out of time undoes what it wrote,
in the background, before its in-flight devices are released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allocator.allocation import Allocator
from allocator.extended_resources import (
    RequestMapping,
    claim_manifest,
    class_mapping,
    create_requests_and_mappings,
    dra_resources,
    in_memory_claim,
    is_extended_claim,
)
from allocator.features import DEFAULT_FEATURES, Features
from allocator.parse import ValidationError, parse_pod, parse_resource_claim
from allocator.pod_claims import claim_names
from allocator.types import DELETE_PROTECTION_FINALIZER, AllocationResult, DeviceID, Node, Pod, ResourceClaim
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
from extender.metrics import Metrics
from extender.placements import PlacementGate
from extender.wire import BindingArgs
from tracker import events as ev
from tracker.ledger import Reservation
from tracker.source import Conflict, Source, SourceError
from tracker.state import ClusterState
from tracker.timestamps import parse_rfc3339, rfc3339

log = logging.getLogger("dra_extender.bind")

BIND_ATTEMPTS = 5
DEFAULT_BIND_TIMEOUT = 4.0  # kube-scheduler's default httpTimeout is 5 s and covers /bind


class BindFailed(Exception):
    """The bind cannot succeed; the message is the scheduler's answer."""


class _BindingFailed(SourceError):
    """Creating the pod's Binding failed (after the claims were written)."""

    status = 0


@dataclass(slots=True)
class _Written:
    """What one bind changed on one claim, so exactly that can be taken back."""

    key: str
    finalizer_added: bool = False
    allocated: frozenset[DeviceID] = frozenset()
    reserved: bool = False
    created_uid: str = ""  # an extended-resource claim this bind created: deleted on undo


@dataclass(slots=True)
class _Extended:
    """The pod's extended-resource claim to create at this bind, and which containers use which request."""

    claim: ResourceClaim  # in memory, not created yet
    mappings: tuple[RequestMapping, ...]
    stale: ResourceClaim | None = None  # an unallocated one left by an earlier bind: deleted first


class Binder:
    def __init__(
        self,
        state: ClusterState,
        source: Source,
        allocator: Allocator,
        metrics: Metrics,
        gate: PlacementGate,
        *,
        is_leader: Callable[[], bool],
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
        self.is_leader = is_leader
        self.timeout = timeout
        self.lock = asyncio.Lock()  # held for decisions only, never across an API call
        self._background: set[asyncio.Task[None]] = set()
        self._timeouts: dict[str, asyncio.TimerHandle] = {}  # pod uid -> its binding-timeout check
        # One allocator per pool (see docs/kube-scheduler.md): the devices of every allocation
        # seen, and those this process wrote, so an allocation made by anyone else can be named.
        self._seen_allocations: dict[str, frozenset[DeviceID]] = {}
        self._own_allocations: set[tuple[str, frozenset[DeviceID]]] = set()
        state.subscribe(self._watch_allocations)

    # ------------------------------------------------------------------ entry point

    async def bind(self, args: BindingArgs) -> str:
        """'' when the pod is bound, else why not (the scheduler retries the pod with backoff)."""
        uid = args.pod_uid
        try:
            if not self.is_leader():
                self.metrics.binds.labels("not_leader").inc()
                return "not leader"
            deadline = time.monotonic() + self.timeout
            try:
                pod = await asyncio.wait_for(self._pod(args), self.timeout)
            except TimeoutError:
                return f"pod {args.pod_namespace}/{args.pod_name}: reading the pod timed out"
            uid = args.pod_uid or pod.meta.uid
            if not pod.resource_claims and not (self.features.extended_resources and pod.containers):
                self.gate.decided(uid)
                return await self._bind_pod(args, uid, deadline)
            return await self._bind_with_claims(pod, uid, args, deadline)
        except BindFailed as e:
            return str(e)
        finally:
            self.gate.decided(uid)

    async def _pod(self, args: BindingArgs) -> Pod:
        key = f"{args.pod_namespace}/{args.pod_name}"
        raw = self.state.raw_pods.get(key)
        if raw is None:
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

    # ------------------------------------------------------------------ decide, then write

    async def _bind_with_claims(self, pod: Pod, uid: str, args: BindingArgs, deadline: float) -> str:
        for attempt in range(BIND_ATTEMPTS):
            await self._fetch_missing_claims(pod, deadline)
            async with self.lock:
                claims, allocations, hold, extended = self._decide(pod, args.node)
            self.gate.decided(uid)
            written: list[_Written] = []
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(left):
                    for claim in claims:
                        allocation = allocations.get(claim.key)
                        if extended is not None and claim is extended.claim:
                            claim = await self._create_extended_claim(pod, extended, written)
                        await self._write_claim(claim, allocation, pod, uid, written)
                    if extended is not None:
                        await self._record_extended_claim(pod, extended, written[-1].key)
                    self._release(hold)  # the view holds the allocations now
                    keys = list(dict.fromkeys([*(w.key for w in written), *(c.key for c in claims)]))
                    answer = await self._binding_conditions(pod, uid, args.node, keys)
                    if answer is not None:
                        return answer
                    await self._create_binding(args, uid)
                self.metrics.binds.labels("ok").inc()
                # One line per pod, with what it was given (a line per claim would double the logging cost of a bind).
                allocated = {key: sorted(str(r.device_id) for r in alloc.results) for key, alloc in allocations.items()}
                log.info("bound pod", extra={"pod": pod.key, "node": args.node, "attempt": attempt + 1, "allocated": allocated})
                return ""
            except Conflict as e:
                # A claim changed under us (another pod reserved it, a status echo): decide again.
                log.info("claim changed while binding; retrying", extra={"pod": pod.key, "attempt": attempt + 1, "err": e.message})
                await self._undo(pod, uid, args.node, written, hold)
                await self._refresh_claims(pod, deadline)
            except TimeoutError:
                self.metrics.binds.labels("timeout").inc()
                await self._undo_within(deadline, pod, uid, args.node, written, hold)
                return f"binding pod {pod.key} to {args.node}: timed out after {self.timeout:g}s; its claim writes are being undone"
            except SourceError as e:
                binding = isinstance(e, _BindingFailed)
                self.metrics.binds.labels("binding_failed" if binding else "write_failed").inc()
                await self._undo_within(deadline, pod, uid, args.node, written, hold)
                what = "creating the Binding" if binding else "writing its claims"
                return f"binding pod {pod.key} to {args.node}: {what}: {e.message}"
            except BaseException:
                self._undo_in_background(pod, uid, args.node, written, hold)
                raise
        self.metrics.binds.labels("conflict").inc()
        return f"pod {pod.key}: claims kept changing while binding ({BIND_ATTEMPTS} attempts)"

    def _decide(self, pod: Pod, node_name: str) -> tuple[list[ResourceClaim], dict[str, AllocationResult], Reservation, _Extended | None]:
        """Under the lock, without I/O: allocate against allocated + in-flight devices and hold them."""
        if not self.is_leader():
            # Checked under the lock: binds queued when leadership ended must not allocate.
            self.metrics.binds.labels("not_leader").inc()
            raise BindFailed("not leader")
        claims, problem = self.state.pod_claims(pod)
        if problem is not None:
            self.metrics.binds.labels("claims_unresolved").inc()
            raise BindFailed(problem)
        node = self.state.node(node_name) or Node(node_name)
        claims, extended = self._extended_claim(pod, claims, node)
        outcome = self.allocator.allocate(
            node,
            claims,
            self.state.slices_for_node(node_name),
            self.state.classes,
            self.state.allocated_state,
            self.state.device,
            timestamp=rfc3339(),
            pool_slices=self.state.pool_slices,
        )
        if not outcome.ok:
            self.metrics.binds.labels("unschedulable").inc()
            raise BindFailed(f"cannot bind pod {pod.key} to {node_name}: {outcome.failure.message}")  # type: ignore[union-attr]
        hold = self.state.reserve(outcome.allocations)
        self.metrics.inflight.set(len(self.state.inflight))
        return claims, dict(outcome.allocations), hold, extended

    def _extended_claim(self, pod: Pod, claims: list[ResourceClaim], node: Node) -> tuple[list[ResourceClaim], _Extended | None]:
        """The pod's claims with, last, an in-memory claim for the extended resources DRA serves on `node`.

        An allocated extended-resource claim (an earlier bind whose binding
        conditions were pending) is used as it is; an unallocated one is stale
        and replaced (upstream's PostFilter deletes it too).
        """
        if not self.features.extended_resources or not pod.containers:
            return claims, None
        existing = next((c for c in claims if is_extended_claim(c)), None)
        if existing is not None and existing.allocation is not None:
            return claims, None
        own = [c for c in claims if c is not existing]
        mapping = class_mapping(self.state.classes)
        resources = dra_resources(pod, mapping, node)
        if not resources:
            return own, None
        requests, mappings = create_requests_and_mappings(pod, resources, mapping)
        claim = in_memory_claim(pod, requests)
        return [*own, claim], _Extended(claim, mappings, existing)

    async def _create_extended_claim(self, pod: Pod, extended: _Extended, written: list[_Written]) -> ResourceClaim:
        """Create the pod's extended-resource claim (generateName), after deleting a stale one."""
        ns = pod.meta.namespace
        stale = extended.stale
        if stale is not None:
            with contextlib.suppress(SourceError):
                await self.source.delete_claim(ns, stale.meta.name, stale.meta.uid)
        raw = await self.source.create_claim(ns, claim_manifest(pod, extended.claim.requests))
        self._apply_claim(raw)
        created = parse_resource_claim(raw)
        written.append(_Written(created.key, created_uid=created.meta.uid))
        return created

    async def _record_extended_claim(self, pod: Pod, extended: _Extended, claim_key: str) -> None:
        """pod.status.extendedResourceClaimStatus: the claim's name and which container uses which request."""
        name = claim_key.partition("/")[2]
        status = {"requestMappings": [m.to_api() for m in extended.mappings], "resourceClaimName": name}
        await self.source.patch_pod_status(pod.meta.namespace, pod.meta.name, {"status": {"extendedResourceClaimStatus": status}})

    def _release(self, hold: Reservation) -> None:
        hold.release()
        self.metrics.inflight.set(len(self.state.inflight))

    # ------------------------------------------------------------------ writes

    async def _write_claim(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: Pod, uid: str, written: list[_Written]
    ) -> None:
        """Allocate and/or reserve one claim with merge patches guarded by its resourceVersion."""
        raw = self.state.raw_claims[claim.key]
        ns, _, name = claim.key.partition("/")
        reservation = {"resource": "pods", "name": pod.meta.name, "uid": uid}
        reserved = list((raw.get("status") or {}).get("reservedFor") or [])
        if allocation is None and any(r.get("uid") == uid for r in reserved):
            return  # a retried bind: the reservation belongs to the earlier success
        if written and written[-1].key == claim.key and written[-1].created_uid:
            record = written[-1]  # the claim this bind just created
        else:
            record = _Written(claim.key)
            written.append(record)
        if allocation is not None:
            finalizers = list((raw.get("metadata") or {}).get("finalizers") or [])
            if DELETE_PROTECTION_FINALIZER not in finalizers:
                raw = await self.source.patch_claim(
                    ns, name, {"metadata": {"resourceVersion": _rv_str(raw), "finalizers": [*finalizers, DELETE_PROTECTION_FINALIZER]}}
                )
                record.finalizer_added = True
                self._apply_claim(raw)
            devices = frozenset(r.device_id for r in allocation.results)
            record.allocated = devices  # before the write: one that times out may still land
            own = (claim.key, devices)
            self._own_allocations.add(own)
            patch = {
                "metadata": {"resourceVersion": _rv_str(raw)},
                "status": {"allocation": allocation.to_api(), "reservedFor": [*reserved, reservation]},
            }
            try:
                raw = await self.source.patch_claim(ns, name, patch, status=True)
            except BaseException:
                self._own_allocations.discard(own)
                raise
            record.reserved = True
            self._apply_claim(raw)
            return
        patch = {"metadata": {"resourceVersion": _rv_str(raw)}, "status": {"reservedFor": [*reserved, reservation]}}
        raw = await self.source.patch_claim(ns, name, patch, status=True)
        record.reserved = True
        self._apply_claim(raw)

    async def _create_binding(self, args: BindingArgs, uid: str) -> None:
        try:
            await self.source.bind_pod(args.pod_namespace, args.pod_name, uid, args.node)
        except SourceError as e:
            # Not a claim conflict to retry: the pod is bound elsewhere, gone, or the write failed.
            raise _BindingFailed(e.message) from None

    async def _bind_pod(self, args: BindingArgs, uid: str, deadline: float) -> str:
        """A pod without claims: just the Binding."""
        try:
            await asyncio.wait_for(self._create_binding(args, uid), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.metrics.binds.labels("timeout").inc()
            return f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}: timed out after {self.timeout:g}s"
        except SourceError as e:
            self.metrics.binds.labels("binding_failed").inc()
            return f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}: {e.message}"
        self.metrics.binds.labels("ok").inc()
        log.info("bound pod", extra={"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node})
        return ""

    def _apply_claim(self, raw: dict[str, Any]) -> None:
        key = ev.object_key(ev.RESOURCE_CLAIM, raw)
        current = self.state.raw_claims.get(key)
        if current is not None and _rv(current) > _rv(raw):
            return  # the watch already delivered something newer
        self.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, raw))

    # ------------------------------------------------------------------ reads

    async def _call(self, coro: Any, what: str) -> Any:
        try:
            return await coro
        except SourceError as e:
            raise BindFailed(f"{what}: {e.message}") from None

    def _claim_names(self, pod: Pod) -> list[str]:
        return claim_names(pod)

    async def _fetch_missing_claims(self, pod: Pod, deadline: float) -> None:
        """A claim missing from the cache may just not have arrived through the watch yet."""
        for name in self._claim_names(pod):
            key = f"{pod.meta.namespace}/{name}"
            if key in self.state.claims:
                continue
            raw = await self._read_claim(pod.meta.namespace, name, deadline)
            if raw is not None:
                self._apply_claim(raw)

    async def _refresh_claims(self, pod: Pod, deadline: float) -> None:
        for name in self._claim_names(pod):
            raw = await self._read_claim(pod.meta.namespace, name, deadline)
            key = f"{pod.meta.namespace}/{name}"
            if raw is not None:
                self._apply_claim(raw)
            elif key in self.state.claims:
                self.state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, {}))

    async def _read_claim(self, namespace: str, name: str, deadline: float) -> dict[str, Any] | None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BindFailed(f"claim {namespace}/{name}: out of time reading it (bind budget {self.timeout:g}s)")
        try:
            return await asyncio.wait_for(self.source.get(ev.RESOURCE_CLAIM, namespace, name), left)
        except TimeoutError:
            raise BindFailed(f"claim {namespace}/{name}: reading it timed out (bind budget {self.timeout:g}s)") from None
        except SourceError as e:
            raise BindFailed(f"claim {namespace}/{name}: reading it failed: {e.message}") from None

    # ------------------------------------------------------------------ undo

    def _undo_in_background(self, pod: Pod, uid: str, node: str, written: list[_Written], hold: Reservation) -> asyncio.Task[None]:
        task = asyncio.ensure_future(self._undo(pod, uid, node, written, hold))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _undo_within(self, deadline: float, pod: Pod, uid: str, node: str, written: list[_Written], hold: Reservation) -> None:
        """Undo before answering while the budget lasts; past it, finish in the background.

        The scheduler's httpTimeout does not wait for clean-up, and the
        in-flight devices stay held until the undo is done either way.
        """
        task = self._undo_in_background(pod, uid, node, written, hold)
        left = deadline - time.monotonic()
        if left > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), left)

    async def _undo(self, pod: Pod, uid: str, node: str, written: list[_Written], hold: Reservation) -> None:
        """Take back this bind's reservations, allocations and finalizers; then free its devices.

        A write that timed out may still have landed, so every claim the bind
        touched or held devices for is read back. Nothing is undone for a pod
        the API server shows bound to this node: its claims are in use.
        """
        try:
            keys = {w.key: w for w in written}
            for claim_key in set(hold.devices.values()):
                keys.setdefault(claim_key, _Written(claim_key))
            if keys and await self._bound_here(pod, node):
                return
            for record in keys.values():
                await self._undo_claim(record, uid)
                if record.created_uid:
                    await self._delete_created(record)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("undoing a failed bind", extra={"pod": pod.key})
        finally:
            self._release(hold)

    async def _bound_here(self, pod: Pod, node: str) -> bool:
        try:
            raw = await self.source.get(ev.POD, pod.meta.namespace, pod.meta.name)
        except SourceError:
            return False
        spec = (raw or {}).get("spec") or {}
        return bool(raw) and spec.get("nodeName") == node and ((raw.get("metadata") or {}).get("uid") == pod.meta.uid)  # type: ignore[union-attr]

    async def _undo_claim(self, record: _Written, uid: str) -> None:
        ns, _, name = record.key.partition("/")
        for _ in range(BIND_ATTEMPTS):
            try:
                raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
            except SourceError as e:
                log.error("could not read claim to undo a failed bind", extra={"claim": record.key, "err": e.message})
                return
            if raw is None:
                return
            status = raw.get("status") or {}
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
            allocation = status.get("allocation")
            ours = (
                isinstance(allocation, dict)
                and bool(allocation)
                and _allocation_devices(allocation) == record.allocated
                and bool(record.allocated)
            )
            deallocate = ours and not reserved
            try:
                if len(reserved) != len(status.get("reservedFor") or []) or deallocate:
                    patch: dict[str, Any] = {"metadata": {"resourceVersion": _rv_str(raw)}, "status": {"reservedFor": reserved or None}}
                    if deallocate:
                        patch["status"]["allocation"] = None
                    raw = await self.source.patch_claim(ns, name, patch, status=True)
                    self._apply_claim(raw)
                if (deallocate or (record.finalizer_added and not allocation)) and not (raw.get("status") or {}).get("allocation"):
                    await self._drop_finalizer(raw)
                return
            except Conflict:
                continue
            except SourceError as e:
                log.error("could not undo claim writes of a failed bind", extra={"claim": record.key, "err": e.message})
                return

    # ------------------------------------------------------------------ binding conditions

    async def _binding_conditions(self, pod: Pod, uid: str, node: str, keys: list[str]) -> str | None:
        """None when the pod may be bound now; else /bind's answer (the allocation is kept while pending)."""
        if not self.features.binding_conditions:
            return None
        claims = [self.state.claims[k] for k in keys if k in self.state.claims]
        waiting = pending_for(claims, uid)
        if not waiting:
            return None
        bad = worst([readiness(c, self.state.raw_claims.get(c.key), timeout=self.binding_timeout) for c in waiting])
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
        await self.binding_failed(pod, uid, waiting, bad)
        return f"pod {pod.key}: {bad.message}; the claim was deallocated and the pod is scheduled again"

    async def binding_failed(self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness) -> None:
        """A failure condition or the timeout: a Warning on the pod, then deallocate so it is scheduled again."""
        self._pod_event(pod, uid, "Warning", FAILED_REASON, bad.message)
        for claim in claims:
            await self._deallocate(claim, uid)

    def binding_failed_in_background(self, pod: Pod, uid: str, claims: list[ResourceClaim], bad: Readiness) -> None:
        if any(t.get_name() == f"dealloc/{uid}" for t in self._background):
            return  # one deallocation per pod at a time
        task = asyncio.ensure_future(self.binding_failed(pod, uid, claims, bad))
        task.set_name(f"dealloc/{uid}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _deallocate(self, claim: ResourceClaim, uid: str) -> None:
        """Upstream's PostFilter deallocation: allocation, reservedFor and device status cleared, if only this pod holds it.

        An extended-resource claim made for the pod is deleted instead (a new
        one is made at its next /bind).
        """
        ns, _, name = claim.key.partition("/")
        for _ in range(BIND_ATTEMPTS):
            raw = self.state.raw_claims.get(claim.key)
            try:
                if raw is None:
                    raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
                if raw is None:
                    return
                status = raw.get("status") or {}
                if any(r.get("uid") != uid for r in status.get("reservedFor") or ()):
                    return  # another pod uses it: upstream leaves it allocated too
                if status.get("allocation"):
                    patch = {
                        "metadata": {"resourceVersion": _rv_str(raw)},
                        "status": {"allocation": None, "reservedFor": None, "devices": None},
                    }
                    raw = await self.source.patch_claim(ns, name, patch, status=True)
                    self._apply_claim(raw)
                await self._drop_finalizer(raw)
                if is_extended_claim(claim):
                    await self.source.delete_claim(ns, name, claim.meta.uid)
                log.info("deallocated claim after its binding failed", extra={"claim": claim.key})
                return
            except Conflict:
                raw = None
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
        due = max([t for t in started if t is not None] or [time.time()]) + self.binding_timeout - time.time()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timeouts.pop(uid, None)
            keys = [c.key for c in claims]
            fresh = [self.state.claims[k] for k in keys if k in self.state.claims]
            waiting = pending_for(fresh, uid)
            states = [readiness(c, self.state.raw_claims.get(c.key), timeout=self.binding_timeout) for c in waiting]
            bad = worst(states)
            if bad is not None and bad.state == TIMED_OUT:
                self.binding_failed_in_background(pod, uid, waiting, bad)

        self._timeouts[uid] = loop.call_later(max(0.0, due) + 0.5, fire)

    def _pod_event(self, pod: Pod, uid: str, kind: str, reason: str, message: str) -> None:
        event = {
            "type": kind,
            "reason": reason,
            "message": message,
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.meta.namespace, "name": pod.meta.name, "uid": uid},
        }
        task = asyncio.ensure_future(self.source.create_event(event))
        self._background.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._background.discard)  # type: ignore[arg-type]

    async def _delete_created(self, record: _Written) -> None:
        """An extended-resource claim this failed bind created goes away (upstream's Unreserve)."""
        ns, _, name = record.key.partition("/")
        try:
            await self.source.delete_claim(ns, name, record.created_uid)
        except SourceError as e:
            if e.status != 404:
                log.error("could not delete the extended-resource claim of a failed bind", extra={"claim": record.key, "err": e.message})

    async def _drop_finalizer(self, raw: Mapping[str, Any]) -> None:
        """A claim without an allocation no longer needs delete protection (as upstream's Unreserve)."""
        meta = raw.get("metadata") or {}
        finalizers = meta.get("finalizers") or []
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            return
        kept = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
        patched = await self.source.patch_claim(
            meta.get("namespace") or "", meta.get("name") or "", {"metadata": {"resourceVersion": _rv_str(raw), "finalizers": kept or None}}
        )
        self._apply_claim(patched)

    # ------------------------------------------------------------------ foreign allocations

    def _watch_allocations(self, event: ev.ObjectEvent) -> None:
        """Warn when, while we lead, a claim gets an allocation this process did not write."""
        if event.kind != ev.RESOURCE_CLAIM:
            return
        claim = self.state.claims.get(event.key)
        devices = frozenset(r.device_id for r in claim.allocation.results) if claim and claim.allocation else frozenset()
        before = self._seen_allocations.get(event.key, frozenset())
        if devices:
            self._seen_allocations[event.key] = devices
        else:
            self._seen_allocations.pop(event.key, None)
        if not devices or devices == before or not self.state.ready:
            return
        if (event.key, devices) in self._own_allocations:
            self._own_allocations.discard((event.key, devices))
            return
        if self.is_leader():
            self.metrics.foreign_allocations.inc()
            log.warning(
                "claim allocated by another allocator: only one allocator may manage a device pool",
                extra={"claim": event.key, "devices": sorted(str(d) for d in devices)},
            )


def readiness_start(claim: ResourceClaim) -> float | None:
    """The allocation's timestamp (seconds since the epoch): where the binding timeout counts from."""
    parsed = parse_rfc3339(claim.allocation.allocation_timestamp) if claim.allocation is not None else None
    return parsed.timestamp() if parsed is not None else None


def _allocation_devices(allocation: dict[str, Any]) -> frozenset[DeviceID]:
    results = ((allocation.get("devices") or {}).get("results")) or []
    return frozenset(DeviceID(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results if isinstance(r, dict))


def _rv(raw: Mapping[str, Any]) -> int:
    """resourceVersion as an integer, for one order only: our own write against a late watch event.

    The API contract makes resourceVersion opaque (compare for equality), and
    every other use here does. This one needs an order and has no other signal:
    the claim our patch returned must not be replaced by an older watch event
    that arrives after it, or the allocated devices would look free again.
    Upstream's scheduler does the same in its assume cache
    (pkg/scheduler/util/assumecache: the object's resourceVersion parsed as
    int64, older updates ignored). tracker/store.py `_resource_version` is the
    same rule on the watch's side. A missing or unparsable version counts as 0
    here (store.py: no order, the event applies).
    """
    try:
        return int((raw.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def _rv_str(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion") or "")
