"""HttpServers: a listener `on_main_loop` is served on the loop that starts the servers, the others on the HTTP thread; stop ends both."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from serving.http_thread import HttpServers, Limits, Listener, bind_socket


def _thread_name_app() -> Any:
    """An ASGI app that answers with the name of the thread it runs on."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = threading.current_thread().name.encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app


@pytest.mark.parametrize(
    ("on_main_loop", "expected"),
    [
        pytest.param([True, False], ["MainThread", "http"], id="verbs-on-main-probes-on-thread"),
        pytest.param([True], ["MainThread"], id="main-loop-only"),
        pytest.param([False, False], ["http", "http"], id="thread-only"),
    ],
)
def test_each_listener_runs_where_it_says_and_stop_ends_all(on_main_loop: list[bool], expected: list[str]) -> None:
    sockets = [bind_socket("127.0.0.1", 0, "--listen") for _ in on_main_loop]
    ports = [s.getsockname()[1] for s in sockets]
    apps = [Listener(_thread_name_app(), "127.0.0.1", port, on_main_loop=main) for port, main in zip(ports, on_main_loop, strict=True)]

    async def scenario() -> list[str]:
        servers = HttpServers(apps, Limits(), sockets)
        servers.start()
        waiting = asyncio.create_task(servers.wait())
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                for _ in range(100):  # until both servers listen
                    try:
                        names = [(await client.get(f"http://127.0.0.1:{p}/")).text for p in ports]
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the servers never answered")
        finally:
            servers.stop()
        await asyncio.wait_for(waiting, 10)  # both ended: the main loop's task and the thread's loop
        if servers.on_thread:
            servers._thread.join(5)
            assert not servers._thread.is_alive()
        return names

    assert asyncio.run(scenario()) == expected
