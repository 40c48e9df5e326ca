"""The extender's decisions: filter, prioritize and bind, over the tracker's state.

Everything here runs on the event loop, so a decision never sees a
half-applied change. /filter offers only the nodes where the pods placed
before it, whose /bind has not come yet, cannot take its devices, and waits
for those binds when no such node is left (`placements.py`); /bind decides
under one lock and writes concurrently (`bind/binder.py`).

The Service sequences the verbs; one collaborator per job: the pod's claims
as they arrive (filter/claim_arrival.py), extended-resource groups
(filter/extended_groups.py), the node fit (filter/node_fit.py), nodes withheld while
placed pods are being bound (filter/contested.py), scores (prioritize/scores.py), volume
taints (filter/volume_checks.py) and the /debug bodies (debug_views.py). The HTTP
edge asks the Service only, never the state.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from allocator.allocation import Allocator, Outcome
from allocator.failures import REASON_BINDING_CONDITIONS, REASON_NOT_BOUND, Failure, plain
from allocator.features import DEFAULT_FEATURES, Features
from allocator.parse import ValidationError, parse_pod
from allocator.pod_claims import raw_may_use_dra, raw_needs_extender
from allocator.pod_volumes import has_pvc_volumes
from allocator.types import Pod, ResourceClaim
from extender.bind.backlog import DEFAULT_MAX_BINDS_IN_FLIGHT, BindBacklog
from extender.bind.binder import DEFAULT_BIND_TIMEOUT, Binder
from extender.bind.conditions import FAILED, PENDING, Readiness, allocated_node, pending_for, pending_message
from extender.debug_views import device_page, objects_snapshot
from extender.filter.claim_arrival import DEFAULT_CLAIM_WAIT, ClaimArrival
from extender.filter.contested import ContestedNodes
from extender.filter.extended_groups import ExtendedGroups
from extender.filter.node_fit import DEFAULT_OFFER_NODES, BudgetExceeded, NodeFit
from extender.filter.outcomes import OutcomeCache
from extender.filter.request_nodes import RequestNodes
from extender.filter.volume_checks import VolumeChecks
from extender.placements import PlacementGate
from extender.prioritize.scores import DEFAULT_NODE_PLACEMENT, Scores
from extender.requeue import Requeuer
from extender.wire import BadRequest, BindingArgs, ExtenderArgs
from serving.metrics import Metrics
from tracker import events as ev
from tracker.foreground import Foreground
from tracker.leadership_gate import LeadershipGate, MayWriteBy
from tracker.source import BindingSource
from tracker.state import ClusterState, Problem

__all__ = ["DEFAULT_CLAIM_WAIT", "DEFAULT_OFFER_NODES", "BudgetExceeded", "NotReady", "Service"]

log = logging.getLogger("dra_extender.extender")

DEFAULT_PLACEMENT_WAIT = 1.0  # seconds a /filter waits for an earlier pod's /bind

Verdict = tuple[list[str], dict[str, str]]  # /filter's answer: the nodes that fit, and why each other one does not
Judged = tuple[list[str], dict[str, Failure]]  # the same before the messages are written (filter's return writes them)


class NotReady(Exception):
    pass


class Service:
    """The verbs over the state. Its parts are built by the composition root (`serve` in dra_extender/cli.py,
    or `build_service` for tools and tests) and handed in: the binder (and through it the placement gate,
    the source, the allocator, the features and the leadership gate) and, in cluster mode, the requeuer."""

    def __init__(
        self,
        state: ClusterState,
        binder: Binder,
        metrics: Metrics,
        *,
        requeuer: Requeuer | None = None,
        outcome_cache_size: int = 50_000,
        claim_wait: float = DEFAULT_CLAIM_WAIT,
        offer_nodes: int = DEFAULT_OFFER_NODES,
        observe_only: bool = False,
        node_placement: str = DEFAULT_NODE_PLACEMENT,
        max_binds_in_flight: int = DEFAULT_MAX_BINDS_IN_FLIGHT,
    ) -> None:
        """`observe_only`: answer /filter exactly, but never act on the answer (no deallocation of a
        claim whose binding failed): `kubectl dra why` asks this way over its own snapshot."""
        self.observe_only = observe_only
        self.state = state
        self.binder = binder
        self.features = binder.features
        self.source = binder.source
        self.allocator = binder.allocator
        self.metrics = metrics
        self.leadership = binder.leadership
        metrics.lead_by("verbs", self.leadership.may_write)
        self.placements = binder.gate
        self.backlog = BindBacklog(max_binds_in_flight)
        metrics.binds_in_flight.set_function(lambda: self.backlog.in_flight)
        self.outcomes = OutcomeCache(state, binder.allocator, size=outcome_cache_size, on_computed=self._count_computed)
        self.claims = ClaimArrival(state, metrics, claim_wait)
        self.extended = ExtendedGroups(state, binder.features)
        self.fit = NodeFit(self.outcomes, offer_nodes, prefetch=not observe_only)
        self.contested = ContestedNodes(state, self.outcomes, self.extended.memory_claims)
        self.scores = Scores(state, self.outcomes, node_placement)
        self.volumes = VolumeChecks(state, metrics)
        self.requeuer = requeuer  # cluster mode: wakes rejected pods when devices change

    # ------------------------------------------------------------------ what the HTTP edge asks (it never reads the state)

    @property
    def ready(self) -> bool:
        return self.state.ready

    @property
    def foreground(self) -> Foreground:
        """Where the HTTP edge counts the verbs in flight (any thread): the state's background work waits for quiet."""
        return self.state.foreground

    def not_ready(self) -> str | None:
        """Why verbs cannot be answered yet (the initial state of some kinds is missing), or None."""
        return self.state.not_ready()

    def refresh_gauges(self) -> None:
        """On the main loop: the gauges that read the tracker's state."""
        self.metrics.refresh_leaders()
        for k, v in self.state.queries.device_state_counts().items():
            self.metrics.devices.labels(k).set(v)
        self.metrics.set_cel_stats(self.state.cel.stats)

    def bind_decided(self, pod_uid: str) -> None:
        """A /bind that cannot be read is decided too: later filters must not wait for it."""
        self.placements.decided(pod_uid)
        self.scores.decided(pod_uid)

    def debug_devices(self, node: str, driver: str, pool: str, tainted: str, limit: int, cont: str) -> dict[str, object]:
        """/debug/devices: one page of the patched device view."""
        return device_page(self.state, node, driver, pool, tainted, limit, cont)

    def debug_objects(self) -> dict[str, Any]:
        """/debug/objects: the resourceVersion of every object in the view."""
        return objects_snapshot(self.state)

    def debug_volumes(self) -> list[dict[str, Any]]:
        """/debug/volumes: each tainted PVC/PV, its taints and its pods."""
        return self.volumes.debug()

    # ------------------------------------------------------------------ helpers

    def _check_ready(self) -> None:
        waiting = self.not_ready()
        if waiting is not None:
            raise NotReady(waiting)

    def _parse_pod(self, raw: dict[str, Any]) -> Pod:
        try:
            return parse_pod(raw)
        except ValidationError as e:
            raise BadRequest(f"Pod.{e.field}" if e.field else "Pod", e.reason) from None

    def _count_computed(self, outcome: Outcome) -> None:
        failure = outcome.failure
        if failure is not None and failure.device_class:
            # The class is at fault, not the claim: tell its owner with an Event.
            self.state.report(Problem(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, failure.device_class, failure.message))
        self.metrics.outcomes.labels("ok" if failure is None else failure.code).inc()

    def _tell_requeuer(self, pod: Pod, passed: list[str], names: list[str]) -> None:
        if self.requeuer is not None:
            if passed:
                self.requeuer.placed(pod.meta.uid)
            elif names:
                self.requeuer.rejected(pod.meta.uid, pod.key)

    # ------------------------------------------------------------------ filter

    async def filter(self, args: ExtenderArgs, *, budget: float | None = None) -> Verdict:
        """Nodes that fit and, for the rest, why (all unresolvable: see docs/design.md#which-map).

        With a `budget` (seconds, counted from the call, waits included), raises
        BudgetExceeded rather than answer after it: the scheduler then retries
        the pod with backoff instead of timing the call out, and never gets a
        partial node list. The failures stay values up to here; this return writes their messages.
        """
        passed, failed = await self._judge(args, budget)
        return passed, {n: failure.message for n, failure in failed.items()}

    async def _judge(self, args: ExtenderArgs, budget: float | None) -> Judged:
        """/filter's answer with each failure as a value."""
        names = args.names
        if not raw_needs_extender(args.pod):
            return list(names), {}
        if not raw_may_use_dra(args.pod):  # only volume taints to check (none while no volume is tainted)
            self._check_ready()
            problem = self.volumes.problem(self._parse_pod(args.pod)) if self.volumes.any_tainted() else None
            return ([], {n: problem for n in names}) if problem is not None else (list(names), {})
        deadline = time.monotonic() + budget if budget else None
        self._check_ready()
        pod = self._parse_pod(args.pod)
        self.placements.forget(pod.meta.uid)
        self.scores.forget(pod.meta.uid)
        claims, problem = await self.claims.when_created(pod)
        if problem is None and has_pvc_volumes(args.pod):
            problem = self.volumes.problem(pod)
        if problem is not None:
            return [], {n: problem for n in names}
        waiting = pending_for(claims, pod.meta.uid) if self.features.binding_conditions else []
        if waiting:
            held = self._binding_wait(pod, waiting)
            if held is not None:
                return [], {n: held for n in names}
        nodes = RequestNodes(self.state, args.nodes)
        groups = self.extended.groups(pod, claims, names, nodes)
        if any(c.allocation is None for c in ([c for group, _ in groups for c in group] if groups else claims)):
            await self._bind_backlog(deadline)  # every pod with devices to allocate, whichever path it takes below
        if len(groups) > 1:
            return self._filter_groups(pod, groups, names, nodes, deadline, budget)
        claims = groups[0][0] if groups else claims
        if not claims:
            return list(names), {}  # only resources a device plugin serves
        return await self._filter_claims(pod, claims, waiting, names, nodes, deadline, budget)

    async def _filter_claims(
        self,
        pod: Pod,
        claims: list[ResourceClaim],
        waiting: list[ResourceClaim],
        names: list[str],
        nodes: RequestNodes,
        deadline: float | None,
        budget: float | None,
    ) -> Judged:
        """The nodes the claims fit on, less those a pod being bound may take the devices of; expected to bind on one of them."""
        passed, failed, fits = self.fit.fit(claims, names, nodes, deadline, budget)
        if waiting and not passed:
            # Ready, but the allocated node was not sent or no longer fits: give the devices back (ready or not).
            self._binding_failed(pod, waiting, _readiness_gone(waiting[0].key, allocated_node(waiting[0])), keep_ready=False)
        to_allocate = tuple(c.key for c in claims if c.allocation is None)
        if passed and to_allocate:
            placed = self.placements.in_flight()
            if placed:
                withheld = self.contested.withhold(placed, claims, passed, nodes, deadline, budget)
                if withheld is None:  # no node is safe from the pods being bound: wait for their binds
                    again = await self._after_placed_binds(pod, names, nodes, deadline, budget)
                    if isinstance(again, Failure):
                        return [], {n: again for n in names}
                    claims, passed, failed, fits = again
                elif withheld:
                    self.metrics.placement_nodes_withheld.inc(len(withheld))
                    failed.update((n, withheld[n]) for n in passed if n in withheld)
                    passed = [n for n in passed if n not in withheld]
            if passed:
                self.placements.expect_bind(pod.meta.uid, frozenset(passed), to_allocate)
        if len(passed) > 1:
            self.scores.keep(pod.meta.uid, claims, passed, [fits[n] for n in passed], nodes)
        elif passed and to_allocate:
            self.scores.aim(pod.meta.uid, claims, passed[0], fits[passed[0]], nodes)
        self._tell_requeuer(pod, passed, names)
        return passed, failed

    async def _bind_backlog(self, deadline: float | None) -> None:
        """While too many binds are in progress, wait (at most --placement-wait, within the budget) for fewer (extender/bind/backlog.py)."""
        bound = self.placements.timeout if deadline is None else min(self.placements.timeout, deadline - time.monotonic())
        waited = await self.backlog.wait(bound)
        if waited:
            self.metrics.bind_backlog_wait.observe(waited)

    async def _after_placed_binds(
        self, pod: Pod, names: list[str], nodes: RequestNodes, deadline: float | None, budget: float | None
    ) -> Failure | tuple[list[ResourceClaim], list[str], dict[str, Failure], dict[str, Outcome]]:
        """Wait for the binds of the pods placed before this one, then fit again; a failure when the claims are gone meanwhile."""
        waited, expired = await self.placements.wait(pod.meta.uid)
        if waited:
            self.metrics.placement_wait.observe(waited)
        if expired:
            self.metrics.placement_waits_expired.inc(expired)
            log.info("a placed pod's /bind did not arrive in time", extra={"pod": pod.key, "waits_expired": expired})
        claims, problem = self.claims.claims_for(pod)
        if problem is not None:
            return problem
        claims = self.extended.groups(pod, claims, names, nodes)[0][0]
        return (claims, *self.fit.fit(claims, names, nodes, deadline, budget))

    def _filter_groups(
        self,
        pod: Pod,
        groups: list[tuple[list[ResourceClaim], list[str]]],
        names: list[str],
        nodes: RequestNodes,
        deadline: float | None,
        budget: float | None,
    ) -> Judged:
        """Nodes differ in which extended resources DRA serves (rare): each group judged with its own claims.

        No joint judgement with placed pods here: a /bind that finds the
        devices taken answers an error and the pod is retried.
        """
        ok: set[str] = set()
        failed: dict[str, Failure] = {}
        to_allocate: set[str] = set()
        for claims, group in groups:
            if not claims:
                ok.update(group)
                continue
            passed, group_failed, _fits = self.fit.fit(claims, group, nodes, deadline, budget)
            ok.update(passed)
            failed.update(group_failed)
            to_allocate.update(c.key for c in claims if c.allocation is None)
        passed = [n for n in names if n in ok]
        if passed and to_allocate:
            self.placements.expect_bind(pod.meta.uid, frozenset(passed), tuple(sorted(to_allocate)))
        self._tell_requeuer(pod, passed, names)
        return passed, failed

    def _binding_wait(self, pod: Pod, waiting: list[ResourceClaim]) -> Failure | None:
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
            return plain(
                REASON_BINDING_CONDITIONS,
                f"claim {bad.claim}: {pending_message(node or 'the allocated node')}; the pod is bound there once they are met",
            )
        self._binding_failed(pod, waiting, bad)
        return plain(
            REASON_BINDING_CONDITIONS, f"claim {bad.claim}: {bad.message}; the claim is being deallocated and the pod scheduled again"
        )

    def _binding_failed(self, pod: Pod, waiting: list[ResourceClaim], bad: Readiness, *, keep_ready: bool = True) -> None:
        if not self.observe_only:
            self.binder.binding_failed_in_background(pod, pod.meta.uid, waiting, bad, keep_ready=keep_ready)

    def filter_without_state(self, args: ExtenderArgs) -> list[str] | None:
        """Every node for a pod with neither claims nor PVC volumes; else None. Thread-safe (reads the request only)."""
        if raw_needs_extender(args.pod):
            return None
        return list(args.names)

    # ------------------------------------------------------------------ prioritize

    def prioritize_without_state(self, args: ExtenderArgs) -> list[tuple[str, int]] | None:
        """Scores that need no look at the state: 0 for a pod without claims, or the ones its /filter kept.

        None when the main loop must score. Thread-safe: reads the request
        and takes one kept entry (extender/prioritize/scores.py).
        """
        names = args.names
        if not raw_may_use_dra(args.pod):
            return [(n, 0) for n in names]
        meta = args.pod.get("metadata")
        return self.scores.take(meta.get("uid") if isinstance(meta, dict) else None, names)

    def prioritize(self, args: ExtenderArgs) -> list[tuple[str, int]]:
        """Health first, then the placement policy (formula in docs/scoring.md)."""
        names = args.names
        if not raw_may_use_dra(args.pod):
            return [(n, 0) for n in names]
        self._check_ready()
        pod = self._parse_pod(args.pod)
        claims, problem = self.claims.claims_for(pod)
        if problem is not None:
            return [(n, 0) for n in names]
        return self.scores.of(pod.meta.uid, claims, names, RequestNodes(self.state, args.nodes))

    # ------------------------------------------------------------------ bind

    async def bind(self, args: BindingArgs) -> Failure | None:
        """Allocate, write claim status, then create the Binding; None on success, else why not.

        Whatever the way out (not leader, not ready, an error), the placement gate
        hears that this pod's bind is decided: later filters must not wait for it.
        """
        self.backlog.begin()
        try:
            deadline = time.monotonic() + self.binder.timeout
            if not await self.leadership.may_write_by(deadline):
                return plain(REASON_NOT_BOUND, "not leader")
            self._check_ready()
            return await self.binder.bind(args, deadline=deadline)
        finally:
            self.backlog.end()
            self.placements.decided(args.pod_uid)
            self.scores.decided(args.pod_uid)


def _readiness_gone(claim: str, node: str) -> Readiness:
    return Readiness(
        FAILED,
        claim,
        f"device binding failed: claim={claim.partition('/')[2]}, reason=NodeUnavailable, message=node {node or '?'} is no longer offered to the pod",
    )


def build_service(
    state: ClusterState,
    source: BindingSource,
    allocator: Allocator[Any],
    metrics: Metrics,
    *,
    leadership: MayWriteBy | None = None,
    placement_wait: float = DEFAULT_PLACEMENT_WAIT,
    bind_timeout: float = DEFAULT_BIND_TIMEOUT,
    features: Features = DEFAULT_FEATURES,
    binding_timeout: float = 600.0,
    **options: Any,
) -> Service:
    """A Service with its binder, for tools and tests: the parts `serve` builds, with the defaults
    (`options`: Service's own keywords)."""
    gate = PlacementGate(placement_wait)
    binder = Binder(
        state,
        source,
        allocator,
        metrics,
        gate,
        leadership=leadership or LeadershipGate.always(),
        timeout=bind_timeout,
        features=features,
        binding_timeout=binding_timeout,
    )
    return Service(state, binder, metrics, **options)
