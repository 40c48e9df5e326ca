"""`dra-extender serve`: the kube-scheduler sidecar. The verbs (/filter, /prioritize, /bind, /debug), the
requeue nudge, and what they need; the controllers run elsewhere (dra_extender/controllers.py)."""

from __future__ import annotations

import argparse
import logging
from dataclasses import fields, replace
from typing import TYPE_CHECKING

from allocator.features import Features
from dra_extender.process import (
    Process,
    UsageError,
    add_log_flags,
    add_request_limit_flags,
    add_source_flags,
    bind_listeners,
    check_body_limit,
    is_loopback,
    parse_hostport,
    pick_source,
    tune_runtime,
    version,
)
from serving import arg_types

if TYPE_CHECKING:
    from extender.service import Service
    from serving.http_thread import Listener
    from tracker.apiserver.leadership import Leadership
    from tracker.apiserver.source import ApiSource
    from tracker.leadership_gate import LeadershipGate

DEFAULT_OFFER_NODES = 100  # as extender.service.DEFAULT_OFFER_NODES (not imported: the CLI starts without the service's imports)

log = logging.getLogger("dra_extender")

Addresses = tuple[tuple[str, int], tuple[str, int] | None]


def add_flags(serve: argparse.ArgumentParser) -> None:
    """`serve`'s flags, in the order of `serve --help` (and of docs/reference.md)."""
    add_source_flags(serve)
    _add_listen_flags(serve)
    add_log_flags(serve)
    add_leadership_flags(serve)
    _add_wait_flags(serve)
    _add_feature_flags(serve)
    _add_offer_flags(serve)
    _add_placement_flags(serve)
    _add_limit_flags(serve)


def _add_listen_flags(serve: argparse.ArgumentParser) -> None:
    """Where the endpoints are served."""
    serve.add_argument(
        "--listen",
        default="127.0.0.1:8888",
        metavar="HOST:PORT",
        help="every endpoint: the verbs, /debug, probes, metrics; loopback only unless --allow-non-loopback-listen (default %(default)s)",
    )
    serve.add_argument(
        "--probe-listen", metavar="HOST:PORT", help="additionally serve only /livez, /readyz, /metrics here (default: not served)"
    )


def add_leadership_flags(serve: argparse.ArgumentParser) -> None:
    """Which replica writes: its own Lease, or the co-located kube-scheduler's."""
    lead = serve.add_mutually_exclusive_group()
    lead.add_argument("--leader-elect", action="store_true", help="take the Lease dra-extender in the pod's namespace")
    lead.add_argument(
        "--follow-scheduler-lease",
        metavar="NAMESPACE/NAME",
        help="lead exactly while the co-located kube-scheduler holds this Lease (it must be the one its "
        "leaderElection names; --scheduler-config reads it from there)",
    )
    lead.add_argument(
        "--scheduler-config",
        metavar="PATH",
        help="the co-located kube-scheduler's KubeSchedulerConfiguration: follow the Lease its leaderElection names "
        "(kube-scheduler's defaults kube-system/kube-scheduler filled in; always leader if leaderElect is false)",
    )
    lead.add_argument(
        "--standalone",
        action="store_true",
        help="always leader, without a Lease: this process is the only one allocating for the cluster",
    )
    lead.add_argument(
        "--read-only",
        action="store_true",
        help="never write to the cluster: /filter, /prioritize and /debug answer, /bind refuses (not leader), no "
        "Events, no requeue patches (to look at a cluster from a workstation)",
    )


def _add_wait_flags(serve: argparse.ArgumentParser) -> None:
    """The time budgets of /bind and the waits of /filter."""
    serve.add_argument(
        "--bind-timeout",
        type=arg_types.short_seconds,
        default=4.0,
        metavar="SECONDS",
        help="answer every /bind within this budget, undoing its writes when it runs out; keep it below the "
        "extender's httpTimeout in the scheduler configuration (default %(default)s)",
    )
    serve.add_argument(
        "--placement-wait",
        type=arg_types.short_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how long a /filter waits for the /bind of a pod that passed an earlier /filter, so it does not "
        "offer that pod's devices again (0 turns the wait off; default %(default)s)",
    )
    serve.add_argument(
        "--max-binds-in-flight",
        type=arg_types.count,
        default=32,
        metavar="N",
        help="while N binds are in progress, a /filter waits (at most --placement-wait) for fewer, so kube-scheduler "
        "starts binds no faster than they complete (0 turns the limit off; default %(default)s)",
    )
    serve.add_argument(
        "--claim-wait",
        type=arg_types.short_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how long a /filter waits for a claim kube-controller-manager has not created from its template yet "
        "(0 rejects at once; default %(default)s)",
    )


def _add_feature_flags(serve: argparse.ArgumentParser) -> None:
    """The DRA feature gates, to be set as the cluster's kube-scheduler has them."""
    beta = serve.add_argument_group(
        "DRA features (set each as the cluster's kube-scheduler has its feature gate; unset: the default of the API "
        "server's minor from its /version, off on 1.34 and 1.35, on from 1.36)"
    )
    beta.add_argument(
        "--feature-partitionable-devices",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="DRAPartitionableDevices: shared counters and per-device node selection; off: devices that consume "
        "counters are never allocated (default: the API server's minor's, off before 1.36)",
    )
    beta.add_argument(
        "--feature-consumable-capacity",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="DRAConsumableCapacity: devices shared by several claims, capacity requests; off: shared results count "
        "as whole devices and claims with capacity requests are refused (default: the API server's minor's, off before 1.36)",
    )
    beta.add_argument(
        "--feature-binding-conditions",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="honour device binding conditions: bind a pod only once its devices are ready (DRADeviceBindingConditions; "
        "default: the API server's minor's, off before 1.36)",
    )
    beta.add_argument(
        "--feature-extended-resources",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve extended resources backed by DeviceClasses with claims made at /bind (DRAExtendedResource; default: the API server's minor's, off before 1.36)",
    )
    beta.add_argument(
        "--binding-timeout",
        type=arg_types.positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="how long after allocation a device's binding conditions may stay pending before the claim is deallocated "
        "(default %(default)s)",
    )


def _add_placement_flags(serve: argparse.ArgumentParser) -> None:
    """Where /prioritize sends pods among nodes that fit equally well, and which devices of a node they get (docs/scoring.md)."""
    serve.add_argument(
        "--node-placement",
        choices=("binpack", "spread"),  # extender.prioritize.scores.NODE_PLACEMENTS (not imported: the CLI starts without it)
        default="binpack",
        help="binpack: prefer the node whose own devices are fullest (whole GPUs and nodes stay free for large claims); "
        "spread: prefer the emptiest. Health comes first either way (default %(default)s; see docs/scoring.md)",
    )
    serve.add_argument(
        "--device-placement",
        choices=("binpack", "spread"),  # allocator.device_order (not imported: the CLI starts without it)
        default="binpack",
        help="which devices of the chosen node a claim gets. binpack: upstream's first fit in pool order (a partition goes "
        "into the first GPU with room); spread: the devices whose counter sets or shared capacity have the most left "
        "first (default %(default)s; see docs/scoring.md)",
    )


def _add_offer_flags(serve: argparse.ArgumentParser) -> None:
    """How many nodes /filter offers."""
    serve.add_argument(
        "--offer-nodes",
        type=arg_types.count,
        default=DEFAULT_OFFER_NODES,
        metavar="N",
        help="/filter stops looking once N fitting nodes have the best health (no device with a None-effect taint), and offers those it found "
        "(it starts where the previous /filter stopped); a pod that fits anywhere is never refused. 0 offers every "
        "fitting node (default %(default)s; see docs/kube-scheduler.md)",
    )


def _add_limit_flags(serve: argparse.ArgumentParser) -> None:
    """Limits against hostile input and outages."""
    hard = serve.add_argument_group("limits (hostile input and outages)")
    hard.add_argument(
        "--allow-non-loopback-listen",
        action="store_true",
        help="allow --listen on an address other than loopback (it serves /bind and /debug to whoever can reach it)",
    )
    hard.add_argument("--no-debug", action="store_true", help="do not serve /debug/* at all")
    hard.add_argument(
        "--filter-timeout",
        type=arg_types.positive_seconds,
        default=3.0,
        metavar="SECONDS",
        help="answer /filter with an Error after this long (kube-scheduler's httpTimeout is 5 s; default %(default)s)",
    )
    add_request_limit_flags(hard)


def features_from(args: argparse.Namespace, defaults: Features) -> Features:
    """The allocator's feature switches: each flag given wins over `defaults` (the minor's)."""
    given = {f.name: getattr(args, f"feature_{f.name}") for f in fields(Features)}
    return replace(defaults, **{name: on for name, on in given.items() if on is not None})


async def chosen_features(args: argparse.Namespace, cluster: ApiSource | None) -> Features:
    """The feature gates of the cluster's minor, read once from its /version, unless every flag says.

    A gate's default differs per minor (allocator/features.py); allocating
    with 1.36's on a 1.34 or 1.35 cluster would use fields its API server
    drops. A /version that does not say is a startup error, not a guess.
    """
    from allocator.features import DEFAULT_FEATURES, defaults_for

    if all(getattr(args, f"feature_{f.name}") is not None for f in fields(Features)):
        features, minor, why = features_from(args, DEFAULT_FEATURES), "", "flags"
    elif cluster is None:
        features, minor, why = features_from(args, DEFAULT_FEATURES), "", "1.36's defaults (--source: no API server to ask)"
    else:
        from tracker.apiserver.discovery import VersionUnknown, server_minor

        try:
            n = await server_minor(cluster)
        except VersionUnknown as e:
            raise UsageError(
                f"{e}: the DRA feature gates' defaults depend on the cluster's minor; retry when the API server "
                "answers, or pass each of --[no-]feature-partitionable-devices, --[no-]feature-consumable-capacity, "
                "--[no-]feature-binding-conditions and --[no-]feature-extended-resources"
            ) from None
        features, minor, why = features_from(args, defaults_for(n)), f"1.{n}", f"the defaults of 1.{n} (/version) and the flags given"
    log.info("DRA feature gates", extra={"kubernetes": minor or "unknown", "gates": features.gates(), "from": why})
    return features


def listen_addresses(args: argparse.Namespace) -> Addresses:
    """--listen (loopback unless allowed) and --probe-listen; --max-body-bytes checked on the way."""
    listen = parse_hostport(args.listen, "--listen")
    if not is_loopback(listen[0]) and not args.allow_non_loopback_listen:
        raise UsageError(
            f"--listen {args.listen}: not a loopback address; it would serve /filter, /prioritize, /bind"
            f"{'' if args.no_debug else ' and /debug/*'} to everyone who can reach it. Use --probe-listen for "
            "probes and metrics, or pass --allow-non-loopback-listen if this is intended"
        )
    check_body_limit(args)
    probe = parse_hostport(args.probe_listen, "--probe-listen") if args.probe_listen else None
    return listen, probe


def bind_addresses(addresses: Addresses) -> list[tuple[tuple[str, int], str]]:
    listen, probe = addresses
    return [(listen, "--listen"), *([(probe, "--probe-listen")] if probe is not None else [])]


LEADERSHIP_CHOICE = (
    "pass --scheduler-config PATH or --follow-scheduler-lease NAMESPACE/NAME (sidecar of a kube-scheduler), "
    "--leader-elect (several replicas), --read-only (look without writing, e.g. from a workstation) or "
    "--standalone (this process is the cluster's only allocator)"
)


def _check_leadership_choice(args: argparse.Namespace, cluster: ApiSource | None) -> None:
    """Cluster mode needs a leadership choice: an unconfigured process would silently be a second allocator."""
    if cluster is None:
        return
    if args.leader_elect or args.follow_scheduler_lease or args.scheduler_config or args.standalone or args.read_only:
        return
    raise UsageError(
        "no leadership choice: against a cluster this process would allocate at /bind beside any other "
        f"dra-extender (e.g. the chart's); {LEADERSHIP_CHOICE}"
    )


def leadership(args: argparse.Namespace, cluster: ApiSource | None) -> Leadership | None:
    """Leader election or a followed Lease when a lease flag asks for one (a cluster only)."""
    _check_leadership_choice(args, cluster)
    if not (args.leader_elect or args.follow_scheduler_lease or args.scheduler_config):
        return None
    from tracker.apiserver.leadership import Leadership

    if cluster is None:
        raise UsageError("--leader-elect, --follow-scheduler-lease and --scheduler-config need a cluster, not --source")
    try:
        chosen = Leadership.choose(cluster, scheduler_config=args.scheduler_config, follow_scheduler_lease=args.follow_scheduler_lease)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if chosen is not None:
        log.info(
            "following a lease" if chosen.mode == "follow" else "electing a leader",
            extra={"lease": f"{chosen.namespace}/{chosen.name}"},
        )
    return chosen


def gate_of(args: argparse.Namespace, lead: Leadership | None) -> LeadershipGate:
    """The one leadership answer every writer asks (tracker/leadership_gate.py): --read-only never; a Lease while held; else always."""
    from tracker.leadership_gate import LeadershipGate

    return LeadershipGate(lead, read_only=args.read_only)


def add_verbs(proc: Process, addresses: Addresses, lead: Leadership | None, features: Features) -> None:
    """The verbs' service (binder, requeuer) and its listeners on `proc`: the sidecar's whole job."""
    from allocator.allocation import Allocator
    from extender.bind.binder import Binder
    from extender.placements import PlacementGate
    from extender.service import Service

    args, state, metrics, source, cluster = proc.args, proc.state, proc.metrics, proc.source, proc.cluster
    gate = gate_of(args, lead)
    # The composition root: the parts are built here and handed in.
    binder = Binder(
        state,
        source,
        Allocator(proc.cel, features=features, device_placement=args.device_placement),
        metrics,
        PlacementGate(args.placement_wait),
        leadership=gate,
        timeout=args.bind_timeout,
        features=features,
        binding_timeout=args.binding_timeout,
    )
    if args.read_only:
        log.info("read-only (--read-only): no allocation at /bind, no Events, no requeue patches")
    requeuer = None
    if cluster is not None and not args.read_only:  # cluster mode: there is a kube-scheduler whose queue to wake
        from extender.requeue import Requeuer

        requeuer = Requeuer(state, cluster.patch_pod, metrics, leadership=gate)
    service = Service(
        state,
        binder,
        metrics,
        requeuer=requeuer,
        claim_wait=args.claim_wait,
        offer_nodes=args.offer_nodes,
        node_placement=args.node_placement,
        max_binds_in_flight=args.max_binds_in_flight,
    )
    proc.apps += _apps(proc, service, addresses, lead)
    if lead is not None:
        proc.background.append(("leadership", lead.run))
    if requeuer is not None:
        proc.background.append(("requeue", requeuer.run))


def _apps(proc: Process, service: Service, addresses: Addresses, lead: Leadership | None) -> list[Listener]:
    """The HTTP apps with their addresses: the extender's, and the probes' alone on --probe-listen.

    The extender's is served on the main loop, its verbs awaited where they
    are read (no hop to another loop and back); the probes' on the HTTP
    thread, so they answer while a verb holds the main loop
    (serving/http_thread.py).
    """
    from extender.app import create_app
    from serving.http_thread import InlineBridge, Listener

    args, bridge, limits = proc.args, proc.bridge, proc.limits
    listen, probe = addresses
    source_status = proc.cluster.sync_status if proc.cluster is not None else None
    lease_problem = (lambda: lead.lease_problem) if lead is not None else None
    apps = [
        Listener(
            create_app(
                service,
                InlineBridge(),
                debug=not args.no_debug,
                filter_budget=args.filter_timeout,
                limits=limits,
                source_status=source_status,
                lease_problem=lease_problem,
            ),
            *listen,
            on_main_loop=True,
        )
    ]
    if probe is not None:
        apps.append(
            Listener(
                create_app(service, bridge, probes_only=True, limits=limits, source_status=source_status, lease_problem=lease_problem),
                *probe,
            )
        )
    return apps


async def serve(args: argparse.Namespace) -> int:
    from serving.metrics import Metrics

    tune_runtime()
    addresses = listen_addresses(args)
    picked = pick_source(args)
    sockets = bind_listeners(*bind_addresses(addresses))
    proc = Process.build(args, picked, Metrics(version(), controllers=False))
    proc.sockets += sockets
    lead = leadership(args, picked.cluster)
    await proc.connect()
    add_verbs(proc, addresses, lead, await chosen_features(args, proc.cluster))
    log.info(
        "starting dra-extender",
        extra={"command": "serve", "source": proc.source.description, "listen": args.listen, "probe_listen": args.probe_listen or ""},
    )
    return await proc.run()
