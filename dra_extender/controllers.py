"""`dra-extender controllers`: the eviction controller, the device-health controller (with its alert
receiver) and the foreign-pod check, in their own process: their own informers over the tracker, their
own Lease (one name whatever the mode, tracker.apiserver.leadership.CONTROLLERS_LEASE), their own
/livez, /readyz and /metrics. Nothing here runs on kube-scheduler's path.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from dra_extender.process import (
    Process,
    UsageError,
    add_log_flags,
    add_request_limit_flags,
    add_source_flags,
    bind_listeners,
    check_body_limit,
    parse_hostport,
    pick_source,
    tune_runtime,
    version,
)
from tracker.leadership_gate import LeadershipGate

if TYPE_CHECKING:
    from controllers.foreign_pods import ForeignSchedulerPods
    from controllers.health.wiring import HealthSetup
    from tracker.apiserver.leadership import Leadership
    from tracker.apiserver.source import ApiSource
    from tracker.leadership_gate import MayWrite

log = logging.getLogger("dra_extender")

DEFAULT_LISTEN = "0.0.0.0:8091"


def add_flags(p: argparse.ArgumentParser) -> None:
    """`controllers`' flags, in the order of `controllers --help` (and of docs/reference.md)."""
    add_source_flags(p)
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="/livez, /readyz and /metrics (nothing else is served here; default %(default)s)",
    )
    add_log_flags(p)
    lead = p.add_mutually_exclusive_group()
    lead.add_argument(
        "--leader-elect",
        action="store_true",
        help="take part in the election on the Lease dra-extender-controllers in --lease-namespace (several replicas)",
    )
    lead.add_argument(
        "--standalone",
        action="store_true",
        help="always leader, without a Lease: this process is the only one evicting and writing health rules for the cluster",
    )
    lead.add_argument(
        "--read-only",
        action="store_true",
        help="never write to the cluster: no evictions, no rules, no Events (to look at the controllers' logs and metrics)",
    )
    add_controller_flags(p)
    add_request_limit_flags(p.add_argument_group("limits (hostile input and outages)"))


def add_controller_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the controllers themselves (also `all`'s): their Lease's namespace, eviction, the foreign-pod check, health."""
    from controllers.foreign_pods import add_flags as add_foreign_flags
    from controllers.health.wiring import add_flags as add_health_flags

    p.add_argument(
        "--lease-namespace",
        metavar="NAMESPACE",
        help="where the controllers' Lease dra-extender-controllers lives (default: the pod's namespace, else default)",
    )
    p.add_argument("--no-eviction", action="store_true", help="do not run the NoExecute eviction controller")
    p.add_argument("--evict-upstream", action="store_true", help="also evict for upstream rules and driver taints")
    p.add_argument(
        "--eviction-mode",
        choices=("delete", "evict"),
        default="delete",
        help="delete pods as upstream's taint manager does, or evict them through the Eviction API, which honours "
        "PodDisruptionBudgets (default %(default)s)",
    )
    add_foreign_flags(p)
    add_health_flags(p)


LEADERSHIP_CHOICE = (
    "pass --leader-elect (the chart's replicas: one leads, on the Lease dra-extender-controllers), --standalone (this "
    "process is the cluster's only controllers process) or --read-only (look without writing)"
)


def elect(args: argparse.Namespace, cluster: ApiSource) -> Leadership:
    """The controllers' election: the one Lease CONTROLLERS_LEASE in --lease-namespace (default the pod's)."""
    from tracker.apiserver.leadership import CONTROLLERS_LEASE, Leadership, pod_namespace

    chosen = Leadership.elect(cluster, namespace=args.lease_namespace or pod_namespace(), name=CONTROLLERS_LEASE)
    log.info("electing the controllers' leader", extra={"lease": f"{chosen.namespace}/{chosen.name}"})
    return chosen


def leadership(args: argparse.Namespace, cluster: ApiSource | None) -> Leadership | None:
    """`controllers`: --leader-elect on the controllers' Lease; a cluster needs a choice (an unconfigured process
    would silently evict beside the chart's controllers)."""
    if cluster is None:
        if args.leader_elect:
            raise UsageError("--leader-elect needs a cluster, not --source")
        return None
    if not (args.leader_elect or args.standalone or args.read_only):
        raise UsageError(
            f"no leadership choice: against a cluster this process would evict and write rules beside any other; {LEADERSHIP_CHOICE}"
        )
    return elect(args, cluster) if args.leader_elect else None


def health_setup(args: argparse.Namespace, cluster: ApiSource | None) -> HealthSetup | None:
    """The device health controller and its alert receiver (controllers/health/wiring.py); a bad flag is a usage error."""
    from controllers.health.wiring import prepare

    try:
        return prepare(args, cluster, parse_hostport)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _foreign_pods(proc: Process, gate: MayWrite) -> ForeignSchedulerPods | None:
    """Flags DRA pods of schedulers other than the profiles served (built before the source runs: it sees every pod)."""
    from controllers.foreign_pods import ForeignSchedulerPods, profiles_from
    from tracker.apiserver.leadership import SchedulerConfigError

    if proc.events is None:  # --read-only tells nobody
        return None
    args = proc.args
    try:
        profiles = profiles_from(args)
    except SchedulerConfigError as e:
        raise UsageError(str(e)) from None
    if profiles is None:
        log.info("DRA pods of other schedulers are not checked: pass --scheduler-name to name this extender's profiles")
        return None
    return ForeignSchedulerPods(
        proc.state, proc.metrics, proc.events, profiles=profiles, excluded=args.webhook_excluded_namespace or (), leadership=gate
    )


def add_controllers(proc: Process, gate: LeadershipGate, health: HealthSetup | None) -> None:
    """The eviction controller, the health controller (its receiver's listener) and the foreign-pod check on `proc`.

    Built before the source runs, so each sees every object's first event.
    """
    args = proc.args
    proc.metrics.lead_by("controllers", gate.may_write)
    if args.read_only:
        log.info("read-only (--read-only): no evictions, no health rules, no Events, no health leader label on the own pod")
    elif not args.no_eviction:
        from controllers.eviction import EvictionController, Ownership, Settings

        eviction = EvictionController(
            proc.state,
            proc.source,
            Settings(mode=args.eviction_mode, ownership=Ownership(evict_upstream=args.evict_upstream)),
            leadership=gate,
            metrics=proc.metrics,
        )
        proc.background.append(("eviction", eviction.run))
    else:
        log.info("NoExecute evictions off (--no-eviction)")
    if health is not None:
        health.start(proc.state, gate, proc.metrics)
        proc.background += health.background
        proc.apps += health.apps(proc.bridge, proc.limits)
        proc.sockets += health.sockets
    foreign = _foreign_pods(proc, gate)
    if foreign is not None:
        proc.background.append(("foreign-pods", foreign.run))


async def run_controllers(args: argparse.Namespace) -> int:
    from serving.http_thread import Listener
    from serving.metrics import Metrics
    from serving.probes import probes_app

    tune_runtime()
    listen = parse_hostport(args.listen, "--listen")
    check_body_limit(args)
    picked = pick_source(args)
    lead = leadership(args, picked.cluster)
    sockets = bind_listeners((listen, "--listen"))
    health = health_setup(args, picked.cluster)
    proc = Process.build(args, picked, Metrics(version(), verbs=False))
    proc.sockets += sockets
    await proc.connect()
    gate = LeadershipGate(lead, read_only=args.read_only)
    add_controllers(proc, gate, health)
    if lead is not None:
        proc.background.append(("controllers-leadership", lead.run))
    state, metrics, cluster = proc.state, proc.metrics, proc.cluster

    def refresh_gauges() -> None:
        """On the main loop: the gauges that read the state and the source."""
        metrics.refresh_leaders()
        metrics.set_cel_stats(state.cel.stats)
        if cluster is not None:
            metrics.set_source_status(cluster.sync_status())

    app = probes_app(metrics, proc.bridge, not_ready=state.not_ready, refresh_gauges=refresh_gauges)
    proc.apps.insert(0, Listener(app, *listen))
    log.info(
        "starting dra-extender controllers", extra={"command": "controllers", "source": proc.source.description, "listen": args.listen}
    )
    return await proc.run()
