"""`dra-extender webhook`: its flags, and serving it over TLS beside the DeviceClass watch."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from serving.arg_types import positive_seconds

if TYPE_CHECKING:  # imported where the server starts
    import uvicorn

log = logging.getLogger("dra_extender.webhook")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # a pod is at most ~1.5 MiB (etcd's limit); an AdmissionReview carries one or two


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], hostport: Callable[[str, str], tuple[str, int]]
) -> argparse.ArgumentParser:
    """The `webhook` subcommand's flags (dra_extender/cli.py registers it)."""
    p = sub.add_parser(
        "webhook",
        help="serve the mutating admission webhook that sets schedulerName on pods using DRA devices",
        description="Serve POST /mutate (AdmissionReview v1) over TLS: pods with resourceClaims or DRA-backed extended "
        "resources get spec.schedulerName; /healthz (liveness) and /readyz (DeviceClasses listed) for probes.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig to watch DeviceClasses with (default: in-cluster in a pod)")
    src.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--listen", default="0.0.0.0:8443", metavar="HOST:PORT", help="HTTPS address (default %(default)s)")
    p.add_argument("--tls-cert-file", required=True, metavar="PATH", help="serving certificate (PEM), signed by the caBundle's CA")
    p.add_argument("--tls-key-file", required=True, metavar="PATH", help="its private key (PEM)")
    p.add_argument("--scheduler-name", default="dra-scheduler", help="the schedulerName to set (default %(default)s)")
    p.add_argument(
        "--tls-reload-seconds",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to check the certificate files and load a renewed pair for new connections (default %(default)s)",
    )
    p.add_argument(
        "--excluded-namespace",
        action="append",
        metavar="NAMESPACE",
        help="leave this namespace's pods alone, as the MutatingWebhookConfiguration's namespaceSelector does "
        "(repeatable; the chart passes its webhook.excludedNamespaces and the release namespace)",
    )
    _add_limit_flags(p)
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="(default %(default)s)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", help="(default %(default)s)")
    return p


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    """The extender's request limits (`serve --max-body-bytes` and friends), with the webhook's defaults."""
    hard = p.add_argument_group("limits (hostile input)")
    hard.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="larger reviews get 413 without being read (default %(default)s)",
    )
    hard.add_argument(
        "--header-timeout",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="close a connection whose request headers take longer, after the TLS handshake (default %(default)s)",
    )
    hard.add_argument(
        "--body-timeout",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="answer 408 when a review's body takes longer to arrive (default %(default)s)",
    )


async def serve_webhook(args: argparse.Namespace, usage_error: type[Exception], hostport: Callable[[str, str], tuple[str, int]]) -> int:
    """Check the certificate and the address first (one-line usage errors), then watch DeviceClasses and serve until stopped."""
    import os
    import ssl

    import uvicorn

    from serving.http_thread import BindError, Limits, bind_socket, protocol_class
    from tracker import events as ev
    from tracker.apiserver.kubeconfig import KubeconfigError
    from tracker.apiserver.source import ApiSource
    from tracker.resources import KIND_RESOURCES
    from webhook.app import create_webhook_app
    from webhook.classes import DeviceClassNames

    host, port = hostport(args.listen, "--listen")
    if args.max_body_bytes <= 0:
        raise usage_error(f"--max-body-bytes: must be positive, got {args.max_body_bytes}")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(args.tls_cert_file, args.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise usage_error(f"--tls-cert-file {args.tls_cert_file} / --tls-key-file {args.tls_key_file}: {e}") from None
    in_cluster = args.in_cluster or (not args.kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))
    if not args.kubeconfig and not in_cluster:
        raise usage_error("no cluster to watch DeviceClasses in: pass --kubeconfig PATH or --in-cluster")
    try:
        sock = bind_socket(host, port, "--listen")
    except BindError as e:
        raise usage_error(str(e)) from None
    source = ApiSource(kubeconfig=args.kubeconfig, in_cluster=in_cluster)
    try:
        await source.connect("--kubeconfig")
    except KubeconfigError as e:
        raise usage_error(str(e)) from None
    classes = DeviceClassNames()
    limits = Limits(max_body_bytes=args.max_body_bytes, header_timeout=args.header_timeout, body_timeout=args.body_timeout)
    excluded = sorted(set(args.excluded_namespace or ()))
    app = create_webhook_app(
        args.scheduler_name,
        classes,
        limits=limits,
        excluded=excluded,
        stale=lambda: any(st["stale"] for st in source.sync_status().values()),
    )
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        http=protocol_class(limits.header_timeout),
        ssl_certfile=args.tls_cert_file,
        ssl_keyfile=args.tls_key_file,
        timeout_graceful_shutdown=3,
        timeout_keep_alive=5,
    )
    log.info(
        "serving the admission webhook",
        extra={"listen": args.listen, "scheduler": args.scheduler_name, "excluded_namespaces": ",".join(excluded)},
    )
    if excluded:
        log.warning(
            "pods in excluded namespaces keep their schedulerName: a DRA pod there is scheduled by the default scheduler, "
            "which allocates devices beside dra-extender when its DynamicResources plugin is on (the extender flags such pods)",
            extra={"excluded_namespaces": ",".join(excluded)},
        )
    background = [
        asyncio.create_task(source.reflector(KIND_RESOURCES[ev.DEVICE_CLASS], classes).run(), name="reflector-deviceclasses"),
        asyncio.create_task(source.freshness.watch(), name="staleness"),
        asyncio.create_task(source.freshness.probe(source), name="api-probe"),
        asyncio.create_task(_reload_certificates(config, args.tls_cert_file, args.tls_key_file, args.tls_reload_seconds)),
    ]
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await source.close()
    return 0


async def _reload_certificates(config: uvicorn.Config, cert: str, key: str, every: float) -> None:
    """cert-manager renews the Secret in place: load the new pair into the live SSL context (new handshakes use it)."""
    import os

    def stamp() -> tuple[float, float]:
        return os.stat(cert).st_mtime, os.stat(key).st_mtime

    last = stamp()
    while True:
        await asyncio.sleep(every)
        try:
            now = stamp()
            if now != last and config.ssl is not None:
                config.ssl.load_cert_chain(cert, key)
                last = now
                log.info("loaded a renewed serving certificate", extra={"cert": cert})
        except Exception as e:  # a half-written pair: keep the old one, try again
            log.warning("could not load the serving certificate; keeping the previous one", extra={"cert": cert, "err": str(e)})
