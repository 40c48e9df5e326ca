"""/livez (/healthz), /readyz and /metrics for every long-running command: answered on the HTTP thread,
whatever the main loop is busy with (on serve's --listen, served by the main loop itself, once it turns:
the kubelet's probes belong on --probe-listen). The extender's listeners (extender/routes/probes.py) and
the controllers' (dra_extender/controllers.py) add them with what "ready" means for each.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Response

from serving.body import text
from serving.http_thread import LoopBridge
from serving.metrics import Metrics

METRICS_REFRESH_WAIT = 0.05  # /metrics waits this long for fresh gauges from the main loop


def add_probe_routes(
    app: FastAPI,
    metrics: Metrics,
    bridge: LoopBridge,
    *,
    not_ready: Callable[[], str | None],
    refresh_gauges: Callable[[], None],
    lease_problem: Callable[[], str | None] | None,
) -> None:
    """Liveness is about the loop turning; readiness also about the initial state; /metrics refreshes the gauges first.

    `not_ready` (read on the HTTP thread) says why the process cannot do its work yet, or None;
    `refresh_gauges` runs on the main loop.
    """

    @app.get("/livez")
    @app.get("/healthz")
    async def livez() -> Response:
        return _stalled(bridge, "") or text("ok")

    @app.get("/readyz")
    async def readyz() -> Response:
        # Ready means able to work: a loop that does not turn answers nothing.
        refused = _stalled(bridge, "not ready: ")
        if refused is not None:
            return refused
        # A followed Lease nobody renews keeps /readyz 200 (with the reason): the cache is complete and
        # /filter answers; failing readiness would block rollouts and PDB-guarded drains of every replica
        # while the scheduler is down, and the kubelet restarting nothing. The log and
        # dra_extender_followed_lease_stale say it loudly; readiness stays about this process.
        problem = lease_problem() if lease_problem is not None else None
        waiting = not_ready()
        if waiting is None:
            return text("ok" if problem is None else f"ok\nwarning: {problem}")
        return text(waiting, 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.ready.set(1 if not_ready() is None else 0)
        metrics.loop_stall.set(bridge.stalled_for())
        if lease_problem is not None:
            metrics.followed_lease_stale.set(0 if lease_problem() is None else 1)
        # Fresh gauges if the main loop answers at once; else the last ones (a busy loop
        # must not make the scrape time out).
        await bridge.call_within(refresh_gauges, METRICS_REFRESH_WAIT)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def probes_app(
    metrics: Metrics,
    bridge: LoopBridge,
    *,
    not_ready: Callable[[], str | None],
    refresh_gauges: Callable[[], None],
    lease_problem: Callable[[], str | None] | None = None,
) -> FastAPI:
    """An app with the probes and /metrics alone."""
    app = FastAPI(title="dra-extender", docs_url=None, redoc_url=None, openapi_url=None)
    add_probe_routes(app, metrics, bridge, not_ready=not_ready, refresh_gauges=refresh_gauges, lease_problem=lease_problem)
    return app


def _stalled(bridge: LoopBridge, prefix: str) -> Response | None:
    """A 503 when the main loop has not turned for longer than the threshold, else None."""
    seconds = bridge.stalled_for()
    if seconds <= bridge.stall_threshold:
        return None
    return text(f"{prefix}event loop stalled: it has not turned for {seconds:.1f} s (threshold {bridge.stall_threshold:g} s)", 503)
