"""`dra-extender serve`: wire a source, the tracker, the allocator and HTTP together."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from allocator.features import Features
from serving import arg_types

if TYPE_CHECKING:
    import socket

    from allocator.cel import CelEnvironment
    from controllers.foreign_pods import ForeignSchedulerPods
    from controllers.health.wiring import HealthSetup
    from extender.service import Service
    from serving.http_thread import HttpThread, Limits, Listener, LoopBridge
    from serving.metrics import Metrics
    from tracker.apiserver.leadership import Leadership
    from tracker.apiserver.source import ApiSource
    from tracker.k8s_events import EventRecorder
    from tracker.leadership_gate import LeadershipGate, MayWrite
    from tracker.source import Source
    from tracker.state import ClusterState, Problem

DEFAULT_OFFER_NODES = 100  # as extender.service.DEFAULT_OFFER_NODES (not imported: the CLI starts without the service's imports)

log = logging.getLogger("dra_extender")


SWITCH_INTERVAL = 0.0005  # seconds; see serve()
# The cyclic collector's thresholds (Python's default: 700, 10, 10); see serve() and docs/dependencies.md#pythons-garbage-collector.
GC_THRESHOLDS = (10_000, 10, 10)
LEADERSHIP_TASK = "leadership"
# Each step of the shutdown (controllers, leadership, source) gets this long to finish its clean-up
# writes: the three fit in a pod's default 30 s grace period with room for the HTTP thread.
SHUTDOWN_STEP_SECONDS = 8.0


class UsageError(Exception):
    """Bad flags or environment: exit 2 with the message."""


def parse_hostport(value: str, flag: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(f"{flag}: expected HOST:PORT (e.g. 127.0.0.1:8888), got {value!r}")
    host = host.strip("[]")
    p = int(port)
    if not 0 <= p <= 65535:
        raise UsageError(f"{flag}: port {p} is out of range")
    return host, p


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable only from this machine (or pod)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def version() -> str:
    """The installed package's version ("unknown" when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("dra-extender")
    except PackageNotFoundError:  # pragma: no cover - the tests run the installed package
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from controllers.health.wiring import add_flags as add_health_flags

    parser = argparse.ArgumentParser(
        prog="dra-extender",
        description="kube-scheduler extender for DRA device taints, tolerations and device attribute patches",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()} (Python {sys.version.split()[0]})")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the extender verbs (filter, prioritize, bind)")
    # In this order: it is the order of `serve --help` (and of docs/reference.md).
    for add in (
        _add_source_flags,
        _add_listen_and_log_flags,
        _add_leadership_flags,
        _add_profile_flags,
        _add_wait_flags,
        _add_feature_flags,
        _add_offer_and_eviction_flags,
        _add_placement_flags,
        _add_limit_flags,
        add_health_flags,
    ):
        add(serve)
    from webhook import add_parser as add_webhook_parser

    add_webhook_parser(sub, parse_hostport)
    return parser


def _add_source_flags(serve: argparse.ArgumentParser) -> None:
    """Where the cluster comes from."""
    src = serve.add_mutually_exclusive_group()
    src.add_argument("--source", metavar="DIR", help="a directory of Kubernetes manifests instead of a cluster")
    src.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig of the cluster to serve (default: in-cluster if in a pod, else $KUBECONFIG, ~/.kube/config)",
    )
    src.add_argument("--in-cluster", action="store_true", help="use the pod's service account")


def _add_listen_and_log_flags(serve: argparse.ArgumentParser) -> None:
    """Where the endpoints are served, and how the process logs."""
    serve.add_argument(
        "--listen",
        default="127.0.0.1:8888",
        metavar="HOST:PORT",
        help="every endpoint: the verbs, /debug, probes, metrics; loopback only unless --allow-non-loopback-listen (default %(default)s)",
    )
    serve.add_argument(
        "--probe-listen", metavar="HOST:PORT", help="additionally serve only /livez, /readyz, /metrics here (default: not served)"
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text for people, json (klog's keys) for collectors (default %(default)s)",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="debug adds every /filter decision with its per-node reasons (default %(default)s)",
    )


def _add_leadership_flags(serve: argparse.ArgumentParser) -> None:
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
        help="always leader, without a Lease: this process is the only one allocating and evicting for the cluster",
    )
    lead.add_argument(
        "--read-only",
        action="store_true",
        help="never write to the cluster: /filter, /prioritize and /debug answer, /bind refuses (not leader), no "
        "eviction, no Events, no requeue patches (to look at a cluster from a workstation)",
    )


def _add_profile_flags(serve: argparse.ArgumentParser) -> None:
    """The scheduler profiles served, so DRA pods of other schedulers are flagged (controllers/foreign_pods.py)."""
    from controllers.foreign_pods import add_flags

    add_flags(serve)


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
        "Kubernetes 1.36 beta DRA features (set each as the cluster's kube-scheduler has its feature gate; on by default, as in 1.36)"
    )
    beta.add_argument(
        "--feature-partitionable-devices",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="DRAPartitionableDevices: shared counters and per-device node selection; off: devices that consume "
        "counters are never allocated (default %(default)s)",
    )
    beta.add_argument(
        "--feature-consumable-capacity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="DRAConsumableCapacity: devices shared by several claims, capacity requests; off: shared results count "
        "as whole devices and claims with capacity requests are refused (default %(default)s)",
    )
    beta.add_argument(
        "--feature-binding-conditions",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="honour device binding conditions: bind a pod only once its devices are ready (DRADeviceBindingConditions; "
        "default %(default)s)",
    )
    beta.add_argument(
        "--feature-extended-resources",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve extended resources backed by DeviceClasses with claims made at /bind (DRAExtendedResource; default %(default)s)",
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


def _add_offer_and_eviction_flags(serve: argparse.ArgumentParser) -> None:
    """How many nodes /filter offers, and the NoExecute eviction controller."""
    serve.add_argument(
        "--offer-nodes",
        type=arg_types.count,
        default=DEFAULT_OFFER_NODES,
        metavar="N",
        help="/filter stops looking once N fitting nodes have the best health (no device with a None-effect taint), and offers those it found "
        "(it starts where the previous /filter stopped); a pod that fits anywhere is never refused. 0 offers every "
        "fitting node (default %(default)s; see docs/kube-scheduler.md)",
    )
    serve.add_argument("--no-eviction", action="store_true", help="do not run the NoExecute eviction controller")
    serve.add_argument("--evict-upstream", action="store_true", help="also evict for upstream rules and driver taints")
    serve.add_argument(
        "--eviction-mode",
        choices=("delete", "evict"),
        default="delete",
        help="delete pods as upstream's taint manager does, or evict them through the Eviction API, which honours "
        "PodDisruptionBudgets (default %(default)s)",
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
    hard.add_argument(
        "--max-body-bytes",
        type=int,
        default=32 * 1024 * 1024,
        metavar="BYTES",
        help="larger request bodies get 413 without being read (default %(default)s)",
    )
    hard.add_argument(
        "--header-timeout",
        type=arg_types.positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="close a connection whose request headers take longer (default %(default)s)",
    )
    hard.add_argument(
        "--body-timeout",
        type=arg_types.positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="answer 408 when a request body takes longer to arrive (default %(default)s)",
    )
    hard.add_argument(
        "--livez-stall-threshold",
        type=arg_types.positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="/livez fails when the event loop has not turned for this long (default %(default)s)",
    )
    hard.add_argument(
        "--source-stale-threshold",
        type=arg_types.positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="a kind is stale (metric, log) after this long without a successful list or watch (default %(default)s)",
    )


def features_from(args: argparse.Namespace) -> Features:
    """The allocator's feature switches from the serve flags."""
    return Features(
        partitionable_devices=args.feature_partitionable_devices,
        consumable_capacity=args.feature_consumable_capacity,
        binding_conditions=args.feature_binding_conditions,
        extended_resources=args.feature_extended_resources,
    )


@dataclass(frozen=True, slots=True)
class PickedSource:
    """The source to serve from and, in cluster mode, the API server behind it.

    Leadership (Lease requests), the requeuer (pod patches) and the per-kind
    sync status need a cluster; a manifest directory has none, so `cluster`
    is None there.
    """

    source: Source
    cluster: ApiSource | None = None


def _pick_source(args: argparse.Namespace) -> PickedSource:
    if args.source:
        directory = Path(args.source)
        if not directory.is_dir():
            raise UsageError(f"--source: {args.source!r} is not a directory")
        from tracker.manifest.source import ManifestSource

        return PickedSource(ManifestSource(directory))
    kubeconfig = args.kubeconfig
    in_cluster = args.in_cluster
    if not kubeconfig and not in_cluster:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            in_cluster = True
        else:
            candidate = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
            first = candidate.split(os.pathsep)[0]
            if first and Path(first).is_file():
                kubeconfig = first
    if not kubeconfig and not in_cluster:
        raise UsageError(
            "no cluster to serve: KUBERNETES_SERVICE_HOST is not set (not in a cluster) and no kubeconfig was "
            "found ($KUBECONFIG, ~/.kube/config); pass --kubeconfig PATH, --in-cluster, or --source DIR "
            "to serve a directory of manifests"
        )
    try:
        from tracker.apiserver.source import ApiSource
    except ImportError as e:  # pragma: no cover - cluster mode ships with the tracker
        raise UsageError(f"cluster mode is unavailable in this build: {e}") from None
    cluster = ApiSource(kubeconfig=kubeconfig, in_cluster=in_cluster, stale_threshold=args.source_stale_threshold, read_only=args.read_only)
    return PickedSource(cluster, cluster)


def _listen_addresses(args: argparse.Namespace) -> tuple[tuple[str, int], tuple[str, int] | None]:
    """--listen (loopback unless allowed) and --probe-listen; --max-body-bytes checked on the way."""
    listen = parse_hostport(args.listen, "--listen")
    if not is_loopback(listen[0]) and not args.allow_non_loopback_listen:
        raise UsageError(
            f"--listen {args.listen}: not a loopback address; it would serve /filter, /prioritize, /bind"
            f"{'' if args.no_debug else ' and /debug/*'} to everyone who can reach it. Use --probe-listen for "
            "probes and metrics, or pass --allow-non-loopback-listen if this is intended"
        )
    if args.max_body_bytes <= 0:
        raise UsageError(f"--max-body-bytes: must be positive, got {args.max_body_bytes}")
    probe = parse_hostport(args.probe_listen, "--probe-listen") if args.probe_listen else None
    return listen, probe


def _bind_sockets(listen: tuple[str, int], probe: tuple[str, int] | None) -> list[socket.socket]:
    """Before anything starts: an address in use is a one-line usage error, not a dying thread."""
    from serving.http_thread import BindError, bind_socket

    try:
        sockets = [bind_socket(*listen, "--listen")]
        if probe is not None:
            sockets.append(bind_socket(*probe, "--probe-listen"))
    except BindError as e:
        raise UsageError(str(e)) from None
    return sockets


def _cluster_state(args: argparse.Namespace, cel: CelEnvironment, metrics: Metrics, events: EventRecorder | None) -> ClusterState:
    """The tracker's state, counting its events and logging device changes; a faulty object is counted, logged and told (events None: --read-only, not told)."""
    from serving.logs import device_change_logger
    from tracker.state import ClusterState

    def on_problem(problem: Problem) -> None:
        metrics.object_problem(problem.kind, problem.reason)
        log.warning("faulty object", extra={"kind": problem.kind, "object": problem.name, "group": problem.group, "err": problem.message})
        if events is not None:
            events.problem(problem)

    state = ClusterState(cel, on_problem=on_problem)
    state.subscribe(lambda e: metrics.tracker_event(e.kind, e.type))
    state.subscribe(device_change_logger(slices_at_info=bool(args.source), ready=lambda: state.ready))
    return state


LEADERSHIP_CHOICE = (
    "pass --scheduler-config PATH or --follow-scheduler-lease NAMESPACE/NAME (sidecar of a kube-scheduler), "
    "--leader-elect (several replicas), --read-only (look without writing, e.g. from a workstation) or "
    "--standalone (this process is the cluster's only allocator)"
)


def _check_leadership_choice(args: argparse.Namespace, cluster: ApiSource | None) -> None:
    """Cluster mode needs a leadership choice: an unconfigured process would silently be a second allocator and evictor."""
    if cluster is None:
        return
    if args.leader_elect or args.follow_scheduler_lease or args.scheduler_config or args.standalone or args.read_only:
        return
    raise UsageError(
        "no leadership choice: against a cluster this process would allocate at /bind and evict beside any other "
        f"dra-extender (e.g. the chart's); {LEADERSHIP_CHOICE}"
    )


def _leadership(args: argparse.Namespace, cluster: ApiSource | None) -> Leadership | None:
    """Leader election or a followed Lease when a lease flag asks for one (a cluster only)."""
    _check_leadership_choice(args, cluster)
    if not (args.leader_elect or args.follow_scheduler_lease or args.scheduler_config):
        return None
    from tracker.apiserver.leadership import Leadership

    if cluster is None:
        raise UsageError("--leader-elect, --follow-scheduler-lease and --scheduler-config need a cluster, not --source")
    try:
        leadership = Leadership.choose(cluster, scheduler_config=args.scheduler_config, follow_scheduler_lease=args.follow_scheduler_lease)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if leadership is not None:
        log.info(
            "following a lease" if leadership.mode == "follow" else "electing a leader",
            extra={"lease": f"{leadership.namespace}/{leadership.name}"},
        )
    return leadership


def _foreign_pods(
    args: argparse.Namespace, state: ClusterState, metrics: Metrics, events: EventRecorder, leadership: MayWrite
) -> ForeignSchedulerPods | None:
    """Flags DRA pods of schedulers other than the profiles served (built before the source runs: it sees every pod)."""
    from controllers.foreign_pods import ForeignSchedulerPods, profiles_from
    from tracker.apiserver.leadership import SchedulerConfigError

    try:
        profiles = profiles_from(args)
    except SchedulerConfigError as e:
        raise UsageError(str(e)) from None
    if profiles is None:
        log.info(
            "DRA pods of other schedulers are not checked: pass --scheduler-name or --scheduler-config to name this extender's profiles"
        )
        return None
    return ForeignSchedulerPods(
        state, metrics, events, profiles=profiles, excluded=args.webhook_excluded_namespace or (), leadership=leadership
    )


async def _connect(cluster: ApiSource, args: argparse.Namespace) -> None:
    """The kubeconfig (or the pod's configuration) loaded now: a fault is a usage error naming the flag and the file."""
    from tracker.apiserver.kubeconfig import KubeconfigError

    where = "--kubeconfig" if args.kubeconfig else ("$KUBECONFIG" if os.environ.get("KUBECONFIG") else "default kubeconfig")
    try:
        await cluster.connect(where)
    except KubeconfigError as e:
        raise UsageError(str(e)) from None


def _gate(args: argparse.Namespace, leadership: Leadership | None) -> LeadershipGate:
    """The one leadership answer every writer asks (tracker/leadership_gate.py): --read-only never; a Lease while held; else always."""
    from tracker.leadership_gate import LeadershipGate

    return LeadershipGate(leadership, read_only=args.read_only)


def _apps(
    args: argparse.Namespace,
    service: Service,
    bridge: LoopBridge,
    limits: Limits,
    addresses: tuple[tuple[str, int], tuple[str, int] | None],
    cluster: ApiSource | None,
    leadership: Leadership | None,
) -> list[Listener]:
    """The HTTP apps with their addresses: the extender's, and the probes' alone on --probe-listen."""
    from extender.app import create_app
    from serving.http_thread import Listener

    listen, probe = addresses
    source_status = cluster.sync_status if cluster is not None else None
    lease_problem = (lambda: leadership.lease_problem) if leadership is not None else None
    apps = [
        Listener(
            create_app(
                service,
                bridge,
                debug=not args.no_debug,
                filter_budget=args.filter_timeout,
                limits=limits,
                source_status=source_status,
                lease_problem=lease_problem,
            ),
            *listen,
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


def _health_setup(args: argparse.Namespace, cluster: ApiSource | None) -> HealthSetup | None:
    """The device health controller and its alert receiver (controllers/health/wiring.py); a bad flag is a usage error."""
    from controllers.health.wiring import prepare

    try:
        return prepare(args, cluster, parse_hostport)
    except ValueError as e:
        raise UsageError(str(e)) from None


async def serve(args: argparse.Namespace) -> int:
    from allocator.allocation import Allocator
    from allocator.cel import CelEnvironment
    from extender.bind.binder import Binder
    from extender.placements import PlacementGate
    from extender.service import Service
    from serving.http_thread import HttpThread, Limits, LoopBridge
    from serving.metrics import Metrics
    from tracker.k8s_events import EventRecorder

    # Two threads run Python here (HTTP and the main loop): with the default 5 ms switch
    # interval a verb handed from one to the other can wait a whole interval for the GIL.
    sys.setswitchinterval(SWITCH_INTERVAL)
    # A watch event is a tree of dicts: at the default threshold (700) a young collection ran about once per
    # event, and a full one, over everything built since the lists were frozen, every hundred of those.
    gc.set_threshold(*GC_THRESHOLDS)
    addresses = _listen_addresses(args)
    picked = _pick_source(args)
    source, cluster = picked.source, picked.cluster
    sockets = _bind_sockets(*addresses)
    health = _health_setup(args, cluster)
    metrics = Metrics(version())
    cel = CelEnvironment()
    events = None if args.read_only else EventRecorder(source)  # --read-only tells nobody
    state = _cluster_state(args, cel, metrics, events)
    leadership = _leadership(args, cluster)
    if cluster is not None:
        await _connect(cluster, args)
    gate = _gate(args, leadership)
    features = features_from(args)
    # The composition root: the parts are built here and handed in.
    binder = Binder(
        state,
        source,
        Allocator(cel, features=features, device_placement=args.device_placement),
        metrics,
        PlacementGate(args.placement_wait),
        leadership=gate,
        timeout=args.bind_timeout,
        features=features,
        binding_timeout=args.binding_timeout,
    )
    eviction = None
    if args.read_only:
        log.info("read-only (--read-only): no allocation at /bind, no evictions, no Events, no requeue patches")
    elif not args.no_eviction:
        from controllers.eviction import EvictionController, Ownership, Settings

        # Built before the source runs, so it sees every object's first event.
        eviction = EvictionController(
            state,
            source,
            Settings(mode=args.eviction_mode, ownership=Ownership(evict_upstream=args.evict_upstream)),
            leadership=gate,
            metrics=metrics,
        )
    else:
        log.info("NoExecute evictions off (--no-eviction)")
    if health is not None:
        health.start(state, gate, metrics)

    foreign = _foreign_pods(args, state, metrics, events, gate) if events is not None else None
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
    )

    loop = asyncio.get_running_loop()
    bridge = LoopBridge(loop, args.livez_stall_threshold)
    limits = Limits(max_body_bytes=args.max_body_bytes, header_timeout=args.header_timeout, body_timeout=args.body_timeout)
    apps = _apps(args, service, bridge, limits, addresses, cluster, leadership)
    if health is not None:
        apps += health.apps(bridge, limits)
        sockets += health.sockets
    http = HttpThread(apps, limits, sockets)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Event loops without signal support (Windows) raise here; Ctrl-C then ends the run as KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    log.info(
        "starting dra-extender",
        extra={"source": source.description, "listen": args.listen, "probe_listen": args.probe_listen or ""},
    )
    background: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [("heartbeat", bridge.heartbeat)]
    if leadership is not None:
        background.append((LEADERSHIP_TASK, leadership.run))
    if requeuer is not None:
        background.append(("requeue", requeuer.run))
    if foreign is not None:
        background.append(("foreign-pods", foreign.run))
    if eviction is not None:
        background.append(("eviction", eviction.run))
    if health is not None:
        background += health.background
    return await _run_until_stopped(stop, lambda: source.run(state), http, background)


async def _run_until_stopped(
    stop: asyncio.Event,
    run_source: Callable[[], Coroutine[Any, Any, None]],
    http: HttpThread,
    background: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]],
) -> int:
    """Run the source, HTTP and the background tasks until a signal or the first of them ends; the exit code."""
    source_task = asyncio.create_task(run_source(), name="source")
    http.start()
    tasks = [asyncio.create_task(http.wait(), name="http")]
    extra_tasks = [asyncio.create_task(run(), name=name) for name, run in background]
    stopper = asyncio.create_task(stop.wait(), name="stop")
    done, _ = await asyncio.wait([stopper, source_task, *tasks, *extra_tasks], return_when=asyncio.FIRST_COMPLETED)
    code = _exit_code(done, stopper)
    log.info("shutting down")
    http.stop()
    # In order, each while the API session is still open (the source closes it when it stops): the
    # controllers (the health label comes off the pod), then leadership (the Lease is released only
    # once nothing of this process writes any more), then the source.
    leadership = [t for t in extra_tasks if t.get_name() == LEADERSHIP_TASK]
    await _stop([t for t in extra_tasks if t not in leadership], done)
    await _stop(leadership, done)
    await _stop([source_task], done)
    await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    return code


async def _stop(tasks: list[asyncio.Task[Any]], done: set[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait for their clean-up (at most SHUTDOWN_STEP_SECONDS); what goes wrong on the way is logged."""
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_STEP_SECONDS)
    for t in pending:
        log.error("task did not stop in time; abandoned", extra={"task": t.get_name(), "timeout_s": SHUTDOWN_STEP_SECONDS})
    for t in tasks:
        if t in done or t in pending or t.cancelled():
            continue  # what ended first was logged by _exit_code
        exc = t.exception()
        if exc is not None:
            log.error("error while stopping", extra={"task": t.get_name()}, exc_info=exc)


def _exit_code(done: set[asyncio.Task[Any]], stopper: asyncio.Task[Any]) -> int:
    """0 when stopped by a signal; otherwise what ended first says: its SystemExit code, or 1 (logged)."""
    code = 0
    for t in done:
        if t is stopper:
            continue
        if t.cancelled():
            continue
        exc = t.exception()
        if isinstance(exc, SystemExit):
            code = int(exc.code or 1)
            log.error("server stopped", extra={"task": t.get_name()})
        elif exc is not None:
            code = 1
            log.error("fatal error", extra={"task": t.get_name()}, exc_info=exc)
        elif t.get_name() == "http":
            code = code or 1
            log.error("HTTP server exited (could it bind its address?)")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from serving.logs import configure

    configure(args.log_format, getattr(logging, args.log_level.upper()))
    try:
        import uvloop

        runner: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    try:
        if args.command == "webhook":
            from webhook import serve_webhook

            return runner(serve_webhook(args, UsageError, parse_hostport))
        return runner(serve(args))
    except UsageError as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
