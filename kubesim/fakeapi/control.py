"""The `/_fake/` control endpoints: the Python controls over HTTP, for a fake API server run as a subprocess.

GET state; GET/POST/PUT/DELETE faults (POST may also drop watches);
POST fail-next, compact, drop-watches, serve, objects; GET/DELETE requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim.fakeapi.faults import Faults
from kubesim.fakeapi.responses import TRUE, json_response, parse_body
from kubesim.fakeapi.store import ApiError

if TYPE_CHECKING:
    from kubesim.fakeapi.server import FakeApiServer

Handler = Callable[["FakeApiServer", web.Request, dict[str, Any]], web.Response]


async def control(server: FakeApiServer, request: web.Request) -> web.Response:
    action = request.path[len("/_fake/") :].strip("/")
    data = await _body(request)
    handler = _ENDPOINTS.get((action, request.method))
    if handler is None:
        raise ApiError(404, f"no control endpoint {request.method} /_fake/{action}", "NotFound")
    return handler(server, request, data)


async def _body(request: web.Request) -> dict[str, Any]:
    data: Any = None
    if request.method in ("POST", "PUT"):
        raw = await request.read()
        data = parse_body(raw, request.content_type or "application/json") if raw else None
    return data if data is not None else {}


def _state(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    return json_response(server.state())


def _faults(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    return json_response(server.faults.to_dict())


def _clear_faults(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    server.clear_faults()
    return json_response(server.faults.to_dict())


def _set_faults(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    drop = data.pop("drop_watches", False)
    abrupt = data.pop("abrupt", True)
    server.faults = Faults.from_dict(data)
    dropped = server.drop_watches(abrupt=abrupt) if drop else 0
    return json_response({**server.faults.to_dict(), "dropped_watches": dropped})


def _fail_next(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    server.fail_next(int(data.get("count", 1)), status=int(data.get("status", 500)), verbs=data.get("verbs"), paths=data.get("paths"))
    return json_response(server.faults.to_dict())


def _compact(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    return json_response({"compactedResourceVersion": server.compact()})


def _drop_watches(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    abrupt = data.get("abrupt", request.query.get("abrupt", "true") in TRUE)
    resource = data.get("resource") or request.query.get("resource")
    return json_response({"dropped": server.drop_watches(abrupt=bool(abrupt), resource=resource, group=data.get("group"))})


def _serve(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    server.set_served(data["group"], data.get("version"), bool(data.get("served", True)))
    return json_response({"served": server.registry.groups()})


def _requests(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    since = int(request.query.get("since", 0))
    return json_response([r.to_dict() for r in list(server.requests)[since:]])


def _clear_requests(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    server.clear_requests()
    return json_response({})


def _objects(server: FakeApiServer, request: web.Request, data: dict[str, Any]) -> web.Response:
    n = server.load(data)
    return json_response({"applied": n, "resourceVersion": server.store.rv})


_ENDPOINTS: dict[tuple[str, str], Handler] = {
    ("state", "GET"): _state,
    ("faults", "GET"): _faults,
    ("faults", "DELETE"): _clear_faults,
    ("faults", "POST"): _set_faults,
    ("faults", "PUT"): _set_faults,
    ("fail-next", "POST"): _fail_next,
    ("compact", "POST"): _compact,
    ("drop-watches", "POST"): _drop_watches,
    ("serve", "POST"): _serve,
    ("requests", "GET"): _requests,
    ("requests", "DELETE"): _clear_requests,
    ("objects", "POST"): _objects,
}
