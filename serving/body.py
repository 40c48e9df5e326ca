"""Request bodies read within the limits, and the plain responses every route shares.

Raw body + orjson + `Response(bytes)` measured ~2x faster than pydantic
models and >10x faster than returning dicts, so no models sit on the hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
from fastapi import Request, Response

from serving.bad_request import BadRequest
from serving.http_thread import Limits

JSON = "application/json"

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
    return json_response(orjson.dumps({"error": str(e), "field": e.field}), 400)


def text(message: str, status: int = 200) -> Response:
    return Response(message.encode(), status_code=status, media_type="text/plain")


class Refused(Exception):
    """A request refused before it reached a handler (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_body(request: Request, limits: Limits) -> bytes:
    """The body, within the size limit (413 as soon as it is known to be over) and the time limit (408)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise Refused(400, f"Content-Length {declared[:40]!r} is not a number") from None
        if size > limits.max_body_bytes:
            raise Refused(413, f"request body of {size} bytes is over the limit of {limits.max_body_bytes} bytes")
    chunks: list[bytes] = []
    total = 0

    async def collect() -> None:
        nonlocal total
        async for chunk in request.stream():
            total += len(chunk)
            if total > limits.max_body_bytes:
                raise Refused(413, f"request body is over the limit of {limits.max_body_bytes} bytes")
            chunks.append(chunk)

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
    return b"".join(chunks)


def refusal(e: Refused) -> Response:
    # Close the connection: the rest of the body (if any) is never read.
    return Response(str(e).encode(), status_code=e.status, media_type="text/plain", headers={"Connection": "close"})
