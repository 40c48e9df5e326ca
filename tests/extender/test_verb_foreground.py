"""Every verb counts in the state's foreground (tracker/foreground.py) from its first byte to its answer.

The CEL warm-up waits while a verb is in flight and for a moment after; a
verb that did not end (an error path that skipped it) would stall the
warm-up until its longest deferral, every time. So each row, answered or
refused, must begin once and end once, and a decided verb is in flight
while the service decides it.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from extender.app import create_app
from serving.http_thread import Limits
from tests.e2e.harness import demo_pod_args

FILTER = orjson.dumps(demo_pod_args("trainer", ["node-a", "node-b"]))
PLAIN = orjson.dumps(demo_pod_args("plain", ["node-a", "node-b"]))

# name, path, body
ROWS: list[tuple[str, str, bytes]] = [
    ("filter, decided on the main loop", "/filter", FILTER),
    ("filter, a pod without claims (answered on the HTTP thread)", "/filter", PLAIN),
    ("prioritize", "/prioritize", FILTER),
    ("filter, not JSON (400)", "/filter", b"{"),
    ("filter, over the size limit (413)", "/filter", b"{" + b" " * 8192 + b"}"),
    ("bind, an unknown pod", "/bind", b'{"PodName": "nobody", "PodNamespace": "default", "PodUID": "u9", "Node": "node-a"}'),
    ("bind, not readable (400)", "/bind", b'{"Node": 3}'),
]


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.depth = 0

    def begin(self) -> None:
        self.events.append("begin")
        self.depth += 1

    def end(self) -> None:
        self.events.append("end")
        self.depth -= 1


@pytest.mark.parametrize(("name", "path", "body"), ROWS, ids=[r[0] for r in ROWS])
async def test_each_verb_begins_and_ends_once(demo_service, name: str, path: str, body: bytes) -> None:
    demo = await demo_service()
    recorder = Recorder()
    demo.service.state.foreground = recorder  # what the routes are given when the app is made
    depth_while_deciding: list[int] = []
    decide = demo.service.filter

    async def spied(*args: Any, **kwargs: Any) -> Any:
        depth_while_deciding.append(recorder.depth)
        return await decide(*args, **kwargs)

    demo.service.filter = spied  # type: ignore[method-assign]  # observes the decision, answers what it answers
    app = create_app(demo.service, limits=Limits(max_body_bytes=4096))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as client:
        r = await client.post(path, content=body)
    assert r.status_code == (400 if "400" in name else 413 if "413" in name else 200), (name, r.status_code, r.content)
    assert recorder.events == ["begin", "end"], name
    assert all(d == 1 for d in depth_while_deciding), (name, depth_while_deciding)
    if name == "filter, decided on the main loop":
        assert depth_while_deciding == [1]
