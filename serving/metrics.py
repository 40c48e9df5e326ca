"""Prometheus metrics, all under `dra_extender_` (never kube-scheduler's `scheduler_`)."""

from __future__ import annotations

import contextlib
import platform
from collections import OrderedDict
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from tracker.state import COUNTERS_LOWERED, DUPLICATE_SHARE_ID

# No `<name>_created` series beside every counter and histogram: they double the series count and
# nothing in the dashboard or the docs reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client defines it without annotations

# The CEL engine's cumulative statistics (allocator.cel stats keys) -> (counter, its labels).
_CEL_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hits": ("lookups", ("hit",)),
    "misses": ("lookups", ("miss",)),
    "evaluations": ("evaluations", ()),
    "errors": ("evaluation_errors", ()),
    "programs": ("compilations", ("ok",)),
    "compile_errors": ("compilations", ("error",)),
    "interpreted_fallbacks": ("interpreted_fallbacks", ()),
}

# The results of dra_extender_eviction_pod_deletions_total, and how many deleted rules keep their series.
EVICTION_RESULTS = ("ok", "gone", "refused", "error")
GONE_RULE_SERIES = 100

# kube-scheduler's extender latency shape: exponential from 0.1 ms.
_LATENCY_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def served_api_versions() -> str:
    """The Kubernetes API versions the extender reads, for dra_extender_build_info (comma-separated)."""
    from tracker.resources import CORE_RESOURCES, OWN_PATCHES, OWN_RULES, UPSTREAM_RULE_VERSIONS, upstream_rules

    resources = [*CORE_RESOURCES, OWN_RULES, OWN_PATCHES, *(upstream_rules(v) for v in UPSTREAM_RULE_VERSIONS)]
    return ",".join(sorted({r.api_version for r in resources}))


class Metrics:
    def __init__(self, version: str = "unknown", *, verbs: bool = True, controllers: bool = True) -> None:
        """`verbs` / `controllers`: whether this process runs them; the other part's series are kept off /metrics
        (their objects exist, unregistered, so a call on them is harmless)."""
        self.registry = CollectorRegistry()
        self._verbs_registry = self.registry if verbs else None
        self._controllers_registry = self.registry if controllers else None
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds, start time
        # In this order: it is the order of /metrics.
        self._declare_build_info(version)
        self._declare_verbs()
        self._declare_waits()
        self._declare_cel()
        self._declare_evictions()
        self._declare_health()
        self._declare_device_health()
        self._verb = {
            v: (self.latency.labels(v), self.requests.labels(v, "ok"), self.requests.labels(v, "error"))
            for v in (("filter", "prioritize", "bind") if verbs else ())
        }
        self._tracker_event_counts: dict[tuple[str, str], Counter] = {}  # (kind, type) -> its child of tracker_events
        self._leadership: dict[str, Callable[[], bool]] = {}  # role -> its gate's may_write (lead_by)
        self._gone_rules: OrderedDict[str, None] = OrderedDict()  # eviction `rule` labels of deleted rules, oldest first
        self.gone_rule_series = GONE_RULE_SERIES

    def _declare_build_info(self, version: str) -> None:
        """Which build this is: version, Python, the API versions read."""
        r = self.registry
        self.build_info = Gauge(
            "dra_extender_build_info",
            "Always 1: the extender's version, its Python, and the Kubernetes API versions it reads.",
            ["version", "python", "kubernetes_api_versions"],
            registry=r,
        )
        self.build_info.labels(version, platform.python_version(), served_api_versions()).set(1)

    def _declare_verbs(self) -> None:
        """The verbs, their outcomes, and what the tracker holds."""
        r = self.registry
        v = self._verbs_registry
        self.requests = Counter("dra_extender_requests", "Extender requests by verb and result.", ["verb", "result"], registry=v)
        self.latency = Histogram(
            "dra_extender_request_duration_seconds",
            "Extender request latency by verb.",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=v,
        )
        self.outcomes = Counter(
            "dra_extender_allocation_outcomes",
            "Per-node allocation searches by outcome (ok or the failure reason); verdicts served from the cache are not counted.",
            ["reason"],
            registry=v,
        )
        self.binds = Counter("dra_extender_binds", "Bind attempts by result.", ["result"], registry=v)
        self.foreign_allocations = Counter(
            "dra_extender_foreign_allocations",
            "Claim allocations written by another allocator while this process led (one allocator per pool).",
            registry=v,
        )
        self.devices = Gauge("dra_extender_devices", "Published devices by state.", ["state"], registry=v)
        self.tracker_events = Counter("dra_extender_tracker_events", "Object events applied to the tracker.", ["kind", "type"], registry=r)
        self.ready = Gauge("dra_extender_ready", "1 once the initial state is complete.", registry=r)
        self.leader = Gauge(
            "dra_extender_leader",
            "1 while this process may write, by role: verbs (serve allocates at /bind), controllers (evict and write rules).",
            ["role"],
            registry=r,
        )
        # Both series of the roles this process runs exist from the start (at 0), so an alert on "no leader" sees a
        # follower's 0 and `all` keeps its two leaderships apart.
        for role, runs in (("verbs", self._verbs_registry), ("controllers", self._controllers_registry)):
            if runs is not None:
                self.leader.labels(role).set(0)
        self.followed_lease_stale = Gauge(
            "dra_extender_followed_lease_stale",
            "1 while the Lease this sidecar follows is missing or not renewed by anyone for longer than its duration "
            "(a wrong Lease name, or no kube-scheduler leads); this sidecar then never allocates.",
            registry=v,  # serve's alone: the controllers hold their own Lease (dra_extender_leader{role="controllers"})
        )
        self.foreign_scheduler_pods = Counter(
            "dra_extender_foreign_scheduler_pods",
            "Pods using DRA devices whose schedulerName is not a profile this extender serves: another scheduler "
            "allocates their devices beside it (counted once per pod by the leader; each gets a Warning Event).",
            registry=self._controllers_registry,
        )
        self.object_problems = Counter(
            "dra_extender_object_problems",
            "Faulty objects and failing rule/patch selectors, by kind.",
            ["kind"],
            registry=r,
        )
        self.duplicate_share_ids = Counter(
            "dra_extender_duplicate_share_ids",
            "Claims whose allocation repeats a shareID another result uses on the same device (each counts as its own share).",
            registry=r,
        )
        self.counters_lowered = Counter(
            "dra_extender_counters_lowered",
            "Held devices (per claim) whose ResourceSlice now says they consume less of their pool's counters than they "
            "were allocated with; the allocation's figure stays charged until the claim is deallocated.",
            registry=r,
        )

    def _declare_waits(self) -> None:
        """The waits of /filter and the nudges that requeue pods."""
        r = self._verbs_registry
        self.placement_wait = Histogram(
            "dra_extender_placement_wait_seconds",
            "How long a /filter waited for the /bind of pods placed before it (the scheduler binds asynchronously).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.bind_backlog_wait = Histogram(
            "dra_extender_bind_backlog_wait_seconds",
            "How long a /filter waited for the binds in progress to fall below --max-binds-in-flight.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.binds_in_flight = Gauge(
            "dra_extender_binds_in_flight",
            "/bind calls in progress (deciding, writing claims, creating the Binding).",
            registry=r,
        )
        self.placement_waits_expired = Counter(
            "dra_extender_placement_waits_expired",
            "Pods that passed /filter but whose /bind did not arrive within --placement-wait.",
            registry=r,
        )
        self.placement_nodes_withheld = Counter(
            "dra_extender_placement_nodes_withheld",
            "Nodes /filter left out because a pod placed before, whose /bind had not come yet, might take their devices.",
            registry=r,
        )
        self.claim_wait = Histogram(
            "dra_extender_claim_wait_seconds",
            "How long a /filter waited for a claim that kube-controller-manager had not created yet.",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge(
            "dra_extender_inflight_devices", "Devices chosen at /bind whose allocation is still being written.", registry=r
        )
        self.requeues = Counter(
            "dra_extender_requeue_nudges",
            "Pending pods nudged so kube-scheduler retries them after devices became usable, by result.",
            ["result"],
            registry=r,
        )

    def _declare_cel(self) -> None:
        """The CEL cache and evaluations; every labelled series exists from the start."""
        r = self.registry
        self.cel_counters = {
            "lookups": Counter(
                "dra_extender_cel_cache_lookups",
                "CEL results looked up in the per-device cache, by result (hit, miss).",
                ["result"],
                registry=r,
            ),
            "evaluations": Counter("dra_extender_cel_evaluations", "CEL selector evaluations run (cache misses).", registry=r),
            "evaluation_errors": Counter(
                "dra_extender_cel_evaluation_errors", "CEL evaluations that ended in a runtime error (or the cost limit).", registry=r
            ),
            "compilations": Counter(
                "dra_extender_cel_compilations", "CEL expressions compiled, by result (ok, error).", ["result"], registry=r
            ),
            "interpreted_fallbacks": Counter(
                "dra_extender_cel_interpreted_fallbacks",
                "Compiled CEL expressions that run in celpy's interpreter (slower) because the compiler does not cover them.",
                registry=r,
            ),
        }
        self._cel_seen: dict[str, int] = {}
        for name, labels in _CEL_COUNTERS.values():  # every series exists from the start, at 0
            if labels:
                self.cel_counters[name].labels(*labels)
        self.cel_cached_devices = Gauge("dra_extender_cel_cache_devices", "Devices with cached CEL results.", registry=r)
        self.cel_cached_results = Gauge("dra_extender_cel_cache_results", "Cached CEL results (device x expression).", registry=r)

    def _declare_evictions(self) -> None:
        """NoExecute and NoUse evictions, and volume rejections (the one series of /filter here)."""
        r = self._controllers_registry
        self.eviction_deletions = Counter(
            "dra_extender_eviction_pod_deletions",
            (
                "Pods deleted or evicted for NoExecute device taints, by rule (or slice) and result; "
                f"a deleted rule's series go once {GONE_RULE_SERIES} rules were deleted after it."
            ),
            ["rule", "result"],
            registry=r,
        )
        self.volume_rejections = Counter(
            "dra_extender_volume_rejections",
            "/filter calls that fit no node because of a volume taint, by effect (Malformed: an unreadable annotation).",
            ["effect"],
            registry=self._verbs_registry,
        )
        self.volume_evictions = Counter(
            "dra_extender_volume_evictions",
            "Pods deleted or evicted for NoUse volume taints, by result.",
            ["result"],
            registry=r,
        )
        self.eviction_latency = Histogram(
            "dra_extender_eviction_pod_deletion_duration_seconds",
            "From the taint's timeAdded to the pod's deletion (tolerationSeconds included).",
            buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 300, 600, 1800, 3600),
            registry=r,
        )
        self.evictions_pending = Gauge("dra_extender_eviction_pending_pods", "Pods the eviction controller has yet to evict.", registry=r)
        self.eviction_oldest_due = Gauge(
            "dra_extender_eviction_oldest_due_timestamp_seconds",
            "When the earliest pending eviction fell due (its tolerationSeconds over), 0 when none is pending: "
            "time() minus it is how long an eviction is overdue (a PodDisruptionBudget, failing deletes, a stuck leader).",
            registry=r,
        )

    def _declare_device_health(self) -> None:
        """DeviceHealthPolicy: signals taken, devices per rung, guard trips, webhook deliveries (controllers/health/)."""
        r = self._controllers_registry
        self.health_signals = Counter(
            "dra_extender_health_signals",
            "Health signals by policy and outcome (firing, resolved, repeat, unmatched, unselected, no_rule).",
            ["policy", "outcome"],
            registry=r,
        )
        self.health_devices = Gauge(
            "dra_extender_health_devices", "Devices a health rule holds, by rung effect.", ["policy", "rule", "effect"], registry=r
        )
        self.health_guard_waiting = Gauge(
            "dra_extender_health_guard_waiting_devices",
            "Devices a health rule's guard holds below NoExecute.",
            ["policy", "rule"],
            registry=r,
        )
        self.health_guard_trips = Counter(
            "dra_extender_health_guard_trips", "Times a health rule's guard held a device below NoExecute.", ["policy", "rule"], registry=r
        )
        self.health_invalid_policy = Gauge(
            "dra_extender_health_invalid_policy",
            "1 for a DeviceHealthPolicy the controller cannot act on (a faulty field, a selector that fails), else 0.",
            ["policy"],
            registry=r,
        )
        self.health_deliveries = Histogram(
            "dra_extender_health_delivery_duration_seconds",
            "Alert webhook deliveries by HTTP status, from the body read to the answer.",
            ["code"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def _declare_health(self) -> None:
        """The event loop and each kind's freshness."""
        r = self.registry
        self.loop_stall = Gauge(
            "dra_extender_event_loop_stall_seconds",
            "Seconds since the main event loop last turned (beyond its heartbeat period); /livez fails past the threshold.",
            registry=r,
        )
        self.source_last_sync = Gauge(
            "dra_extender_source_last_sync_timestamp_seconds",
            "When the view of a kind was last known to match the source (a list, a watch event or bookmark, or an open watch).",
            ["kind"],
            registry=r,
        )
        self.source_errors = Counter(
            "dra_extender_source_errors",
            "Failed lists and watches of a kind.",
            ["kind"],
            registry=r,
        )
        self._source_errors_seen: dict[str, int] = {}
        self.source_stale = Gauge(
            "dra_extender_source_stale",
            "1 while no list or watch of a kind has succeeded for longer than the staleness threshold.",
            ["kind"],
            registry=r,
        )
        self.source_staleness = Gauge(
            "dra_extender_source_staleness_seconds",
            "Seconds since the view of a kind was last known to match the source (0 while its watch is open).",
            ["kind"],
            registry=r,
        )

    def object_problem(self, kind: str, reason: str) -> None:
        """A faulty object reported (a Warning Event): counted by kind, and by the reasons that have their own metric."""
        self.object_problems.labels(kind).inc()
        if reason == DUPLICATE_SHARE_ID:
            self.duplicate_share_ids.inc()
        elif reason == COUNTERS_LOWERED:
            self.counters_lowered.inc()

    def lead_by(self, role: str, may_write: Callable[[], bool]) -> None:
        """Where refresh_leaders reads whether this process leads for `role`: `verbs` (serve's followed or elected Lease)
        or `controllers` (their own Lease); `all` has both."""
        self._leadership[role] = may_write

    def refresh_leaders(self) -> None:
        """On the main loop: dra_extender_leader of every role this process runs."""
        for role, may_write in self._leadership.items():
            self.leader.labels(role).set(1 if may_write() else 0)

    def observe(self, verb: str, seconds: float, ok: bool) -> None:
        hist, good, bad = self._verb[verb]
        hist.observe(seconds)
        (good if ok else bad).inc()

    def eviction_deleted(self, source: str, result: str) -> None:
        """A pod deleted (or not) for a taint from `source` (a rule's `DeviceTaintRule/<group>/<name>`, `slice`, `volume`)."""
        self.eviction_deletions.labels(source, result).inc()
        self._gone_rules.pop(source, None)  # a rule of that name is back

    def eviction_rule_gone(self, source: str) -> None:
        """A rule was deleted: its series stay for the `gone_rule_series` most recently deleted rules, then go.

        Rules come and go all the time (the health controller makes one per
        broken device), so a series per rule ever seen would grow without
        bound; keeping the recent ones lets a scrape after the deletion
        still see the rule's last evictions.
        """
        gone = self._gone_rules
        gone[source] = None
        gone.move_to_end(source)
        while len(gone) > self.gone_rule_series:
            old, _ = gone.popitem(last=False)
            for result in EVICTION_RESULTS:
                with contextlib.suppress(KeyError):  # a result never counted for it (prometheus_client < 0.21 raises)
                    self.eviction_deletions.remove(old, result)

    def tracker_event(self, kind: str, event_type: str) -> None:
        """One event applied to the tracker: its labelled child is looked up once per (kind, type), not per event (~20 µs each)."""
        child = self._tracker_event_counts.get((kind, event_type))
        if child is None:
            child = self._tracker_event_counts[(kind, event_type)] = self.tracker_events.labels(kind, event_type)
        child.inc()

    def set_source_status(self, status: dict[str, dict[str, float | int | bool]]) -> None:
        """Per kind: {last_sync, errors, stale, staleness_seconds}, as tracker sources report it."""
        for kind, st in status.items():
            self.source_last_sync.labels(kind).set(float(st.get("last_sync", 0.0)))
            errors = int(st.get("errors", 0))
            counter = self.source_errors.labels(kind)
            if errors > self._source_errors_seen.get(kind, 0):
                counter.inc(errors - self._source_errors_seen.get(kind, 0))
            self._source_errors_seen[kind] = errors
            self.source_stale.labels(kind).set(1.0 if st.get("stale") else 0.0)
            self.source_staleness.labels(kind).set(float(st.get("staleness_seconds", 0.0)))

    def set_cel_stats(self, stats: dict[str, int]) -> None:
        """The CEL engine's statistics: cumulative ones advance counters (by what they grew), sizes set gauges."""
        for key, (name, labels) in _CEL_COUNTERS.items():
            value = int(stats.get(key, 0))
            grown = value - self._cel_seen.get(key, 0)
            if grown > 0:
                counter = self.cel_counters[name]
                (counter.labels(*labels) if labels else counter).inc(grown)
            self._cel_seen[key] = value
        self.cel_cached_devices.set(stats.get("cached_devices", 0))
        self.cel_cached_results.set(stats.get("cached_results", 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
