"""The HTTP edge: FastAPI routes over raw bodies and orjson bytes.

`serve` runs the app for --listen on the main loop with an InlineBridge (verbs
and /debug awaited in place) and the probes-only app for --probe-listen on
the HTTP thread's loop, where the bridge hands work to the main loop
(serving.http_thread). Bodies are read within the request limits either way. The routes live in
extender/routes/ (probes, verbs, debug) and reach the cluster state only
through the service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from extender.routes.debug import add_debug_routes
from extender.routes.probes import add_probe_routes
from extender.routes.verbs import Route, add_verb_routes
from extender.service import Service
from serving.http_thread import InlineBridge, Limits, LoopBridge


class ExtenderApp(FastAPI):
    """FastAPI, with POST /filter, /prioritize and /bind dispatched straight to their routes.

    The scheduler sends three of those per pod: going through FastAPI's
    middleware stack, router and dependency solving cost about as much
    Python as the routes themselves (docs/performance.md#cpu-per-pod-at-5000-nodes).
    The routes read the ASGI messages and give a finished answer, sent as two
    ASGI messages with the bytes FastAPI's routing of them sends; any other
    method or path (405, 404, the probes, /debug) goes through FastAPI as before.
    """

    verbs: dict[str, Route]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.verbs.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await super().__call__(scope, receive, send)
            return
        try:
            answer = await route.answer(scope, receive)
        except Exception:
            # What Starlette's ServerErrorMiddleware answers before uvicorn logs the exception.
            await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise
        await answer.send(send)


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
    app = ExtenderApp(title="dra-extender", docs_url=None, redoc_url=None, openapi_url=None)
    app.verbs = {}
    bridge = bridge if bridge is not None else InlineBridge()
    add_probe_routes(app, service, bridge, source_status=source_status, lease_problem=lease_problem)
    if probes_only:
        return app
    app.verbs = add_verb_routes(app, service, bridge, limits if limits is not None else Limits(), filter_budget=filter_budget)
    if debug:
        add_debug_routes(app, service, bridge, source_status=source_status)
    return app
