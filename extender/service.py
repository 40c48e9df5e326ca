"""The extender's decisions: filter, prioritize and bind, over the tracker's state.

Everything here runs on the event loop, so a decision never sees a
half-applied change. Allocation writes are serialized under one lock with
the in-flight ledger (DESIGN §4 "Never double-allocate a device").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from allocator.allocation import Allocator, Failure, Outcome
from allocator.cel_library import DeadlineExceeded as CelDeadlineExceeded
from allocator.cel_library import set_deadline as set_cel_deadline
from allocator.types import (
    DELETE_PROTECTION_FINALIZER,
    DeviceID,
    Node,
    Pod,
    ResourceClaim,
    ValidationError,
    parse_node,
    parse_pod,
)
from extender.metrics import Metrics
from extender.wire import BadRequest, BindingArgs, ExtenderArgs
from tracker import events as ev
from tracker.source import Conflict, NotFound, Source, SourceError
from tracker.state import ClusterState, Problem

log = logging.getLogger("dra_extender.extender")

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority
MAX_RESERVED_FOR = 256  # resource.k8s.io ResourceClaimReservedForMaxSize
BIND_ATTEMPTS = 5


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_has_claims(pod: dict[str, Any]) -> bool:
    """The no-claim fast path: every pod reaches the extender, most have no claims."""
    spec = pod.get("spec")
    return bool(isinstance(spec, dict) and spec.get("resourceClaims"))


class NotReady(Exception):
    pass


class BudgetExceeded(Exception):
    """A /filter call ran out of its time budget; str() names the claim and the step."""


class Service:
    def __init__(
        self,
        state: ClusterState,
        source: Source,
        allocator: Allocator,
        metrics: Metrics,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        outcome_cache_size: int = 50_000,
    ) -> None:
        self.state = state
        self.source = source
        self.allocator = allocator
        self.metrics = metrics
        self.is_leader = is_leader
        self.bind_lock = asyncio.Lock()
        self._outcomes: OrderedDict[tuple[str, str, int], Outcome] = OrderedDict()
        self._cache_size = outcome_cache_size
        # One allocator per pool (DESIGN §1): the devices of every allocation seen, and those
        # this process is writing, so an allocation made by anyone else can be named.
        self._seen_allocations: dict[str, frozenset[DeviceID]] = {}
        self._own_allocations: set[tuple[str, frozenset[DeviceID]]] = set()
        state.listeners.append(self._watch_allocations)

    # ------------------------------------------------------------------ helpers

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

    def _check_ready(self) -> None:
        if not self.state.ready:
            raise NotReady(f"not ready: waiting for the initial state of {', '.join(self.state.missing())}")

    def _parse_pod(self, raw: dict[str, Any]) -> Pod:
        try:
            return parse_pod(raw)
        except ValidationError as e:
            raise BadRequest(f"Pod.{e.field}" if e.field else "Pod", e.reason) from None

    def _node(self, name: str, raw: dict[str, Any] | None) -> Node:
        if raw is not None:
            try:
                return parse_node(raw)
            except ValidationError:
                pass
        node = self.state.node(name)
        return node if node is not None else Node(name)

    def _outcome(self, pod: Pod, claims: list[ResourceClaim], node: Node) -> Outcome:
        key = (pod.meta.uid or pod.key, node.name, self.state.generation)
        cached = self._outcomes.get(key)
        if cached is not None:
            self._outcomes.move_to_end(key)
            return cached
        outcome = self.allocator.allocate(
            node,
            claims,
            self.state.slices_for_node(node.name),
            self.state.classes,
            self.state.is_taken,
            self.state.device,
        )
        self._outcomes[key] = outcome
        if len(self._outcomes) > self._cache_size:
            self._outcomes.popitem(last=False)
        failure = outcome.failure
        if failure is not None and failure.device_class:
            # The class is at fault, not the claim: tell its owner with an Event.
            self.state.report(Problem(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, failure.device_class, failure.message))
        self.metrics.outcomes.labels("ok" if outcome.ok else outcome.failure.code).inc()  # type: ignore[union-attr]
        return outcome

    def _claims_for(self, pod: Pod) -> tuple[list[ResourceClaim], str | None]:
        claims, problem = self.state.pod_claims(pod)
        if problem is not None:
            return claims, problem
        for claim in claims:
            if claim.reserved_for and not any(r.uid == pod.meta.uid for r in claim.reserved_for):
                if len(claim.reserved_for) >= MAX_RESERVED_FOR:
                    return claims, f"claim {claim.key} is already reserved for {MAX_RESERVED_FOR} consumers"
        return claims, None

    # ------------------------------------------------------------------ filter

    def filter(self, args: ExtenderArgs, *, budget: float | None = None) -> tuple[list[str], dict[str, str]]:
        """Nodes that fit and, for the rest, why (all unresolvable: see DESIGN "Which map").

        With a `budget` (seconds), raises BudgetExceeded rather than answer after it: the
        scheduler then retries the pod with backoff instead of timing the call out, and
        never gets a partial node list.
        """
        names = args.names
        if not pod_has_claims(args.pod):
            return list(names), {}
        self._check_ready()
        pod = self._parse_pod(args.pod)
        claims, problem = self._claims_for(pod)
        if problem is not None:
            return [], {n: problem for n in names}
        raw_nodes = {((n.get("metadata") or {}).get("name")): n for n in args.nodes or []}
        passed: list[str] = []
        failed: dict[str, str] = {}
        deadline = time.monotonic() + budget if budget else None
        previous = set_cel_deadline(deadline)  # CEL checks it between steps and devices
        done = 0
        try:
            for name in names:
                if deadline is not None and time.monotonic() > deadline:
                    raise CelDeadlineExceeded()
                outcome = self._outcome(pod, claims, self._node(name, raw_nodes.get(name)))
                if outcome.ok:
                    passed.append(name)
                else:
                    failed[name] = outcome.failure.message  # type: ignore[union-attr]
                done += 1
        except CelDeadlineExceeded as e:
            step = f"evaluating CEL expression {_short(e.expression)!r}" if e.expression else "allocating devices"
            raise BudgetExceeded(
                f"claim {', '.join(_claims_with(claims, e.expression))}: /filter ran out of its time budget of "
                f"{budget:g} s {step} on node {names[done]} ({done} of {len(names)} nodes done); "
                "the pod is retried with backoff"
            ) from None
        finally:
            set_cel_deadline(previous)
        return passed, failed

    # ------------------------------------------------------------------ prioritize

    def prioritize(self, args: ExtenderArgs) -> list[tuple[str, int]]:
        """Health first, then packing; formula in docs/scoring.md.

        score = round(10 * (0.7 * healthy + 0.3 * packing)), where `healthy` is
        the share of the pod's devices without a non-blocking (None/unknown
        effect) taint and `packing` the share of the node's node-local devices
        already allocated. A node where the claims do not fit scores 0.
        """
        names = args.names
        if not pod_has_claims(args.pod):
            return [(n, 0) for n in names]
        self._check_ready()
        pod = self._parse_pod(args.pod)
        claims, problem = self._claims_for(pod)
        if problem is not None:
            return [(n, 0) for n in names]
        raw_nodes = {((n.get("metadata") or {}).get("name")): n for n in args.nodes or []}
        scores = []
        for name in names:
            outcome = self._outcome(pod, claims, self._node(name, raw_nodes.get(name)))
            scores.append((name, self._score(name, outcome)))
        return scores

    def _score(self, node_name: str, outcome: Outcome) -> int:
        if not outcome.ok:
            return 0
        devices = outcome.devices
        healthy = 1.0
        if devices:
            degraded = sum(1 for d in devices if any(t.effect not in ("NoSchedule", "NoExecute") for t in d.taints))
            healthy = 1.0 - degraded / len(devices)
        local = [
            d.id for s in self.state.slices_for_node(node_name) if s.node_name == node_name for d in s.devices
        ]
        packing = sum(1 for d in local if self.state.is_taken(d)) / len(local) if local else 0.0
        return max(0, min(MAX_PRIORITY, round(MAX_PRIORITY * (0.7 * healthy + 0.3 * packing))))

    # ------------------------------------------------------------------ bind

    async def bind(self, args: BindingArgs) -> str:
        """Allocate, write claim status, then create the Binding; '' on success, else the error."""
        if not self.is_leader():
            return "not leader"
        self._check_ready()
        key = f"{args.pod_namespace}/{args.pod_name}"
        raw_pod = self.state.raw_pods.get(key)
        if raw_pod is None:
            raw_pod = await self.source.get(ev.POD, args.pod_namespace, args.pod_name)
        if raw_pod is None:
            return f"pod {key} not found"
        pod = self._parse_pod(raw_pod)
        if args.pod_uid and pod.meta.uid and pod.meta.uid != args.pod_uid:
            return f"pod {key}: UID {pod.meta.uid} does not match the requested {args.pod_uid}"
        uid = args.pod_uid or pod.meta.uid
        if not pod.resource_claims:
            return await self._bind_pod(args, uid)
        async with self.bind_lock:
            error, written = await self._allocate_and_reserve(pod, uid, args.node)
            if error:
                return error
            bind_error = await self._bind_pod(args, uid)
            if bind_error:
                await self._undo(pod, uid, written)
            return bind_error

    async def _bind_pod(self, args: BindingArgs, uid: str) -> str:
        try:
            await self.source.bind_pod(args.pod_namespace, args.pod_name, uid, args.node)
        except SourceError as e:
            self.metrics.binds.labels("binding_failed").inc()
            return f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}: {e.message}"
        self.metrics.binds.labels("ok").inc()
        log.info("bound pod", extra={"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node})
        return ""

    async def _fresh_claims(self, pod: Pod) -> tuple[list[ResourceClaim], str | None]:
        claims, problem = self._claims_for(pod)
        if problem is None or pod.meta.namespace is None:
            return claims, problem
        # A claim missing from the cache may just not have arrived yet: ask the source.
        for pc in pod.resource_claims:
            name = pc.resource_claim_name or pod.claim_statuses.get(pc.name)
            if name and f"{pod.meta.namespace}/{name}" not in self.state.claims:
                raw = await self.source.get(ev.RESOURCE_CLAIM, pod.meta.namespace, name)
                if raw is not None:
                    self.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"{pod.meta.namespace}/{name}", raw))
        return self._claims_for(pod)

    async def _allocate_and_reserve(self, pod: Pod, uid: str, node_name: str) -> tuple[str, list[tuple[str, bool]]]:
        """Returns (error, [(claim key, allocated by us)]) for the claims written."""
        written: list[tuple[str, bool]] = []
        for attempt in range(BIND_ATTEMPTS):
            if not self.is_leader():
                # Checked under the bind lock, before every write: binds queued behind the
                # lock when leadership ended must not allocate (DESIGN §4 one allocator).
                self.metrics.binds.labels("not_leader").inc()
                return "not leader", written
            claims, problem = await self._fresh_claims(pod)
            if problem is not None:
                self.metrics.binds.labels("claims_unresolved").inc()
                return problem, written
            node = self._node(node_name, None)
            outcome = self.allocator.allocate(
                node,
                claims,
                self.state.slices_for_node(node_name),
                self.state.classes,
                self.state.is_taken,
                self.state.device,
                timestamp=now_rfc3339(),
            )
            if not outcome.ok:
                self.metrics.binds.labels("unschedulable").inc()
                return f"cannot bind pod {pod.key} to {node_name}: {outcome.failure.message}", written  # type: ignore[union-attr]
            inflight = [
                (r.device_id, claim_key)
                for claim_key, alloc in outcome.allocations.items()
                for r in alloc.results
                if not r.admin_access
            ]
            for did, claim_key in inflight:
                self.state.inflight[did] = claim_key
            try:
                for claim in claims:
                    allocation = outcome.allocations.get(claim.key)
                    if await self._write_claim(claim, allocation, pod, uid):
                        # Only what this bind wrote is undone if the binding fails: a reservation
                        # that was already there (a retried bind) belongs to an earlier success.
                        written.append((claim.key, allocation is not None))
                return "", written
            except Conflict as e:
                log.info("claim changed while binding; retrying", extra={"pod": pod.key, "attempt": attempt + 1, "err": e.message})
                await self._undo(pod, uid, written)
                written = []
                await self._refresh_claims(pod)
            except SourceError as e:
                await self._undo(pod, uid, written)
                self.metrics.binds.labels("write_failed").inc()
                return f"writing claims of pod {pod.key}: {e.message}", []
            finally:
                for did, claim_key in inflight:
                    if self.state.inflight.get(did) == claim_key:
                        del self.state.inflight[did]
        self.metrics.binds.labels("conflict").inc()
        return f"pod {pod.key}: claims kept changing while binding ({BIND_ATTEMPTS} attempts)", []

    async def _refresh_claims(self, pod: Pod) -> None:
        for pc in pod.resource_claims:
            name = pc.resource_claim_name or pod.claim_statuses.get(pc.name)
            if not name:
                continue
            raw = await self.source.get(ev.RESOURCE_CLAIM, pod.meta.namespace, name)
            key = f"{pod.meta.namespace}/{name}"
            kind = "MODIFIED" if raw is not None else "DELETED"
            self.state.apply(ev.ObjectEvent(kind, ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, raw or {}))

    def _apply_claim(self, raw: dict[str, Any]) -> None:
        key = ev.object_key(ev.RESOURCE_CLAIM, raw)
        current = self.state.raw_claims.get(key)
        if current is not None and _rv(current) > _rv(raw):
            return  # the watch already delivered something newer
        self.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, raw))

    async def _write_claim(self, claim: ResourceClaim, allocation, pod: Pod, uid: str) -> bool:
        """Allocate and/or reserve; False when the claim was already reserved for the pod (nothing written)."""
        raw = self.state.raw_claims[claim.key]
        reservation = {"resource": "pods", "name": pod.meta.name, "uid": uid}
        if allocation is not None:
            meta = raw.get("metadata") or {}
            if DELETE_PROTECTION_FINALIZER not in (meta.get("finalizers") or []):
                updated = {**raw, "metadata": {**meta, "finalizers": [*(meta.get("finalizers") or []), DELETE_PROTECTION_FINALIZER]}}
                raw = await self.source.update_claim(updated)
                self._apply_claim(raw)
            status = dict(raw.get("status") or {})
            status["allocation"] = allocation.to_api()
            status["reservedFor"] = [*(status.get("reservedFor") or []), reservation]
            own = (claim.key, frozenset(r.device_id for r in allocation.results))
            self._own_allocations.add(own)
            try:
                raw = await self.source.update_claim_status({**raw, "status": status})
            except BaseException:
                self._own_allocations.discard(own)
                raise
            self._apply_claim(raw)
            log.info(
                "allocated claim",
                extra={
                    "claim": claim.key,
                    "pod": pod.key,
                    "devices": [str(r.device_id) for r in allocation.results],
                },
            )
            return True
        reserved = (raw.get("status") or {}).get("reservedFor") or []
        if any(r.get("uid") == uid for r in reserved):
            return False
        status = dict(raw.get("status") or {})
        status["reservedFor"] = [*reserved, reservation]
        raw = await self.source.update_claim_status({**raw, "status": status})
        self._apply_claim(raw)
        return True

    async def _undo(self, pod: Pod, uid: str, written: list[tuple[str, bool]]) -> None:
        """Take back reservations (and allocations nobody else holds) after a failed bind."""
        for claim_key, allocated_by_us in reversed(written):
            ns, _, name = claim_key.partition("/")
            for _ in range(BIND_ATTEMPTS):
                raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
                if raw is None:
                    break
                status = dict(raw.get("status") or {})
                reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
                status["reservedFor"] = reserved
                deallocate = allocated_by_us and not reserved
                if deallocate:
                    status.pop("allocation", None)
                try:
                    raw = await self.source.update_claim_status({**raw, "status": status})
                    self._apply_claim(raw)
                    if deallocate:
                        await self._drop_finalizer(raw)
                    break
                except Conflict:
                    continue
                except SourceError as e:
                    log.error("could not undo claim reservation", extra={"claim": claim_key, "err": e.message})
                    break


    async def _drop_finalizer(self, raw: dict[str, Any]) -> None:
        """A deallocated claim no longer needs delete protection (as upstream's Unreserve)."""
        for _ in range(BIND_ATTEMPTS):
            meta = raw.get("metadata") or {}
            finalizers = meta.get("finalizers") or []
            if DELETE_PROTECTION_FINALIZER not in finalizers or (raw.get("status") or {}).get("allocation"):
                return
            kept = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            try:
                self._apply_claim(await self.source.update_claim({**raw, "metadata": {**meta, "finalizers": kept}}))
                return
            except Conflict:
                fresh = await self.source.get(ev.RESOURCE_CLAIM, meta.get("namespace") or "", meta.get("name") or "")
                if fresh is None:
                    return
                raw = fresh


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."


def _claims_with(claims: list[ResourceClaim], expression: str) -> list[str]:
    """The claims whose requests use `expression`; all of them when none does (a class selector)."""
    using = []
    for claim in claims:
        for request in claim.requests:
            subs = [request.exactly] if request.exactly is not None else list(request.first_available)
            if expression and any(expression in sub.selectors for sub in subs):
                using.append(claim.key)
                break
    return using or [c.key for c in claims]


def _rv(raw: dict[str, Any]) -> int:
    try:
        return int((raw.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def monotonic() -> float:
    return time.perf_counter()


__all__ = ["Service", "NotReady", "Failure", "NotFound"]
