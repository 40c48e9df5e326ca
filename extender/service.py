"""The extender's decisions: filter, prioritize and bind, over the tracker's state.

Everything here runs on the event loop, so a decision never sees a
half-applied change. /filter offers only the nodes where the pods placed
before it, whose /bind has not come yet, cannot take its devices, and waits
for those binds when no such node is left (`placements.py`); /bind decides
under one lock and writes concurrently (`binder.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from allocator.allocation import Allocator, Outcome
from allocator.cel.lib.budget import DeadlineExceeded as CelDeadlineExceeded
from allocator.cel.lib.budget import set_deadline as set_cel_deadline
from allocator.extended_resources import claims_per_node
from allocator.features import DEFAULT_FEATURES, Features
from allocator.parse import ValidationError, parse_node, parse_pod
from allocator.pod_claims import TEMPLATE, claim_refs
from allocator.tolerations import blocks_allocation
from allocator.types import Node, Pod, ResourceClaim
from extender.binder import DEFAULT_BIND_TIMEOUT, Binder
from extender.binding_conditions import FAILED, PENDING, Readiness, allocated_node, pending_for, pending_message
from extender.debug_views import device_page, objects_snapshot
from extender.metrics import Metrics
from extender.outcomes import OutcomeCache
from extender.placements import Placement, PlacementGate
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
MAX_JOINT_PLACEMENTS = 4  # placed pods a /filter judges jointly with its own; beyond, it waits for their binds
MAX_KEPT_SCORES = 1024  # pods whose /filter left scores for their /prioritize
DEFAULT_OFFER_NODES = 100  # fully healthy fitting nodes after which /filter stops looking (0: offer every fitting node)


def pod_has_claims(pod: dict[str, Any]) -> bool:
    """The no-claim fast path: every pod reaches the extender, most have no claims.

    A pod requesting a domain-qualified resource may need devices through a
    DRA-backed extended resource, so it takes the slow path too.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    if spec.get("resourceClaims"):
        return True
    return _requests_extended(spec.get("containers")) or _requests_extended(spec.get("initContainers"))


def _requests_extended(containers: Any) -> bool:
    if not isinstance(containers, list):
        return False
    for c in containers:
        resources = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            values = resources.get(part)
            if isinstance(values, dict) and any("/" in name for name in values):
                return True
    return False


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
        features: Features = DEFAULT_FEATURES,
        binding_timeout: float = 600.0,
        offer_nodes: int = DEFAULT_OFFER_NODES,
    ) -> None:
        self.state = state
        self.features = features
        self.offer_nodes = offer_nodes
        self._scan_start = 0  # where the next limited /filter starts looking (it rotates, as kube-scheduler's sampling does)
        self.source = source
        self.allocator = allocator
        self.metrics = metrics
        self.is_leader = is_leader
        self.claim_wait = claim_wait
        self.placements = PlacementGate(placement_wait)
        self.binder = Binder(
            state,
            source,
            allocator,
            metrics,
            self.placements,
            is_leader=is_leader,
            timeout=bind_timeout,
            features=features,
            binding_timeout=binding_timeout,
        )
        # Claims for extended resources not created yet, by key, for pods placed but not bound:
        # /filter judges a later pod jointly with them as with any placed pod's claims.
        self._memory_claims: dict[str, ResourceClaim] = {}
        self.outcomes = OutcomeCache(state, allocator, size=outcome_cache_size, on_computed=self._count_computed)
        self._claims_changed = asyncio.Event()
        state.subscribe(self._notice_claims)
        self.requeuer: Requeuer | None = None  # cluster mode: wakes rejected pods when devices change
        self._scored: dict[str, dict[str, int]] = {}  # pod uid -> node -> score, kept by /filter for /prioritize

    @property
    def bind_lock(self) -> asyncio.Lock:
        """The lock decisions are made under (held only for in-memory work)."""
        return self.binder.lock

    # ------------------------------------------------------------------ helpers

    def _notice_claims(self, event: ev.ObjectEvent) -> None:
        if event.kind in (ev.RESOURCE_CLAIM, ev.POD):
            self._claims_changed.set()

    def _check_ready(self) -> None:
        waiting = self.not_ready()
        if waiting is not None:
            raise NotReady(waiting)

    # ------------------------------------------------------------------ what the HTTP edge asks (it never reads the state)

    @property
    def ready(self) -> bool:
        return self.state.ready

    def not_ready(self) -> str | None:
        """Why verbs cannot be answered yet (the initial state of some kinds is missing), or None."""
        if self.state.ready:
            return None
        return f"not ready: waiting for the initial state of {', '.join(self.state.missing())}"

    def refresh_gauges(self) -> None:
        """On the main loop: the gauges that read the tracker's state."""
        self.metrics.leader.set(1 if self.is_leader() else 0)
        for k, v in self.state.device_state_counts().items():
            self.metrics.devices.labels(k).set(v)
        stats = getattr(self.state.cel, "stats", None)
        if isinstance(stats, dict):
            self.metrics.set_cel_stats(stats)

    def bind_decided(self, pod_uid: str) -> None:
        """A /bind that cannot be read is decided too: later filters must not wait for it."""
        self.placements.decided(pod_uid)

    def debug_devices(self, node: str, driver: str, pool: str, tainted: str, limit: int, cont: str) -> dict[str, object]:
        """/debug/devices: one page of the patched device view."""
        return device_page(self.state, node, driver, pool, tainted, limit, cont)

    def debug_objects(self) -> dict[str, Any]:
        """/debug/objects: the resourceVersion of every object in the view."""
        return objects_snapshot(self.state)

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
        known = self.state.nodes
        if not raw_nodes:  # nodeCacheCapable: names only
            get = known.get
            return [(get(name) or Node(name), None) for name in names]
        nodes: list[tuple[Node, Any]] = []
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
            fresh = self.state.pods.get(pod.key)
            if fresh is not None and pod.meta.uid and fresh.meta.uid == pod.meta.uid:
                pod = fresh  # the controller may have written resourceClaimStatuses
            claims, problem = self._claims_for(pod)
        self.metrics.claim_wait.labels("arrived" if problem is None else "missing").observe(time.monotonic() - start)
        return claims, problem

    def _claim_may_come(self, pod: Pod) -> bool:
        """Only a claim from a template is created for the pod; a named one must already exist."""
        return any(
            ref.may_come or (ref.source == TEMPLATE and f"{pod.meta.namespace}/{ref.name}" not in self.state.claims)
            for ref in claim_refs(pod)
        )

    def _binding_wait(self, pod: Pod, waiting: list[ResourceClaim]) -> str | None:
        """Why no node is offered while the pod's binding conditions are pending or have failed; None once ready.

        Every node is rejected as unresolvable: the pod waits in kube-scheduler's
        unschedulable queue, and the driver's update of the claim's status
        requeues it. A failure or timeout deallocates (in the background), and
        that claim update requeues the pod for a fresh allocation.
        """
        bad = self.binder.binding_readiness(waiting)
        if bad is None:
            return None
        if bad.state == PENDING:
            node = allocated_node(next(c for c in waiting if c.key == bad.claim))
            return f"claim {bad.claim}: {pending_message(node or 'the allocated node')}; the pod is bound there once they are met"
        self.binder.binding_failed_in_background(pod, pod.meta.uid, waiting, bad)
        return f"claim {bad.claim}: {bad.message}; the claim is being deallocated and the pod scheduled again"

    def _extended_groups(
        self, pod: Pod, claims: list[ResourceClaim], names: list[str], raw_nodes: dict[Any, Any]
    ) -> list[tuple[list[ResourceClaim], list[str]]]:
        """(claims, nodes) per group of nodes on which DRA serves the same extended resources (allocator.extended_resources)."""
        if not self.features.extended_resources or not pod.containers:
            return [(claims, list(names))]
        groups = claims_per_node(pod, claims, self.state.classes, [node for node, _token in self._nodes(names, raw_nodes)])
        for group_claims, _names in groups:
            for claim in group_claims:
                if claim.key not in self.state.claims:  # in memory: judged jointly while its pod is being bound
                    if len(self._memory_claims) >= MAX_KEPT_SCORES:
                        del self._memory_claims[next(iter(self._memory_claims))]
                    self._memory_claims[claim.key] = claim
        return groups

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
        self.placements.forget(pod.meta.uid)
        self._scored.pop(pod.meta.uid, None)
        claims, problem = await self._claims_when_created(pod)
        if problem is None and has_pvc_volumes(args.pod):
            problem = self._volume_problem(args.pod)
        if problem is not None:
            return [], {n: problem for n in names}
        waiting = pending_for(claims, pod.meta.uid) if self.features.binding_conditions else []
        if waiting:
            held = self._binding_wait(pod, waiting)
            if held is not None:
                return [], {n: held for n in names}
        raw_nodes = {((n.get("metadata") or {}).get("name")): n for n in args.nodes or []}
        groups = self._extended_groups(pod, claims, names, raw_nodes)
        if len(groups) > 1:
            return self._filter_groups(pod, groups, names, raw_nodes, deadline, budget)
        claims = groups[0][0] if groups else claims
        if not claims:
            return list(names), {}  # only resources a device plugin serves
        passed, failed, fits = self._fit(pod, claims, names, raw_nodes, deadline, budget)
        if waiting and not passed:
            # Ready, but the allocated node was not sent or no longer fits: give the devices back.
            self.binder.binding_failed_in_background(
                pod, pod.meta.uid, waiting, _readiness_gone(waiting[0].key, allocated_node(waiting[0]))
            )
        to_allocate = tuple(c.key for c in claims if c.allocation is None)
        if passed and to_allocate:
            placed = self.placements.in_flight()
            if placed:
                withheld = self._withhold_contested(placed, claims, passed, raw_nodes, deadline, budget)
                if withheld is None:  # no node is safe from the pods being bound: wait for their binds
                    waited, expired = await self.placements.wait(pod.meta.uid)
                    if waited:
                        self.metrics.placement_wait.observe(waited)
                    if expired:
                        self.metrics.placement_waits_expired.inc(expired)
                        log.info("a placed pod's /bind did not arrive in time", extra={"pod": pod.key, "waits_expired": expired})
                    claims, problem = self._claims_for(pod)
                    if problem is not None:
                        return [], {n: problem for n in names}
                    claims = self._extended_groups(pod, claims, names, raw_nodes)[0][0]
                    passed, failed, fits = self._fit(pod, claims, names, raw_nodes, deadline, budget)
                elif withheld:
                    self.metrics.placement_nodes_withheld.inc(len(withheld))
                    kept = [n for n in passed if n not in withheld]
                    for n in passed:
                        if n in withheld:
                            failed[n] = withheld[n]
                    passed = kept
            if passed:
                self.placements.expect_bind(pod.meta.uid, frozenset(passed), to_allocate)
        if len(passed) > 1:
            self._keep_scores(pod.meta.uid, claims, passed, [fits[n] for n in passed], raw_nodes)
        if self.requeuer is not None:
            if passed:
                self.requeuer.placed(pod.meta.uid)
            elif names:
                self.requeuer.rejected(pod.meta.uid, pod.key)
        return passed, failed

    def _filter_groups(
        self,
        pod: Pod,
        groups: list[tuple[list[ResourceClaim], list[str]]],
        names: list[str],
        raw_nodes: dict[Any, Any],
        deadline: float | None,
        budget: float | None,
    ) -> tuple[list[str], dict[str, str]]:
        """Nodes differ in which extended resources DRA serves (rare): each group judged with its own claims.

        No joint judgement with placed pods here: a /bind that finds the
        devices taken answers an error and the pod is retried.
        """
        ok: set[str] = set()
        failed: dict[str, str] = {}
        to_allocate: set[str] = set()
        for claims, group in groups:
            if not claims:
                ok.update(group)
                continue
            passed, group_failed, _fits = self._fit(pod, claims, group, raw_nodes, deadline, budget)
            ok.update(passed)
            failed.update(group_failed)
            to_allocate.update(c.key for c in claims if c.allocation is None)
        passed = [n for n in names if n in ok]
        if passed and to_allocate:
            self.placements.expect_bind(pod.meta.uid, frozenset(passed), tuple(sorted(to_allocate)))
        if self.requeuer is not None:
            if passed:
                self.requeuer.placed(pod.meta.uid)
            elif names:
                self.requeuer.rejected(pod.meta.uid, pod.key)
        return passed, failed

    def _keep_scores(
        self, uid: str, claims: list[ResourceClaim], passed: list[str], verdicts: list[Outcome], raw_nodes: dict[Any, Any]
    ) -> None:
        """/prioritize's answer for the nodes just offered, for the HTTP thread to send without a hop.

        kube-scheduler calls /prioritize right after /filter, with the nodes
        that passed; scores computed now differ from ones computed then only
        by what changed in between (a few ms), and they only order nodes that
        all fit.
        """
        nodes = self._nodes(passed, raw_nodes)
        scores = self.outcomes.scores(self.outcomes.signature(claims), claims, nodes, self._score, verdicts)
        scored = self._scored
        if len(scored) >= MAX_KEPT_SCORES:
            del scored[next(iter(scored))]  # the oldest: its pod had one node left, or went away
        scored[uid] = dict(zip(passed, scores, strict=True))

    def filter_without_state(self, args: ExtenderArgs) -> list[str] | None:
        """Every node for a pod with neither claims nor PVC volumes; else None. Thread-safe (reads the request only)."""
        if pod_has_claims(args.pod) or has_pvc_volumes(args.pod):
            return None
        return list(args.names)

    def prioritize_without_state(self, args: ExtenderArgs) -> list[tuple[str, int]] | None:
        """Scores that need no look at the state: 0 for a pod without claims, or the ones its /filter kept.

        None when the main loop must score. Thread-safe: reads the request
        and takes one entry of `_scored` (a dict operation, atomic under the GIL).
        """
        names = args.names
        if not pod_has_claims(args.pod):
            return [(n, 0) for n in names]
        meta = args.pod.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        kept = self._scored.pop(uid, None) if isinstance(uid, str) else None
        if kept is None:
            return None
        try:
            return [(n, kept[n]) for n in names]
        except KeyError:  # not the nodes its /filter offered: score them on the main loop
            return None

    def _fit(
        self,
        pod: Pod,
        claims: list[ResourceClaim],
        names: list[str],
        raw_nodes: dict[Any, Any],
        deadline: float | None,
        budget: float | None,
    ) -> tuple[list[str], dict[str, str], dict[str, Outcome]]:
        """(nodes where the claims fit, why not elsewhere, the fitting nodes' verdicts) against allocated and in-flight devices.

        With `offer_nodes` set and more names than that, the names are looked
        at in chunks from a rotating start, and the look stops once
        `offer_nodes` fitting nodes have the best health (no device with a
        taint that does not block allocation, see `_score`): the
        nodes not looked at are neither offered nor failed (kube-scheduler
        drops them). A pod that fits anywhere is never refused: only a look
        over every name ends with no fitting node. See
        docs/kube-scheduler.md#how-many-nodes-filter-offers.
        """
        limit = self.offer_nodes
        total = len(names)
        limited = 0 < limit < total
        if limited:
            start = self._scan_start % total
            order = names[start:] + names[:start] if start else names
            chunk = limit
        else:
            order, chunk = names, total
        passed: list[str] = []
        failed: dict[str, str] = {}
        fits: dict[str, Outcome] = {}
        signature = self.outcomes.signature(claims)
        healthy = 0
        examined = 0
        previous = set_cel_deadline(deadline)  # CEL checks it between steps and devices
        try:
            while examined < total:
                part = order[examined : examined + chunk]
                try:
                    verdicts = self.outcomes.verdicts(signature, claims, self._nodes(part, raw_nodes), deadline)
                except CelDeadlineExceeded as e:
                    e.nodes_done = examined + (e.nodes_done or 0)
                    raise self._out_of_budget(e, claims, order, budget) from None
                for name, outcome in zip(part, verdicts, strict=True):
                    failure = outcome.failure
                    if failure is None:
                        passed.append(name)
                        fits[name] = outcome
                        if limited and _fully_healthy(outcome):
                            healthy += 1
                    else:
                        failed[name] = failure.message
                examined += len(part)
                if limited and healthy >= limit:
                    break
        finally:
            set_cel_deadline(previous)
        if limited:
            self._scan_start = (start + examined) % total
        return passed, failed, fits

    def _out_of_budget(self, e: CelDeadlineExceeded, claims: list[ResourceClaim], names: list[str], budget: float | None) -> BudgetExceeded:
        done = e.nodes_done
        step = f"evaluating CEL expression {_short(e.expression)!r}" if e.expression else "allocating devices"
        return BudgetExceeded(
            f"claim {', '.join(_claims_with(claims, e.expression))}: /filter ran out of its time budget of "
            f"{budget:g} s {step} on node {names[min(done, len(names) - 1)]} ({done} of {len(names)} nodes done); "
            "the pod is retried with backoff"
        )

    def _withhold_contested(
        self,
        placed: list[Placement],
        claims: list[ResourceClaim],
        passed: list[str],
        raw_nodes: dict[Any, Any],
        deadline: float | None,
        budget: float | None,
    ) -> dict[str, str] | None:
        """Of `passed`, the nodes a pod being bound might take this pod's devices on, and why; None: all of them.

        A placed pod will take its devices on one of the nodes /filter
        offered it; which one, the extender learns at its /bind. A node is
        safe when this pod's claims and those of every placed pod that may
        land there fit on it together (one joint allocation, its verdict
        cached like any other). Safe nodes are offered at once; the others
        are withheld, so kube-scheduler never picks a node whose devices an
        earlier pod may still take. None means no node is safe (or the pods
        share a claim, or too many are in flight to judge cheaply): the
        caller waits for their binds instead.
        """
        if len(placed) > MAX_JOINT_PLACEMENTS:
            return None
        own = {c.key for c in claims}
        claims_by_key = self.state.claims
        theirs: list[list[ResourceClaim]] = []
        for placement in placed:
            pending = []
            for key in placement.claims:
                if key in own:
                    return None  # a shared claim is allocated once, by whichever bind comes first
                claim = claims_by_key.get(key) or self._memory_claims.get(key)
                if claim is not None and claim.allocation is None:
                    pending.append(claim)
            theirs.append(pending)
        groups: dict[tuple[int, ...], list[str]] = {}
        for name in passed:
            reach = tuple(i for i, p in enumerate(placed) if theirs[i] and name in p.nodes)
            groups.setdefault(reach, []).append(name)
        withheld: dict[str, str] = {}
        for reach, group in groups.items():
            if not reach:
                continue
            joint = [c for i in reach for c in theirs[i]] + claims
            previous = set_cel_deadline(deadline)
            try:
                verdicts = self.outcomes.verdicts(self.outcomes.signature(joint), joint, self._nodes(group, raw_nodes), deadline)
            except CelDeadlineExceeded as e:
                raise self._out_of_budget(e, claims, group, budget) from None
            finally:
                set_cel_deadline(previous)
            for name, outcome in zip(group, verdicts, strict=True):
                if outcome.failure is not None:
                    withheld[name] = (
                        f"withheld while {len(reach)} pod(s) placed before this one are being bound: their devices may come "
                        "from this node; it is offered again once their binds are decided"
                    )
        return None if len(withheld) == len(passed) else withheld

    def _volume_problem(self, raw_pod: dict[str, Any]) -> str | None:
        """Why the pod may start on no node because of a volume taint (tracker/volumes.py), or None."""
        volumes = self.state.volumes
        if not volumes.has_taints():
            return None
        _tolerations, malformed = pod_tolerations(raw_pod)
        if malformed is not None:
            found = raw_pod.get("metadata")
            meta: dict[str, Any] = found if isinstance(found, dict) else {}
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
        """Allocate, write claim status, then create the Binding; '' on success, else the error.

        Whatever the way out (not leader, not ready, an error), the placement gate
        hears that this pod's bind is decided: later filters must not wait for it.
        """
        try:
            if not self.is_leader():
                return "not leader"
            self._check_ready()
            return await self.binder.bind(args)
        finally:
            self.placements.decided(args.pod_uid)


def _readiness_gone(claim: str, node: str) -> Readiness:
    return Readiness(
        FAILED,
        claim,
        f"device binding failed: claim={claim.partition('/')[2]}, reason=NodeUnavailable, message=node {node or '?'} is no longer offered to the pod",
    )


def _fully_healthy(outcome: Outcome) -> bool:
    """A fit with the best /prioritize health: no device with a taint that does not block allocation (None, unknown effects).

    A tolerated NoSchedule or NoExecute taint does not lower the score (see `Service._score`).
    """
    return not any(not blocks_allocation(t) for d in outcome.devices for t in d.taints)


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
