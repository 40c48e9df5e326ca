"""`dra-extender all`: `serve` and `controllers` in one process, over one source, for the demo (`make run`)
and a one-replica trial. The chart runs them apart (docs/design.md#architecture).

The verbs keep `serve`'s leadership flags; the controllers lead with them where no Lease is involved
(--source, --standalone, --read-only) and otherwise elect on their own Lease (dra-extender-controllers),
so whatever the mode, no two controllers lead side by side.
"""

from __future__ import annotations

import argparse
import logging

from dra_extender import controllers, serve
from dra_extender.process import Process, bind_listeners, pick_source, tune_runtime, version

log = logging.getLogger("dra_extender")


def add_flags(p: argparse.ArgumentParser) -> None:
    """`serve`'s flags, then the controllers' own."""
    serve.add_flags(p)
    controllers.add_controller_flags(p)


async def run_all(args: argparse.Namespace) -> int:
    from serving.metrics import Metrics

    tune_runtime()
    addresses = serve.listen_addresses(args)
    picked = pick_source(args)
    sockets = bind_listeners(*serve.bind_addresses(addresses))
    health = controllers.health_setup(args, picked.cluster)
    proc = Process.build(args, picked, Metrics(version()))
    proc.sockets += sockets
    lead = serve.leadership(args, picked.cluster)
    await proc.connect()
    serve.add_verbs(proc, addresses, lead, await serve.chosen_features(args, proc.cluster))
    controllers_lead = controllers.elect(args, picked.cluster) if lead is not None and picked.cluster is not None else None
    controllers.add_controllers(proc, serve.gate_of(args, controllers_lead), health)
    if controllers_lead is not None:
        proc.background.append(("controllers-leadership", controllers_lead.run))
    log.info(
        "starting dra-extender (the verbs and the controllers in one process)",
        extra={"command": "all", "source": proc.source.description, "listen": args.listen, "probe_listen": args.probe_listen or ""},
    )
    return await proc.run()
