"""`serve`'s flags for the health controller and the alert receiver, and their setup (one place for cli.py to call)."""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.http_thread import Limits, Listener, LoopBridge
from serving.metrics import Metrics
from tracker.leadership_gate import MayWrite
from tracker.state import ClusterState

if TYPE_CHECKING:  # imported when started: a process without health never loads the controller
    from controllers.health.controller import HealthController
    from tracker.apiserver.source import ApiSource

log = logging.getLogger("dra_extender.health")


def add_flags(serve: argparse.ArgumentParser) -> None:
    """Device health → taints, by DeviceHealthPolicy (docs/health.md)."""
    g = serve.add_argument_group("device health (DeviceHealthPolicy)")
    g.add_argument(
        "--no-health", action="store_true", help="do not run the device health controller (it idles while no DeviceHealthPolicy exists)"
    )
    g.add_argument(
        "--alerts-listen",
        metavar="HOST:PORT",
        help="serve the Alertmanager/Grafana webhook receiver here, POST /alerts (default: not served; needs --alerts-token-file)",
    )
    g.add_argument("--alerts-token-file", metavar="PATH", help="the bearer token every webhook delivery must carry (a mounted Secret)")
    g.add_argument(
        "--alerts-tls-cert-file", metavar="PATH", help="serve the receiver over TLS with this certificate (with --alerts-tls-key-file)"
    )
    g.add_argument("--alerts-tls-key-file", metavar="PATH", help="the TLS certificate's private key")


@dataclass
class HealthSetup:
    """What `serve` starts for device health: the controller's task, and the receiver's app and socket."""

    args: argparse.Namespace
    cluster: ApiSource  # policies, rules and Events live there
    sock: socket.socket | None = None
    listen: tuple[str, int] | None = None
    background: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = field(default_factory=list)
    controller: HealthController | None = None

    def start(self, state: ClusterState, leadership: MayWrite, metrics: Metrics) -> None:
        """Build the controller before the source runs (it subscribes to the tracker's events)."""
        from controllers.health.controller import HealthController

        self.controller = HealthController(state, self.cluster, leadership=leadership, metrics=metrics)
        self.background.append(("health", self.controller.run))
        if self.listen is not None:
            from controllers.health.leader_label import LeaderLabel, own_pod

            pod = own_pod()
            if pod is None:
                log.info("no POD_NAME/POD_NAMESPACE: the own pod is not labelled as the health leader")
            else:
                self.background.append(("health-leader-label", LeaderLabel(self.cluster, *pod, leadership).run))

    def apps(self, bridge: LoopBridge, limits: Limits) -> list[Listener]:
        if self.sock is None or self.controller is None or self.listen is None:
            return []
        from controllers.health.receiver import Receiver

        receiver = Receiver(self.controller, Path(self.args.alerts_token_file), limits, bridge=bridge, metrics=self.controller.metrics)
        if self.args.alerts_tls_cert_file:  # prepare checked that the key file comes with it
            return [
                Listener(receiver.app, *self.listen, ssl_certfile=self.args.alerts_tls_cert_file, ssl_keyfile=self.args.alerts_tls_key_file)
            ]
        return [Listener(receiver.app, *self.listen)]

    @property
    def sockets(self) -> list[socket.socket]:
        return [self.sock] if self.sock is not None else []


def prepare(
    args: argparse.Namespace, cluster: ApiSource | None, parse_hostport: Callable[[str, str], tuple[str, int]]
) -> HealthSetup | None:
    """Check the flags and bind the receiver's socket; ValueError with a one-line message for a usage error."""
    from serving.http_thread import BindError, bind_socket

    receiver_flags = [f for f in ("alerts_listen", "alerts_token_file", "alerts_tls_cert_file", "alerts_tls_key_file") if getattr(args, f)]
    if args.no_health or cluster is None:
        if receiver_flags:
            why = "--no-health" if args.no_health else "--source (policies live in a cluster)"
            raise ValueError(
                f"--{receiver_flags[0].replace('_', '-')}: the alert receiver needs the health controller, which {why} turns off"
            )
        if cluster is None:
            log.info("device health controller off: it needs a cluster")
        return None
    setup = HealthSetup(args, cluster)
    if bool(args.alerts_tls_cert_file) != bool(args.alerts_tls_key_file):
        raise ValueError("--alerts-tls-cert-file and --alerts-tls-key-file go together")
    if args.alerts_listen:
        if not args.alerts_token_file:
            raise ValueError("--alerts-listen needs --alerts-token-file: the receiver never accepts unauthenticated alerts")
        from controllers.health.receiver import TokenError, TokenFile

        try:
            TokenFile(Path(args.alerts_token_file))
        except TokenError as e:
            raise ValueError(str(e)) from None
        for flag in ("alerts_tls_cert_file", "alerts_tls_key_file"):
            path = getattr(args, flag)
            if path and not Path(path).is_file():
                raise ValueError(f"--{flag.replace('_', '-')} {path}: no such file")
        setup.listen = parse_hostport(args.alerts_listen, "--alerts-listen")
        try:
            setup.sock = bind_socket(*setup.listen, "--alerts-listen")
        except BindError as e:
            raise ValueError(str(e)) from None
    elif receiver_flags:
        raise ValueError(f"--{receiver_flags[0].replace('_', '-')} needs --alerts-listen")
    return setup
