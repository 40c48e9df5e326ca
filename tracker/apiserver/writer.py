"""The API server's writes on connections of their own: HTTP/1.1 requests written as bytes, answers parsed by httptools.

Through aiohttp's ClientSession one write costs about 0.35 ms of the
client's CPU (URL, header and timer objects, request and response classes
around the parser); the same request written as bytes on a kept-alive
connection and its answer parsed by httptools costs about 0.1 ms. A bind
writes three (docs/performance.md#cpu-per-pod-at-5000-nodes). Lists, watches
and reads stay on kubernetes-asyncio's aiohttp session.

What is sent is what aiohttp sent for `ApiSource.send`: the method, the
path under the configured host, the client's default headers and its
authentication, the body's bytes; no `Accept-Encoding` (the API server then
answers uncompressed). TLS uses a context built from the client's
configuration as kubernetes-asyncio builds its own. The caller falls back to
aiohttp for what this does not do: a proxy, a path that would need quoting.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import httptools
import yarl

# A path sent as it is: what Kubernetes names and the resource registry produce. Anything
# else (a character aiohttp would percent-encode) goes through aiohttp.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._~/:@!$&'()*+,;=-]*")
# An idle connection is closed after this long, as aiohttp's connector does (its keepalive_timeout):
# well before a server's own idle timeout, so a write rarely meets a connection the server is closing.
KEEPALIVE_SECONDS = 15.0


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []
        self.lost = False
        self.reusable = False  # the last answer was complete and the server keeps the connection open

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(aiohttp.ClientPayloadError(f"malformed answer from the API server: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.reusable = False
        self._fail(aiohttp.ServerDisconnectedError())

    # ---------------------------------------------------------------- httptools callbacks

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, body = self.waiter, self.body
        self.waiter, self.body = None, []
        self.reusable = self.parser.should_keep_alive()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), b"".join(body)))

    # ---------------------------------------------------------------- use

    def _fail(self, error: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        self.body = []
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def usable(self) -> bool:
        return self.reusable and not self.lost and self.transport is not None and not self.transport.is_closing()

    def exchange(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        """Send one whole request; the future holds (status, body) once the answer is complete."""
        assert self.transport is not None and self.waiter is None
        self.reusable = False
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS context kubernetes-asyncio builds for its session (client/rest.py), from the same configuration."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


class Writer:
    """Requests to one API server on a pool of kept-alive connections (at most `limit` at once)."""

    def __init__(
        self,
        host: str,
        *,
        tls: ssl.SSLContext | None,
        server_hostname: str | None = None,
        limit: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = yarl.URL(host)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"API server address {host!r}: not an http(s) URL")
        self.address = (url.host, url.port or (443 if url.scheme == "https" else 80))
        self.tls = tls if url.scheme == "https" else None
        self.server_hostname = (server_hostname or url.host) if self.tls is not None else None
        self.prefix = url.raw_path.rstrip("/")
        self.host_header = url.raw_authority
        self.limit = limit
        self.clock = clock
        self._idle: deque[tuple[_Connection, float]] = deque()  # with the time each went idle
        self.opened = 0  # connections opened so far (the tests read it)
        self.closed = False
        self._slots = asyncio.Semaphore(limit)

    @staticmethod
    def takes(path: str) -> bool:
        """Whether `path` can be sent as it is (else the caller sends it through aiohttp, which quotes it)."""
        return _PLAIN_PATH.fullmatch(path) is not None

    def head(self, method: str, path: str, headers: dict[str, str], length: int) -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise ValueError(f"header {name!r}: a line break or colon in a header cannot be sent")
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes, timeout: float) -> tuple[int, bytes]:
        """(status, body) of one request, within `timeout` seconds (TimeoutError after it)."""
        request = self.head(method, path, headers, len(body)) + body
        async with asyncio.timeout(timeout), self._slots:
            conn = await self._connection()
            try:
                status, data = await conn.exchange(request)
            except BaseException:
                conn.close()  # cancelled or failed mid-answer: the connection's state is unknown
                raise
            if conn.usable() and not self.closed:
                self._idle.append((conn, self.clock()))
            else:
                conn.close()
            return status, data

    async def _connection(self) -> _Connection:
        while self._idle:
            conn, since = self._idle.pop()
            if conn.usable() and self.clock() - since < KEEPALIVE_SECONDS:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        host, port = self.address
        self.opened += 1
        _, conn = await loop.create_connection(_Connection, host, port, ssl=self.tls, server_hostname=self.server_hostname)
        return conn

    def close(self) -> None:
        """Close the idle connections; one still in use is closed when its answer is in."""
        self.closed = True
        while self._idle:
            self._idle.pop()[0].close()
