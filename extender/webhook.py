"""`dra-extender webhook`: a mutating admission webhook that sends DRA pods to the dra-extender scheduler.

On managed clusters the default scheduler cannot be reconfigured, so the chart
runs a second one; nothing would make pods use it, and two schedulers
allocating the same devices promise a device twice. This webhook sets
`spec.schedulerName` on a new pod that uses DRA: resource claims, or a
container resource that is a DRA-backed extended resource (a DeviceClass's
`spec.extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>`).

It never touches a pod that asks for another scheduler by name, one already
bound to a node, or one that uses no DRA device; it always allows the pod
(the decision is only where it is scheduled).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

log = logging.getLogger("dra_extender.webhook")

DEFAULT_SCHEDULER = "default-scheduler"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
CLASS_REFRESH_SECONDS = 30.0


def _containers(spec: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or ():
            if isinstance(c, dict):
                yield c


def dra_reason(pod: dict[str, Any], extended: set[str]) -> str | None:
    """Why this pod uses DRA devices (for the log), or None."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return "resourceClaims"
    for c in _containers(spec):
        resources = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for name in resources.get(kind) or {}:
                if name.startswith(IMPLICIT_PREFIX) or name in extended:
                    return f"extended resource {name}"
    return None


def patch_for(pod: dict[str, Any], scheduler_name: str, extended: set[str]) -> tuple[list[dict[str, Any]], str]:
    """The JSON patch for a new pod ([] leaves it alone) and why, for the log."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return [], "already bound to a node"
    current = spec.get("schedulerName") or ""
    if current == scheduler_name:
        return [], "already uses this scheduler"
    if current not in ("", DEFAULT_SCHEDULER):
        return [], f"asks for scheduler {current}"
    reason = dra_reason(pod, extended)
    if reason is None:
        return [], "uses no DRA device"
    return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}], reason


def review_response(review: dict[str, Any], scheduler_name: str, extended: set[str]) -> dict[str, Any]:
    """An AdmissionReview (admission.k8s.io/v1) answer: always allowed, with a patch when the pod uses DRA."""
    request = review.get("request") or {}
    uid = request.get("uid") or ""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    pod = request.get("object") or {}
    if request.get("kind", {}).get("kind") == "Pod" and request.get("operation", "CREATE") == "CREATE" and isinstance(pod, dict):
        patch, why = patch_for(pod, scheduler_name, extended)
        meta = pod.get("metadata") or {}
        name = f"{request.get('namespace') or meta.get('namespace') or ''}/{meta.get('name') or meta.get('generateName') or ''}"
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
            log.info("set schedulerName", extra={"pod": name, "scheduler": scheduler_name, "why": why})
        else:
            log.debug("left pod alone", extra={"pod": name, "why": why})
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class ExtendedResources:
    """DeviceClass extendedResourceName values, re-listed at most every CLASS_REFRESH_SECONDS.

    A failed list keeps the last known names (the implicit `deviceclass.resource.kubernetes.io/`
    names need no list at all).
    """

    def __init__(self, list_classes: Callable[[], Awaitable[list[dict[str, Any]]]], refresh: float = CLASS_REFRESH_SECONDS) -> None:
        self._list = list_classes
        self._refresh = refresh
        self._names: set[str] = set()
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def names(self) -> set[str]:
        async with self._lock:
            if time.monotonic() - self._at >= self._refresh:
                try:
                    classes = await self._list()
                    self._names = {n for c in classes if isinstance(n := (c.get("spec") or {}).get("extendedResourceName"), str) and n}
                except Exception as e:  # keep serving with what we knew: the webhook must answer
                    log.warning("listing DeviceClasses failed; using the last known extended resources", extra={"err": str(e)})
                self._at = time.monotonic()
            return self._names


def create_webhook_app(scheduler_name: str, extended: ExtendedResources) -> FastAPI:
    app = FastAPI(title="dra-extender webhook", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        try:
            review = orjson.loads(await request.body())
            if not isinstance(review, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            return Response(f"bad AdmissionReview: {e}".encode(), status_code=400, media_type="text/plain")
        answer = review_response(review, scheduler_name, await extended.names())
        return Response(orjson.dumps(answer), media_type="application/json")

    return app


def add_parser(sub: Any, hostport: Callable[[str, str], tuple[str, int]]) -> argparse.ArgumentParser:
    """The `webhook` subcommand's flags (extender/cli.py registers it)."""
    p = sub.add_parser(
        "webhook",
        help="serve the mutating admission webhook that sets schedulerName on pods using DRA devices",
        description="Serve POST /mutate (AdmissionReview v1) over TLS: pods with resourceClaims or DRA-backed extended "
        "resources get spec.schedulerName; /healthz for probes.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig to list DeviceClasses with (default: in-cluster in a pod)")
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
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="(default %(default)s)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", help="(default %(default)s)")
    return p


async def serve_webhook(args: argparse.Namespace, usage_error: type[Exception], hostport: Callable[[str, str], tuple[str, int]]) -> int:
    """Check the certificate and the address first (one-line usage errors), then serve until stopped."""
    import os
    import ssl

    import uvicorn

    from extender.http_thread import BindError, bind_socket
    from tracker.api_source import ApiSource
    from tracker.kubeconfig import KubeconfigError

    host, port = hostport(args.listen, "--listen")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(args.tls_cert_file, args.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise usage_error(f"--tls-cert-file {args.tls_cert_file} / --tls-key-file {args.tls_key_file}: {e}") from None
    in_cluster = args.in_cluster or (not args.kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))
    if not args.kubeconfig and not in_cluster:
        raise usage_error("no cluster to list DeviceClasses from: pass --kubeconfig PATH or --in-cluster")
    try:
        sock = bind_socket(host, port, "--listen")
    except BindError as e:
        raise usage_error(str(e)) from None
    source = ApiSource(kubeconfig=args.kubeconfig, in_cluster=in_cluster)
    try:
        await source.connect("--kubeconfig")
    except KubeconfigError as e:
        raise usage_error(str(e)) from None

    async def list_classes() -> list[dict[str, Any]]:
        status, body = await source.request("GET", "/apis/resource.k8s.io/v1/deviceclasses")
        if status != 200:
            raise RuntimeError(f"list DeviceClasses: HTTP {status}")
        return list(orjson.loads(body).get("items") or [])

    app = create_webhook_app(args.scheduler_name, ExtendedResources(list_classes))
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        ssl_certfile=args.tls_cert_file,
        ssl_keyfile=args.tls_key_file,
        timeout_graceful_shutdown=3,
    )
    log.info("serving the admission webhook", extra={"listen": args.listen, "scheduler": args.scheduler_name})
    reload = asyncio.create_task(_reload_certificates(config, args.tls_cert_file, args.tls_key_file, args.tls_reload_seconds))
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        reload.cancel()
        await source.close()
    return 0


async def _reload_certificates(config: Any, cert: str, key: str, every: float) -> None:
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
