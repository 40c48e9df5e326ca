"""An answer leaves in one write: status line, headers and body together (serving/http_thread.py CoalescingTransport).

uvicorn writes the headers and the body of an answer separately; the
protocol the extender serves with joins the writes of one loop turn, so
kube-scheduler reads one segment per answer instead of two.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from serving.body import Answer
from serving.http_thread import protocol_class


@dataclass
class RecordingTransport:
    """What the protocol writes, write by write."""

    writes: list[bytes] = field(default_factory=list)
    closed: bool = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8888)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await Answer(b'{"ok":true}').send(send)


@dataclass(frozen=True)
class Row:
    name: str
    request: bytes
    closes: bool


ROWS = [
    Row("kept alive", b"POST /filter HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", False),
    Row("connection: close", b"POST /filter HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", True),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_an_answer_is_one_write(row: Row) -> None:
    config = uvicorn.Config(_app, http=protocol_class(10.0), lifespan="off", log_config=None, access_log=False)
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
    transport = RecordingTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(row.request)
    for _ in range(20):
        await asyncio.sleep(0.01)
        if transport.writes:
            break
    await asyncio.sleep(0.02)
    assert len(transport.writes) == 1, transport.writes
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: 11" in head
    assert body == b'{"ok":true}'
    assert transport.closed is row.closes
    protocol.connection_lost(None)
