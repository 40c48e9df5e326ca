"""A verb's body is read under a deadline on the request's own task (serving/body.py `read_body`).

Raw ASGI messages, so a body can arrive in pieces, stop half way or be cut
off: one that stops gets 408 once the body timeout is over (with
Connection: close), one over the size limit while it streams gets 413, a
client gone away gets nothing answered (499), and a body in pieces is read
whole, however many messages it comes in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from extender.app import create_app
from serving.http_thread import Limits
from tests.e2e.harness import demo_pod_args

BODY = orjson.dumps(demo_pod_args("plain", ["node-a", "node-b"]))  # a pod without claims: answered without the state
TIMEOUT = 0.3

# (name, the body's messages (None: the client stops sending, "gone": the client disconnects), status, Connection header)
ROWS: list[tuple[str, list[bytes | str | None], int, str | None]] = [
    ("whole body in one message", [BODY], 200, None),
    ("body in three messages", [BODY[:10], BODY[10:20], BODY[20:]], 200, None),
    ("body that stops half way", [BODY[:10], None], 408, "close"),
    ("no body at all after the headers", [None], 408, "close"),
    ("over the size limit while it streams", [b"{" + b" " * len(BODY), b" " * 100], 413, "close"),
    ("client gone half way", [BODY[:10], "gone"], 499, None),
    ("client gone before any body", ["gone"], 499, None),
    ("an empty message between pieces and at the end", [BODY[:10], b"", BODY[10:], b""], 200, None),
]


async def _serve(app: Any, messages: list[bytes | str | None]) -> tuple[int, dict[str, str], float]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/filter",
        "raw_path": b"/filter",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        if not pending:
            await asyncio.Event().wait()  # nothing more ever comes
        item = pending.pop(0)
        if item is None:
            await asyncio.Event().wait()
        if item == "gone":
            return {"type": "http.disconnect"}
        assert isinstance(item, bytes)
        return {"type": "http.request", "body": item, "more_body": bool(pending)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    started = time.monotonic()
    await asyncio.wait_for(app(scope, receive, send), 5)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
    return start["status"], headers, time.monotonic() - started


@pytest.mark.parametrize(("messages", "status", "connection"), [pytest.param(m, s, c, id=n) for n, m, s, c in ROWS])
async def test_a_body_is_read_within_its_deadline(
    demo_service, messages: list[bytes | str | None], status: int, connection: str | None
) -> None:
    demo = await demo_service()
    app = create_app(demo.service, limits=Limits(max_body_bytes=len(BODY) + 64, body_timeout=TIMEOUT))
    got, headers, took = await _serve(app, messages)
    assert got == status
    assert headers.get("connection") == connection
    if status == 408:
        assert TIMEOUT <= took < TIMEOUT + 2
