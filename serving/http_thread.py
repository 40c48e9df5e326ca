"""HTTP served from a thread of its own, so probes answer while the event loop is busy; the verbs on the main loop.

Everything that decides (the verbs, /debug) runs on the main event loop:
the tracker's state is only ever touched there. The probe servers (uvicorn,
for --probe-listen, the controllers' --listen, the alert receiver) run on
a second event loop in a thread: they read requests (with size and time
limits), answer /livez, /readyz and /metrics themselves, and hand the rest
to the main loop. A verb that keeps the main loop busy for seconds then
delays other verbs, but not those probes; and /livez fails once the main
loop has not turned for `stall_threshold` seconds, so a stuck loop gets the
container restarted.

`serve`'s --listen, the verbs' listener, is served on the main loop itself
(`Listener.on_main_loop`): a verb handed to the other loop and back cost
about 0.1 ms of CPU twice per pod, and with them on the main loop the
extender's CPU per pod fell by about 15 % on a real control plane
(docs/performance.md#the-verbs-on-the-main-loop). The probes kube-scheduler's
pod is checked with belong on --probe-listen, which stays on the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("dra_extender.http")

T = TypeVar("T")

HEARTBEAT_SECONDS = 0.2
STOP_SECONDS = 5.0  # uvicorn's graceful shutdown (3 s) and a margin, for the servers still running once one has stopped


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may cost before it is read (flags of `serve`)."""

    max_body_bytes: int = 32 * 1024 * 1024
    header_timeout: float = 10.0  # from connection (or keep-alive request start) to the end of the headers
    body_timeout: float = 30.0  # from the end of the headers to the end of the body


class LoopBridge:
    """The main event loop as seen from the HTTP thread: run work there, and tell whether it turns."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stall_threshold: float) -> None:
        self.loop = loop
        self.stall_threshold = stall_threshold
        self.last_turn = time.monotonic()

    async def heartbeat(self) -> None:
        """Runs on the main loop: its timestamp is the proof that the loop turns."""
        while True:
            self.last_turn = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    def stalled_for(self) -> float:
        """Seconds since the main loop last turned, beyond the heartbeat's own period."""
        return max(0.0, time.monotonic() - self.last_turn - HEARTBEAT_SECONDS)

    async def call(self, fn: Callable[[], Awaitable[T] | T]) -> T:
        """Run `fn` on the main loop (awaiting it there if it returns an awaitable); from the HTTP thread."""

        future = asyncio.run_coroutine_threadsafe(call_and_await(fn), self.loop)
        return await asyncio.wrap_future(future)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the main loop; from the HTTP thread. One task there, one future back (a verb per request)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the main loop, without waiting for it; from the HTTP thread."""
        self.loop.call_soon_threadsafe(fn)

    async def call_within(self, fn: Callable[[], T], seconds: float) -> T | None:
        """Like call, but give up (None) when the main loop does not get to it in time."""
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(fn), self.loop)
        try:
            async with asyncio.timeout(seconds):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            return None


class InlineBridge(LoopBridge):
    """For an app served on the main loop itself (tests, embedding): work runs in place."""

    def __init__(self) -> None:
        super().__init__(None, float("inf"))  # type: ignore[arg-type]  # no second loop: `run` works in place

    def stalled_for(self) -> float:
        return 0.0

    async def call(self, fn: Callable[[], Awaitable[T] | T]) -> T:
        return await call_and_await(fn)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await coro

    def call_soon(self, fn: Callable[[], object]) -> None:
        fn()

    async def call_within(self, fn: Callable[[], T], seconds: float) -> T | None:
        return fn()


async def _as_coroutine(fn: Callable[[], T]) -> T:
    return fn()


async def call_and_await(fn: Callable[[], Awaitable[T] | T]) -> T:
    """`fn()`, awaited when it returns an awaitable (a handler or a piece of work may be either)."""
    result = fn()
    if inspect.isawaitable(result):
        return await result
    return result


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for the request headers.

    uvicorn has none: a client that opens a connection, or sends its headers a
    byte at a time, holds it forever. The connection is closed (nothing logged
    above debug) when the headers are not complete `header_timeout` after the
    connection was made or the request began.
    """

    headers_within: ClassVar[float] = Limits().header_timeout  # seconds; set per server by HttpServers (a subclass per limit)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.headers_within, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        log.debug("closing a connection whose request headers did not arrive in time", extra={"client": str(self.client)})
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn declares it (asyncio.Protocol says BaseTransport)
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)


def protocol_class(header_timeout: float) -> type[GuardedHttpToolsProtocol]:
    return type("GuardedHttpTools", (GuardedHttpToolsProtocol,), {"headers_within": header_timeout})


class BindError(Exception):
    """A listen address could not be bound (in use, not ours, no permission): one line for the user."""


def bind_socket(host: str, port: int, flag: str) -> socket.socket:
    """Bind and listen in the calling thread, so a taken address is a one-line usage error before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        raise BindError(f"{flag} {address}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the main thread owns signal handling
        yield


@dataclass(frozen=True, slots=True)
class Listener:
    """An app and where it listens; with a certificate and key it serves TLS.

    `on_main_loop`: served on the loop that starts the servers (the main
    loop), for an app whose every request is work there (the verbs, built
    with an InlineBridge); otherwise on the HTTP thread.
    """

    app: ASGIApp
    host: str
    port: int
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    on_main_loop: bool = False


def _uvicorn_server(listener: Listener, protocol: type[GuardedHttpToolsProtocol]) -> _Server:
    return _Server(
        uvicorn.Config(
            listener.app,
            host=listener.host,
            port=listener.port,
            log_config=None,
            access_log=False,
            loop="none",
            http=protocol,
            lifespan="off",
            timeout_graceful_shutdown=3,
            timeout_keep_alive=5,
            ssl_certfile=listener.ssl_certfile,
            ssl_keyfile=listener.ssl_keyfile,
        )
    )


_Served = list[tuple[_Server, socket.socket | None]]  # a server and the socket it was bound to (None: it binds host and port)


async def _serve(served: _Served) -> None:
    await asyncio.gather(*(s.serve() if sock is None else s.serve(sockets=[sock]) for s, sock in served))


class HttpServers:
    """The uvicorn servers of one process: those on their own event loop in a daemon thread, and those `on_main_loop`."""

    def __init__(self, apps: list[Listener], limits: Limits, sockets: list[socket.socket] | None = None) -> None:
        """`sockets` (one per app, already bound by bind_socket) replace binding host and port."""
        protocol = protocol_class(limits.header_timeout)
        socks: list[socket.socket | None] = list(sockets) if sockets is not None else [None] * len(apps)
        pairs = list(zip(apps, socks, strict=True))
        self.on_main: _Served = [(_uvicorn_server(a, protocol), sock) for a, sock in pairs if a.on_main_loop]
        self.on_thread: _Served = [(_uvicorn_server(a, protocol), sock) for a, sock in pairs if not a.on_main_loop]
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._main: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """From the main loop: the thread's servers start there, the others as a task here."""
        if self.on_thread:
            self._thread.start()
        if self.on_main:
            self._main = asyncio.create_task(_serve(self.on_main), name="http-main-loop")

    def _run(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(_serve(self.on_thread))
            self.done.set_result(None)
        except BaseException as e:
            self.done.set_exception(e if isinstance(e, Exception) else RuntimeError(f"HTTP server stopped: {e!r}"))
        finally:
            loop.close()

    def stop(self) -> None:
        self._stopping = True
        for s, _ in (*self.on_thread, *self.on_main):
            s.should_exit = True

    async def wait(self) -> None:
        """Until the first of the two ends (on its own: an error the caller reports), or, once stopping, both."""
        waits: list[asyncio.Future[None]] = []
        if self.on_thread:
            waits.append(asyncio.wrap_future(self.done))
        if self._main is not None:
            waits.append(self._main)
        if not waits:
            return
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if self._stopping and pending:
            await asyncio.wait(pending, timeout=STOP_SECONDS)
        for d in done:
            d.result()
