"""The HTTP edge: FastAPI routes over raw bodies and orjson bytes.

The app runs on the HTTP thread's event loop (extender.http_thread): bodies
are read there, within the request limits; probes are answered there; verbs
and /debug run on the main loop through the bridge. The routes live in
extender/routes/ (probes, verbs, debug) and reach the cluster state only
through the service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from extender.http_thread import InlineBridge, Limits, LoopBridge
from extender.routes.debug import add_debug_routes
from extender.routes.probes import add_probe_routes
from extender.routes.verbs import add_verb_routes
from extender.service import Service


def create_app(
    service: Service,
    bridge: LoopBridge | None = None,
    *,
    probes_only: bool = False,
    debug: bool = True,
    limits: Limits | None = None,
    filter_budget: float | None = None,
    source_status: Callable[[], dict[str, Any]] | None = None,
    lease_problem: Callable[[], str | None] | None = None,
) -> FastAPI:
    """Routes for one listener; `probes_only` for --probe-listen, `debug=False` drops /debug/*."""
    app = FastAPI(title="dra-extender", docs_url=None, redoc_url=None, openapi_url=None)
    bridge = bridge if bridge is not None else InlineBridge()
    add_probe_routes(app, service, bridge, source_status=source_status, lease_problem=lease_problem)
    if probes_only:
        return app
    add_verb_routes(app, service, bridge, limits if limits is not None else Limits(), filter_budget=filter_budget)
    if debug:
        add_debug_routes(app, service, bridge, source_status=source_status)
    return app
