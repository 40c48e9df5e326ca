"""Run the fake API server as a process: `python -m kubesim.fakeapi --port 0 --kubeconfig-out PATH`.

Prints one JSON line (`{"url": ..., "kubeconfig": ..., "pid": ...}`) on
stdout once it accepts connections, so a test can start it, read one line
and go; SIGTERM or SIGINT stop it cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import orjson

from kubesim.fakeapi.journal import Journal
from kubesim.fakeapi.server import FakeApiServer


def _versions(text: str) -> tuple[str, ...]:
    return tuple(v for v in (s.strip() for s in text.split(",")) if v and v != "none")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kubesim.fakeapi", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--kubeconfig-out", help="write a kubeconfig for the server here")
    p.add_argument("--load", action="append", default=[], metavar="DIR_OR_FILE", help="YAML/JSON manifests to load (repeatable)")
    p.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks")
    p.add_argument("--history-limit", type=int, default=100_000, help="watch events kept before older RVs answer 410")
    p.add_argument("--resource-versions", default="v1,v1beta2", help="resource.k8s.io versions serving slices/claims/classes")
    p.add_argument(
        "--dtr-versions",
        default="v1beta2,v1alpha3",
        help="resource.k8s.io versions serving DeviceTaintRule ('none' for none; add v1 to serve it)",
    )
    p.add_argument("--no-crds", action="store_true", help="do not install the shipped CRDs (resource.dra-extender.io): POST them yourself")
    p.add_argument("--token", default=None, help="require this bearer token")
    p.add_argument("--require-namespaces", action="store_true", help="creating in a missing namespace answers 404")
    p.add_argument(
        "--kubernetes-version", default="v1.36.2", help="what /version reports (the extender takes the feature-gate defaults of its minor)"
    )
    p.add_argument("--journal", metavar="PATH", help="record every request (write bodies too) and write them here as JSON lines on exit")
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    api = FakeApiServer(
        host=args.host,
        port=args.port,
        bookmark_interval=args.bookmark_interval,
        history_limit=args.history_limit,
        resource_versions=_versions(args.resource_versions),
        device_taint_rule_versions=_versions(args.dtr_versions),
        crds=not args.no_crds,
        token=args.token,
        auto_create_namespaces=not args.require_namespaces,
        kubernetes_version=args.kubernetes_version,
    )
    if args.load:
        api.load(*args.load)
    journal = Journal() if args.journal else None
    if journal is not None:
        api.add_reactor(journal)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await api.start()
    ready = {"url": api.url, "pid": os.getpid()}
    if args.kubeconfig_out:
        ready["kubeconfig"] = str(api.write_kubeconfig(args.kubeconfig_out))
    sys.stdout.write(orjson.dumps(ready).decode() + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await api.stop()
        if journal is not None:
            journal.write(args.journal)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
