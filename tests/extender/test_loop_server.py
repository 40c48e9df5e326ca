"""--listen served on the main event loop: the verbs run where they are read, and its probes still read the heartbeat."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.app import create_app
from extender.http_thread import HEARTBEAT_SECONDS, InlineBridge, Limits, Listener, LoopBridge, LoopServer, bind_socket
from extender.metrics import Metrics
from extender.service import build_service
from tests.e2e.harness import DEMO, demo_pod_args
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState


async def test_a_request_on_the_loop_server_runs_on_the_serving_loop() -> None:
    """No hop: the app is called on the loop (and thread) that awaits serve(); stop() ends serve()."""
    seen: list[tuple[asyncio.AbstractEventLoop, threading.Thread]] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:  # a bare ASGI app
        assert scope["type"] == "http"
        seen.append((asyncio.get_running_loop(), threading.current_thread()))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})  # type: ignore[operator]  # ASGI callable
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]  # ASGI callable

    sock = bind_socket("127.0.0.1", 0, "--listen")
    port = sock.getsockname()[1]
    server = LoopServer(Listener(app, "127.0.0.1", port), Limits(), sock)  # type: ignore[arg-type]  # a bare ASGI app
    serving = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(100):  # until uvicorn has started listening on the socket
                if server.server.started:
                    break
                await asyncio.sleep(0.01)
            answer = await client.post("/filter", content=b"{}")
        assert (answer.status_code, answer.text) == (200, "ok")
        assert seen == [(asyncio.get_running_loop(), threading.current_thread())]
    finally:
        server.stop()
        await asyncio.wait_for(serving, 10)
        sock.close()


@dataclass(frozen=True, slots=True)
class StallCase:
    name: str
    watched: bool  # InlineBridge(watched=the main loop's bridge) or InlineBridge()
    heartbeat_age: float  # seconds since the watched loop's heartbeat
    livez: int
    stall_gauge_at_least: float


STALL_CASES = [
    StallCase("no watched loop: answering proves it turns", watched=False, heartbeat_age=30.0, livez=200, stall_gauge_at_least=0.0),
    StallCase("watched, heartbeat fresh", watched=True, heartbeat_age=0.0, livez=200, stall_gauge_at_least=0.0),
    StallCase("watched, stalled past the threshold", watched=True, heartbeat_age=15.0, livez=503, stall_gauge_at_least=14.0),
]


@pytest.mark.parametrize("case", STALL_CASES, ids=[c.name for c in STALL_CASES])
async def test_probes_on_the_main_loop_read_the_watched_heartbeat(case: StallCase) -> None:
    """--listen's /livez and the stall gauge say what the probe port says (the same heartbeat), not always ok."""
    loop = asyncio.get_running_loop()
    watched = LoopBridge(loop, stall_threshold=10.0)
    watched.last_turn = time.monotonic() - case.heartbeat_age - HEARTBEAT_SECONDS  # the clock is the heartbeat's stamp
    cel = CelEnvironment()
    service = build_service(ClusterState(cel), ManifestSource(DEMO), Allocator(cel), Metrics())
    app = create_app(service, InlineBridge(watched) if case.watched else InlineBridge())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        livez = await client.get("/livez")
        assert livez.status_code == case.livez, livez.text
        if case.livez == 503:
            assert "event loop stalled" in livez.text and "threshold 10 s" in livez.text, livez.text
        gauge = next(
            float(line.rsplit(" ", 1)[1])
            for line in (await client.get("/metrics")).text.splitlines()
            if line.startswith("dra_extender_event_loop_stall_seconds ")
        )
        assert case.stall_gauge_at_least <= gauge < case.stall_gauge_at_least + 5, gauge
        # The verbs are answered in place (not ready yet: the state is empty), with no other loop to hand them to.
        filtered = await client.post("/filter", json=demo_pod_args("trainer", ["node-a"]))
        assert filtered.json()["Error"].startswith("not ready"), filtered.text
