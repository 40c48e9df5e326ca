"""The `dra-extender` command: its parser and the dispatch to each subcommand.

serve (dra_extender/serve.py): the kube-scheduler sidecar, the verbs only. controllers
(dra_extender/controllers.py): eviction, device health and the foreign-pod check, in their own
process. all (dra_extender/combined.py): both in one process, for the demo. webhook (webhook/).
A flag given to the subcommand it does not belong to is a usage error naming the one it belongs to.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from dra_extender import combined
from dra_extender import controllers as controllers_command
from dra_extender import serve as serve_command
from dra_extender.controllers import run_controllers
from dra_extender.process import GC_THRESHOLDS, SHUTDOWN_STEP_SECONDS, UsageError, parse_hostport, version
from dra_extender.serve import serve

__all__ = ["GC_THRESHOLDS", "SHUTDOWN_STEP_SECONDS", "UsageError", "build_parser", "main", "run_command", "serve"]


class Misplaced(argparse.Action):
    """A flag of another subcommand: an argparse error (exit 2) naming where it belongs."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, belongs: str, **kwargs: Any) -> None:
        self.belongs = belongs
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        parser.error(f"{option_string} belongs to {self.belongs}")


SERVE_HOME = "`dra-extender serve` (the kube-scheduler sidecar's verbs; `dra-extender all` runs both in one process)"
CONTROLLERS_HOME = (
    "`dra-extender controllers` (eviction, device health and the foreign-pod check; `dra-extender all` runs both in one process)"
)


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def _misplace(p: argparse.ArgumentParser, flags: set[str], belongs: str) -> None:
    for flag in sorted(flags - _options(p)):
        p.add_argument(flag, action=Misplaced, belongs=belongs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-extender",
        description="kube-scheduler extender for DRA device taints, tolerations and device attribute patches",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()} (Python {sys.version.split()[0]})")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser(
        "serve",
        help="the kube-scheduler sidecar: serve the extender verbs (filter, prioritize, bind)",
        description="The kube-scheduler sidecar: /filter, /prioritize, /bind, /debug and the requeue nudge; eviction and "
        "device health run in `dra-extender controllers`.",
    )
    serve_command.add_flags(serve_p)
    controllers_p = sub.add_parser(
        "controllers",
        help="run the eviction controller, the device-health controller and the foreign-pod check",
        description="The controllers, off the scheduler's path: NoExecute eviction, device health (DeviceHealthPolicy, "
        "the alert receiver) and the foreign-pod check, with their own Lease (dra-extender-controllers), probes and metrics.",
    )
    controllers_command.add_flags(controllers_p)
    all_p = sub.add_parser(
        "all",
        help="serve and controllers in one process (the demo, a one-replica trial)",
        description="`serve` and `controllers` in one process over one source: for `make run` and trials. The chart runs them apart.",
    )
    combined.add_flags(all_p)
    serve_flags, controllers_flags = _options(serve_p), _options(controllers_p)
    _misplace(serve_p, controllers_flags, CONTROLLERS_HOME)
    _misplace(controllers_p, serve_flags, SERVE_HOME)
    from webhook import add_parser as add_webhook_parser

    add_webhook_parser(sub, parse_hostport)
    return parser


async def run_command(args: argparse.Namespace) -> int:
    """The long-running command `args` names (bench/loop_holds.py wraps it to probe the loop)."""
    if args.command == "webhook":
        from webhook import serve_webhook

        return await serve_webhook(args, UsageError, parse_hostport)
    if args.command == "controllers":
        return await run_controllers(args)
    if args.command == "all":
        return await combined.run_all(args)
    return await serve(args)


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
        return runner(run_command(args))
    except UsageError as e:
        print(f"dra-extender: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
