"""The verbs' direct dispatch (extender/app.py ExtenderApp) answers the same bytes as FastAPI's own routing of them.

Each row is sent twice to the same app: once through the direct path, once
through FastAPI's middleware stack and router (`FastAPI.__call__`); status,
headers and body must be identical, and every row must take the direct path
(or, for a method or path it does not serve, must not).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from extender.app import ExtenderApp, create_app
from extender.routes.verbs import Route
from serving.body import Answer
from serving.http_thread import Limits
from tests.e2e.harness import demo_pod_args

FILTER = orjson.dumps(demo_pod_args("trainer", ["node-a", "node-b"]))
PLAIN = orjson.dumps(demo_pod_args("plain", ["node-a", "node-b"]))

# name, method, path, body, extra headers, whether the direct path serves it
ROWS: list[tuple[str, str, str, bytes, dict[str, str], bool]] = [
    ("filter", "POST", "/filter", FILTER, {}, True),
    ("filter, a pod without claims (answered on the HTTP thread)", "POST", "/filter", PLAIN, {}, True),
    ("prioritize", "POST", "/prioritize", FILTER, {}, True),
    ("filter, not JSON", "POST", "/filter", b"{", {}, True),
    ("filter, empty body", "POST", "/filter", b"", {}, True),
    ("filter, no pod", "POST", "/filter", b'{"NodeNames": ["node-a"]}', {}, True),
    ("filter, NodeNames not strings", "POST", "/filter", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', {}, True),
    ("filter, over the size limit", "POST", "/filter", b"{" + b" " * 2048 + b"}", {}, True),
    ("filter, Content-Length not a number", "POST", "/filter", FILTER, {"content-length": "twelve"}, True),
    ("prioritize, not an object", "POST", "/prioritize", b"[]", {}, True),
    ("bind, Node not a string", "POST", "/bind", b'{"PodName": "trainer", "PodUID": "u1", "Node": 3}', {}, True),
    ("bind, no PodName", "POST", "/bind", b'{"Node": "node-a"}', {}, True),
    ("bind, an unknown pod", "POST", "/bind", b'{"PodName": "nobody", "PodNamespace": "default", "Node": "node-a"}', {}, True),
    ("GET /filter (405 from FastAPI)", "GET", "/filter", b"", {}, False),
    ("POST /filter/ (FastAPI's redirect)", "POST", "/filter/", FILTER, {}, False),
    ("POST to an unknown path (404)", "POST", "/nothing", b"{}", {}, False),
]


class Spy:
    """A verb's route that records the path it answered (the direct dispatch took it)."""

    def __init__(self, route: Route, path: str, taken: list[str]) -> None:
        self.route, self.path, self.taken = route, path, taken

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        self.taken.append(self.path)
        return await self.route.answer(scope, receive)


class Broken:
    """A verb's route that raises (a bug), for the direct dispatch."""

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        raise RuntimeError(f"escaped while answering {scope['path']}")


def through_fastapi(app: FastAPI) -> Any:
    """The same app, with every request routed by FastAPI itself."""

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return asgi


async def _send(app: Any, method: str, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as client:
        request = client.build_request(method, path, content=body or None)
        request.headers.update(headers)
        return await client.send(request)


@pytest.mark.parametrize(("name", "method", "path", "body", "headers", "direct"), ROWS, ids=[r[0] for r in ROWS])
async def test_direct_dispatch_answers_what_fastapi_answers(
    demo_service, monkeypatch, name: str, method: str, path: str, body: bytes, headers: dict[str, str], direct: bool
) -> None:
    demo = await demo_service()
    app = create_app(demo.service, limits=Limits(max_body_bytes=1024))
    assert isinstance(app, ExtenderApp)
    routed = await _send(through_fastapi(app), method, path, body, headers)
    taken: list[str] = []
    for verb_path, route in app.verbs.copy().items():
        app.verbs[verb_path] = Spy(route, verb_path, taken)
    direct_answer = await _send(app, method, path, body, headers)
    assert (direct_answer.status_code, direct_answer.headers.multi_items(), direct_answer.content) == (
        routed.status_code,
        routed.headers.multi_items(),
        routed.content,
    ), name
    assert taken == ([path] if direct else []), name


async def test_an_exception_escaping_a_route_is_a_500_as_fastapi_answers_it(demo_service) -> None:
    demo = await demo_service()
    app = create_app(demo.service)
    assert isinstance(app, ExtenderApp)

    async def broken(request: Request) -> Response:
        raise RuntimeError(f"escaped while answering {request.url.path}")

    app.verbs["/filter"] = Broken()
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", "") != "/filter"]
    app.add_api_route("/filter", broken, methods=["POST"])
    answers = []
    for target in (app, through_fastapi(app)):
        transport = httpx.ASGITransport(app=target, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            r = await client.post("/filter", content=FILTER)
        answers.append((r.status_code, r.headers.multi_items(), r.content))
    assert answers[0] == answers[1]
    assert answers[0][0] == 500 and answers[0][2] == b"Internal Server Error"
