"""Request bodies read within the limits, and the plain responses every route shares.

Raw body + orjson + `Response(bytes)` measured ~2x faster than pydantic
models and >10x faster than returning dicts, so no models sit on the hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from fastapi import Request, Response
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from serving.bad_request import BadRequest
from serving.http_thread import Limits

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"  # what Starlette's Response sends for media_type "text/plain"

# A refused body's chunks are freed, but glibc keeps freed heap blocks in the process:
# malloc_trim gives them back. Only after a refusal of more than this many bytes read.
TRIM_AFTER_BYTES = 1 << 20


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_malloc_trim = _load_malloc_trim()


def json_response(body: bytes, status: int = 200) -> Response:
    return Response(content=body, status_code=status, media_type=JSON)


def bad_request(e: BadRequest) -> Response:
    return bad_request_answer(e).response()


def text(message: str, status: int = 200) -> Response:
    return Response(message.encode(), status_code=status, media_type="text/plain")


class Refused(Exception):
    """A request refused before it reached a handler (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_body(request: Request, limits: Limits) -> bytes:
    """The body, within the size limit (413 as soon as it is known to be over) and the time limit (408)."""
    return await read_asgi_body(request.scope, request.receive, limits)


def _declared_length(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"content-length":  # ASGI servers lower-case header names
            return bytes(value)
    return None


async def read_asgi_body(scope: Scope, receive: Receive, limits: Limits) -> bytes:
    """The body straight from the ASGI messages, within the size limit (413, as soon as it is known) and the time limit (408).

    No Request object and no stream generator: the verbs read their body here, three times per pod. A client
    gone before the end raises Starlette's ClientDisconnect, as `Request.stream()` does.
    """
    declared = _declared_length(scope)
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise Refused(400, f"Content-Length {declared[:40].decode('latin-1')!r} is not a number") from None
        if size > limits.max_body_bytes:
            raise Refused(413, f"request body of {size} bytes is over the limit of {limits.max_body_bytes} bytes")
    chunks: list[bytes] = []
    total = 0

    async def collect() -> None:
        nonlocal total
        while True:
            message = await receive()
            if message["type"] != "http.request":
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                continue
            chunk = message.get("body", b"")
            if chunk:
                total += len(chunk)
                if total > limits.max_body_bytes:
                    raise Refused(413, f"request body is over the limit of {limits.max_body_bytes} bytes")
                chunks.append(chunk)
            if not message.get("more_body", False):
                return

    try:
        # A deadline on this task, not wait_for's task of its own: one task and one loop turn less per request.
        async with asyncio.timeout(limits.body_timeout):
            await collect()
    except TimeoutError:
        chunks.clear()
        raise Refused(408, f"request body not received within {limits.body_timeout:g} s") from None
    except Refused:
        chunks.clear()
        if total > TRIM_AFTER_BYTES and _malloc_trim is not None:
            _malloc_trim(0)  # memory returns to where it was before the request
        raise
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def refusal(e: Refused) -> Response:
    return refusal_answer(e).response()


@dataclass(frozen=True, slots=True)
class Answer:
    """A finished answer as bytes, sent as two ASGI messages with the headers Starlette's Response would send.

    The verbs answer three times per pod: no Response object, no header list built per answer.
    """

    body: bytes
    status: int = 200
    content_type: str | None = JSON
    close: bool = False  # Connection: close (a refused body is never read to its end)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Starlette's order: the extra headers, content-length, content-type."""
        out = [(b"connection", b"close")] if self.close else []
        out.append((b"content-length", str(len(self.body)).encode()))
        if self.content_type is not None:
            out.append((b"content-type", self.content_type.encode()))
        return out

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers()})
        await send({"type": "http.response.body", "body": self.body})

    def response(self) -> Response:
        """The same answer as a Starlette Response (for a route FastAPI itself dispatches)."""
        return Response(
            self.body, status_code=self.status, headers={"connection": "close"} if self.close else None, media_type=self.content_type
        )


def json_answer(body: bytes, status: int = 200) -> Answer:
    return Answer(body, status)


def bad_request_answer(e: BadRequest) -> Answer:
    return Answer(orjson.dumps({"error": str(e), "field": e.field}), 400)


def refusal_answer(e: Refused) -> Answer:
    # Close the connection: the rest of the body (if any) is never read.
    return Answer(str(e).encode(), e.status, TEXT, close=True)


CLIENT_GONE = Answer(b"", 499, None)  # nothing to answer: the client went away before its request was read
