"""The extender's decisions: filter, prioritize and bind, over the tracker's state.

Everything here runs on the event loop, so a decision never sees a
half-applied change. /filter first waits for the /bind of pods placed before
it (`placements.py`), so it sees their devices as taken; /bind decides under
one lock and writes concurrently (`binder.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from allocator.allocation import Allocator, Outcome
from allocator.cel.lib.budget import DeadlineExceeded as CelDeadlineExceeded
from allocator.cel.lib.budget import set_deadline as set_cel_deadline
from allocator.parse import ValidationError, parse_node, parse_pod
from allocator.tolerations import blocks_allocation
from allocator.types import Node, Pod, ResourceClaim
from extender.binder import DEFAULT_BIND_TIMEOUT, Binder
from extender.metrics import Metrics
from extender.outcomes import OutcomeCache
from extender.placements import PlacementGate
from extender.requeue import Requeuer
from extender.wire import BadRequest, BindingArgs, ExtenderArgs
from tracker import events as ev
from tracker.source import Source
from tracker.state import ClusterState, Problem
from tracker.volumes import debug_volumes, has_pvc_volumes, pod_tolerations, pod_volume_verdict

log = logging.getLogger("dra_extender.extender")

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority
MAX_RESERVED_FOR = 256  # resource.k8s.io ResourceClaimReservedForMaxSize
DEFAULT_PLACEMENT_WAIT = 1.0  # seconds a /filter waits for an earlier pod's /bind
DEFAULT_CLAIM_WAIT = 1.0  # seconds a /filter waits for a claim generated from a template


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
        placement_wait: float = DEFAULT_PLACEMENT_WAIT,
        claim_wait: float = DEFAULT_CLAIM_WAIT,
        bind_timeout: float = DEFAULT_BIND_TIMEOUT,
    ) -> None:
        self.state = state
        self.source = source
        self.allocator = allocator
        self.metrics = metrics
        self.is_leader = is_leader
        self.claim_wait = claim_wait
        self.placements = PlacementGate(placement_wait)
        self.binder = Binder(state, source, allocator, metrics, self.placements, is_leader=is_leader, timeout=bind_timeout)
        self.outcomes = OutcomeCache(state, allocator, size=outcome_cache_size, on_computed=self._count_computed)
        self._claims_changed = asyncio.Event()
        state.listeners.append(self._notice_claims)
        self.requeuer: Requeuer | None = None  # cluster mode: wakes rejected pods when devices change

    @property
    def bind_lock(self) -> asyncio.Lock:
        """The lock decisions are made under (held only for in-memory work)."""
        return self.binder.lock

    # ------------------------------------------------------------------ helpers

    def _notice_claims(self, event: ev.ObjectEvent) -> None:
        if event.kind in (ev.RESOURCE_CLAIM, ev.POD):
            self._claims_changed.set()

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

    def _count_computed(self, outcome: Outcome) -> None:
        failure = outcome.failure
        if failure is not None and failure.device_class:
            # The class is at fault, not the claim: tell its owner with an Event.
            self.state.report(Problem(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, failure.device_class, failure.message))
        self.metrics.outcomes.labels("ok" if failure is None else failure.code).inc()

    def _nodes(self, names: list[str], raw_nodes: dict[Any, Any]) -> list[tuple[Node, Any]]:
        """(node, token) per name: the cached Node, or the one the scheduler sent (its version as token)."""
        nodes: list[tuple[Node, Any]] = []
        known = self.state.nodes
        for name in names:
            raw = raw_nodes.get(name)
            if raw is None:
                nodes.append((known.get(name) or Node(name), None))
            else:
                token = (raw.get("metadata") or {}).get("resourceVersion") or orjson.dumps(raw.get("metadata"))
                nodes.append((self._node(name, raw), token))
        return nodes

    def _verdicts(
        self, pod: Pod, claims: list[ResourceClaim], names: list[str], raw_nodes: dict[Any, Any], deadline: float | None = None
    ) -> list[Outcome]:
        """One verdict per node name, shared with every pod whose claims ask for the same."""
        return self.outcomes.verdicts(self.outcomes.signature(claims), claims, self._nodes(names, raw_nodes), deadline)

    def _claims_for(self, pod: Pod) -> tuple[list[ResourceClaim], str | None]:
        claims, problem = self.state.pod_claims(pod)
        if problem is not None:
            return claims, problem
        for claim in claims:
            if len(claim.reserved_for) >= MAX_RESERVED_FOR and not any(r.uid == pod.meta.uid for r in claim.reserved_for):
                return claims, f"claim {claim.key} is already reserved for {MAX_RESERVED_FOR} consumers"
        return claims, None

    async def _claims_when_created(self, pod: Pod) -> tuple[list[ResourceClaim], str | None]:
        """The pod's claims, waiting up to `claim_wait` for ones not created yet.

        kube-scheduler often pops a pod before kube-controller-manager has
        created its claims from their templates; rejecting it then costs the
        pod a backoff and a requeue. A short wait here usually sees the claim
        arrive through the watch (see docs/kube-scheduler.md for the measured
        trade-off: the scheduling cycle is sequential, so the pods behind it
        wait too).
        """
        claims, problem = self._claims_for(pod)
        if problem is None or self.claim_wait <= 0 or not self._claim_may_come(pod):
            return claims, problem
        start = time.monotonic()
        deadline = start + self.claim_wait
        while problem is not None and self._claim_may_come(pod):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._claims_changed.clear()
            try:
                await asyncio.wait_for(self._claims_changed.wait(), left)
            except TimeoutError:
                break
            fresh = self.state.raw_pods.get(pod.key)
            if fresh is not None and (fresh.get("metadata") or {}).get("uid") == pod.meta.uid:
                with contextlib.suppress(ValidationError):
                    pod = parse_pod(fresh)  # the controller may have written resourceClaimStatuses
            claims, problem = self._claims_for(pod)
        self.metrics.claim_wait.labels("arrived" if problem is None else "missing").observe(time.monotonic() - start)
        return claims, problem

    def _claim_may_come(self, pod: Pod) -> bool:
        """Only a claim from a template is created for the pod; a named one must already exist."""
        return any(
            pc.resource_claim_name is None and pc.resource_claim_template_name and pc.name not in pod.claim_statuses
            for pc in pod.resource_claims
        ) or any(
            (pc.resource_claim_name or pod.claim_statuses.get(pc.name))
            and f"{pod.meta.namespace}/{pc.resource_claim_name or pod.claim_statuses.get(pc.name)}" not in self.state.claims
            for pc in pod.resource_claims
            if pc.resource_claim_name is None
        )

    # ------------------------------------------------------------------ filter

    async def filter(self, args: ExtenderArgs, *, budget: float | None = None) -> tuple[list[str], dict[str, str]]:
        """Nodes that fit and, for the rest, why (all unresolvable: see docs/design.md#which-map).

        With a `budget` (seconds, counted from the call, waits included), raises
        BudgetExceeded rather than answer after it: the scheduler then retries
        the pod with backoff instead of timing the call out, and never gets a
        partial node list.
        """
        names = args.names
        if not pod_has_claims(args.pod):
            if not has_pvc_volumes(args.pod):
                return list(names), {}
            self._check_ready()
            problem = self._volume_problem(args.pod)
            return ([], {n: problem for n in names}) if problem else (list(names), {})
        deadline = time.monotonic() + budget if budget else None
        self._check_ready()
        pod = self._parse_pod(args.pod)
        waited, expired = await self.placements.wait(pod.meta.uid)
        if waited:
            self.metrics.placement_wait.observe(waited)
        if expired:
            self.metrics.placement_waits_expired.inc(expired)
            log.info("a placed pod's /bind did not arrive in time", extra={"pod": pod.key, "waits_expired": expired})
        claims, problem = await self._claims_when_created(pod)
        if problem is None and has_pvc_volumes(args.pod):
            problem = self._volume_problem(args.pod)
        if problem is not None:
            return [], {n: problem for n in names}
        raw_nodes = {((n.get("metadata") or {}).get("name")): n for n in args.nodes or []}
        passed: list[str] = []
        failed: dict[str, str] = {}
        previous = set_cel_deadline(deadline)  # CEL checks it between steps and devices
        try:
            verdicts = self._verdicts(pod, claims, names, raw_nodes, deadline)
        except CelDeadlineExceeded as e:
            done = getattr(e, "nodes_done", 0)
            step = f"evaluating CEL expression {_short(e.expression)!r}" if e.expression else "allocating devices"
            raise BudgetExceeded(
                f"claim {', '.join(_claims_with(claims, e.expression))}: /filter ran out of its time budget of "
                f"{budget:g} s {step} on node {names[min(done, len(names) - 1)]} ({done} of {len(names)} nodes done); "
                "the pod is retried with backoff"
            ) from None
        finally:
            set_cel_deadline(previous)
        for name, outcome in zip(names, verdicts, strict=True):
            if outcome.failure is None:
                passed.append(name)
            else:
                failed[name] = outcome.failure.message
        if passed and any(claim.allocation is None for claim in claims):
            self.placements.expect_bind(pod.meta.uid)
        if self.requeuer is not None:
            if passed:
                self.requeuer.placed(pod.meta.uid)
            elif names:
                self.requeuer.rejected(pod.meta.uid, pod.key)
        return passed, failed

    def _volume_problem(self, raw_pod: dict[str, Any]) -> str | None:
        """Why the pod may start on no node because of a volume taint (tracker/volumes.py), or None."""
        volumes = self.state.volumes
        if not volumes.has_taints():
            return None
        _tolerations, malformed = pod_tolerations(raw_pod)
        if malformed is not None:
            meta = raw_pod.get("metadata") if isinstance(raw_pod.get("metadata"), dict) else {}
            name = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
            self.state.report(
                Problem(
                    ev.POD, ev.GROUP_CORE, name, f"malformed volume tolerations, counted as none: {malformed}", str(meta.get("uid") or "")
                )
            )
        verdict = pod_volume_verdict(volumes, raw_pod)
        if verdict is None:
            return None
        self.metrics.volume_rejections.labels(verdict.taint.effect if verdict.taint is not None else "Malformed").inc()
        return verdict.message

    def debug_volumes(self) -> list[dict[str, Any]]:
        """/debug/volumes: each tainted PVC/PV, its taints and its pods (the HTTP edge reads state only through here)."""
        return debug_volumes(self.state.volumes, self.state.raw_pods)

    # ------------------------------------------------------------------ prioritize

    def prioritize(self, args: ExtenderArgs) -> list[tuple[str, int]]:
        """Health first; packing only breaks ties (formula in docs/scoring.md)."""
        names = args.names
        if not pod_has_claims(args.pod):
            return [(n, 0) for n in names]
        self._check_ready()
        pod = self._parse_pod(args.pod)
        claims, problem = self._claims_for(pod)
        if problem is not None:
            return [(n, 0) for n in names]
        raw_nodes = {((n.get("metadata") or {}).get("name")): n for n in args.nodes or []}
        nodes = self._nodes(names, raw_nodes)
        scores = self.outcomes.scores(self.outcomes.signature(claims), claims, nodes, self._score)
        return list(zip(names, scores, strict=True))

    def _score(self, node_name: str, outcome: Outcome) -> int:
        """score = round(9 * healthy) + (1 if the node already has devices in use), 0 when nothing fits.

        `healthy` is the share of the pod's devices without a non-blocking
        (None/unknown effect) taint. Packing is worth one point only: enough to
        prefer a node already in use over an empty one among equally healthy
        nodes, never enough to outweigh kube-scheduler's own spreading scores
        and its random choice among equal totals.
        """
        if not outcome.ok:
            return 0
        devices = outcome.devices
        healthy = 1.0
        if devices:
            degraded = sum(1 for d in devices if any(not blocks_allocation(t) for t in d.taints))
            healthy = 1.0 - degraded / len(devices)
        in_use = self.state.taken_on_node(node_name) > 0
        return max(0, min(MAX_PRIORITY, round((MAX_PRIORITY - 1) * healthy) + (1 if in_use else 0)))

    # ------------------------------------------------------------------ bind

    async def bind(self, args: BindingArgs) -> str:
        """Allocate, write claim status, then create the Binding; '' on success, else the error."""
        if not self.is_leader():
            self.placements.decided(args.pod_uid)
            return "not leader"
        self._check_ready()
        return await self.binder.bind(args)


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
