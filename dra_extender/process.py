"""What every long-running command shares: flags for the source and the logs, the source, the tracker's
state, the runtime tuning, the signals and the ordered shutdown.

`serve` (dra_extender/serve.py), `controllers` (dra_extender/controllers.py) and `all` (both in one
process, dra_extender/combined.py) each build their parts on a `Process` and hand them to `run`.
"""

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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving import arg_types

if TYPE_CHECKING:
    import socket

    from allocator.cel import CelEnvironment
    from serving.http_thread import Limits, Listener, LoopBridge
    from serving.metrics import Metrics
    from tracker.apiserver.source import ApiSource
    from tracker.k8s_events import EventRecorder
    from tracker.source import Source
    from tracker.state import ClusterState, Problem

log = logging.getLogger("dra_extender")

SWITCH_INTERVAL = 0.0005  # seconds; see tune_runtime()
# The cyclic collector's thresholds (Python's default: 700, 10, 10); see tune_runtime() and docs/dependencies.md#pythons-garbage-collector.
GC_THRESHOLDS = (10_000, 10, 10)
# Tasks named so are stopped after every other background task: a Lease is released only once nothing of this process writes.
LEADERSHIP_TASKS = frozenset({"leadership", "controllers-leadership"})
# Each step of the shutdown (controllers, leadership, source) gets this long to finish its clean-up
# writes: the three fit in a pod's default 30 s grace period with room for the HTTP thread.
SHUTDOWN_STEP_SECONDS = 8.0

Background = list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]]


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


def add_source_flags(p: argparse.ArgumentParser) -> None:
    """Where the cluster comes from."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--source", metavar="DIR", help="a directory of Kubernetes manifests instead of a cluster")
    src.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig of the cluster to serve (default: in-cluster if in a pod, else $KUBECONFIG, ~/.kube/config)",
    )
    src.add_argument("--in-cluster", action="store_true", help="use the pod's service account")


def add_log_flags(p: argparse.ArgumentParser) -> None:
    """How the process logs."""
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text for people, json (klog's keys) for collectors (default %(default)s)",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="debug adds every /filter decision with its per-node reasons (default %(default)s)",
    )


def add_request_limit_flags(hard: argparse._ArgumentGroup) -> None:
    """Limits on every HTTP request this process serves, and on the liveness of its loop and its source."""
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


@dataclass(frozen=True, slots=True)
class PickedSource:
    """The source to serve from and, in cluster mode, the API server behind it.

    Leadership (Lease requests), the requeuer (pod patches), the health
    controller and the per-kind sync status need a cluster; a manifest
    directory has none, so `cluster` is None there.
    """

    source: Source
    cluster: ApiSource | None = None


def pick_source(args: argparse.Namespace) -> PickedSource:
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
    cluster = ApiSource(
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        stale_threshold=args.source_stale_threshold,
        read_only=args.read_only,
        program=f"dra-extender-{args.command}",
    )
    return PickedSource(cluster, cluster)


def bind_listeners(*addresses: tuple[tuple[str, int], str]) -> list[socket.socket]:
    """Before anything starts: an address in use is a one-line usage error (naming its flag), not a dying thread."""
    from serving.http_thread import BindError, bind_socket

    try:
        return [bind_socket(host, port, flag) for (host, port), flag in addresses]
    except BindError as e:
        raise UsageError(str(e)) from None


def check_body_limit(args: argparse.Namespace) -> None:
    if args.max_body_bytes <= 0:
        raise UsageError(f"--max-body-bytes: must be positive, got {args.max_body_bytes}")


def tune_runtime() -> None:
    """The interpreter settings every long-running command serves with."""
    # Two threads run Python here (HTTP and the main loop): with the default 5 ms switch
    # interval a request handed from one to the other can wait a whole interval for the GIL.
    sys.setswitchinterval(SWITCH_INTERVAL)
    # A watch event is a tree of dicts: at the default threshold (700) a young collection ran about once per
    # event, and a full one, over everything built since the lists were frozen, every hundred of those.
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass
class Process:
    """The parts one process shares between its components: the source, the tracker's state, metrics, Events."""

    args: argparse.Namespace
    source: Source
    cluster: ApiSource | None
    cel: CelEnvironment
    metrics: Metrics
    events: EventRecorder | None  # None: --read-only tells nobody
    state: ClusterState
    bridge: LoopBridge
    limits: Limits
    apps: list[Listener] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)
    background: Background = field(default_factory=list)

    @classmethod
    def build(cls, args: argparse.Namespace, picked: PickedSource, metrics: Metrics) -> Process:
        """Everything but the components; built before the source runs, so each component sees every first event."""
        from allocator.cel import CelEnvironment
        from serving.http_thread import Limits, LoopBridge
        from tracker.k8s_events import EventRecorder

        cel = CelEnvironment()
        events = None if args.read_only else EventRecorder(picked.source)
        bridge = LoopBridge(asyncio.get_running_loop(), args.livez_stall_threshold)
        limits = Limits(max_body_bytes=args.max_body_bytes, header_timeout=args.header_timeout, body_timeout=args.body_timeout)
        state = cluster_state(args, cel, metrics, events)
        return cls(
            args, picked.source, picked.cluster, cel, metrics, events, state, bridge, limits, background=[("heartbeat", bridge.heartbeat)]
        )

    async def connect(self) -> None:
        """The kubeconfig (or the pod's configuration) loaded now: a fault is a usage error naming the flag and the file."""
        if self.cluster is None:
            return
        from tracker.apiserver.kubeconfig import KubeconfigError

        args = self.args
        where = "--kubeconfig" if args.kubeconfig else ("$KUBECONFIG" if os.environ.get("KUBECONFIG") else "default kubeconfig")
        try:
            await self.cluster.connect(where)
        except KubeconfigError as e:
            raise UsageError(str(e)) from None

    async def run(self) -> int:
        """Serve until a signal or the first task that ends; the exit code."""
        from serving.http_thread import HttpServers

        http = HttpServers(self.apps, self.limits, self.sockets)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Event loops without signal support (Windows) raise here; Ctrl-C then ends the run as KeyboardInterrupt.
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        return await run_until_stopped(stop, lambda: self.source.run(self.state), http, self.background)


def cluster_state(args: argparse.Namespace, cel: CelEnvironment, metrics: Metrics, events: EventRecorder | None) -> ClusterState:
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


def always(value: bool) -> Callable[[], bool]:
    return lambda: value


async def run_until_stopped(
    stop: asyncio.Event,
    run_source: Callable[[], Coroutine[Any, Any, None]],
    http: Any,
    background: Background,
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
    leadership = [t for t in extra_tasks if t.get_name() in LEADERSHIP_TASKS]
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
