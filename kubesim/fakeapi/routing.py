"""The fake API server's HTTP entry: a request's path becomes a verb on a resource, or a discovery document.

`handle` logs the request, waits while the server is frozen, and turns any
failure into a `kind: Status` answer; `/_fake/` goes to the control
endpoints (`control.py`). A resource path is resolved as the real server
resolves it (`/api/v1/...`, `/apis/group/version/...`, namespaced or not, a
subresource), its verb named from the method, then faults and reactors get
their turn before the verb is served (`verbs.py`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim.fakeapi import control, verbs
from kubesim.fakeapi.faults import RequestInfo, RequestRecord
from kubesim.fakeapi.registry import ResourceType
from kubesim.fakeapi.responses import TRUE, error_response, json_response
from kubesim.fakeapi.store import ApiError

if TYPE_CHECKING:
    from kubesim.fakeapi.server import FakeApiServer

log = logging.getLogger("fakeapi")


def not_found() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", "NotFound")


def not_allowed() -> ApiError:
    return ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")


async def handle(server: FakeApiServer, request: web.Request) -> web.StreamResponse:
    """Every request: control endpoints apart; API requests logged, timed and answered, errors as Status."""
    if request.path.startswith("/_fake/") or request.path == "/_fake":
        try:
            return await control.control(server, request)
        except ApiError as e:
            return error_response(e)
        except (ValueError, KeyError, TypeError) as e:
            return error_response(ApiError(400, f"{type(e).__name__}: {e}", "BadRequest"))
    rec = RequestRecord(request.method, request.path, dict(request.query), user_agent=request.headers.get("User-Agent", ""))
    server.requests.append(rec)
    t0 = time.monotonic()
    await server._while_hung()
    try:
        resp = await _serve(server, request, rec)
    except ApiError as e:
        resp = error_response(e)
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as e:
        log.exception("fake API server failed on %s %s", request.method, request.path_qs)
        resp = error_response(ApiError(500, f"fake API server bug: {type(e).__name__}: {e}", "InternalError"))
    finally:
        rec.duration_ms = round((time.monotonic() - t0) * 1000, 3)
    if rec.status is None:
        rec.status = resp.status
    return resp


async def _serve(server: FakeApiServer, request: web.Request, rec: RequestRecord) -> web.StreamResponse:
    if server.token is not None and request.headers.get("Authorization") != f"Bearer {server.token}":
        rec.verb = "auth"
        raise ApiError(401, "Unauthorized", "Unauthorized")
    parts = [p for p in request.path.split("/") if p]
    body = await request.read() if request.method in ("POST", "PUT", "PATCH", "DELETE") else b""
    if parts in (["healthz"], ["readyz"], ["livez"], ["version"]):
        rec.verb = "get"
        await _inject_get(server, request, rec, body, "", "")
        return json_response(version_document(server.kubernetes_version)) if parts == ["version"] else web.Response(text="ok")
    if not parts or parts[0] not in ("api", "apis"):
        raise not_found()
    group, rest = ("", parts[1:]) if parts[0] == "api" else (parts[1], parts[2:]) if len(parts) >= 2 else (None, [])
    rec.verb = "get"
    if group is None or not rest:
        return await _group_discovery(server, request, rec, body, group)
    version, rest = rest[0], rest[1:]
    if not server.registry.served(group, version):
        await _inject_get(server, request, rec, body, group, version)
        raise not_found()
    if not rest:
        await _inject_get(server, request, rec, body, group, version)
        return json_response(server.registry.api_resource_list(group, version))
    return await _resource_request(server, request, rec, body, group, version, rest)


async def _inject_get(server: FakeApiServer, request: web.Request, rec: RequestRecord, body: bytes, group: str, version: str) -> None:
    """Faults and reactors for a request that is not on a resource (health, version, discovery)."""
    info = RequestInfo(request.method, "get", request.path, dict(request.query), group, version, "", None, None, None, body, rec.user_agent)
    await server._inject(info, rec)


async def _group_discovery(
    server: FakeApiServer, request: web.Request, rec: RequestRecord, body: bytes, group: str | None
) -> web.StreamResponse:
    """`/apis` (the groups), `/api` (the core versions) or `/apis/<group>` (its versions)."""
    await _inject_get(server, request, rec, body, group or "", "")
    if request.method != "GET":
        raise not_allowed()
    if group is None:
        return json_response(server.registry.api_group_list())
    if group == "":
        return json_response(server.registry.api_versions())
    doc = server.registry.api_group(group)
    if doc is None:
        raise not_found()
    return json_response(doc)


async def _resource_request(
    server: FakeApiServer, request: web.Request, rec: RequestRecord, body: bytes, group: str, version: str, rest: list[str]
) -> web.StreamResponse:
    """`[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`: resolved, its verb named, faults applied, then served."""
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        nt = server.registry.lookup(group, version, rest[2])
        if nt is not None and nt.namespaced:
            namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise not_found()
    t = server.registry.lookup(group, version, rest[0])
    if t is None:
        raise not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if (t.namespaced and name is not None and namespace is None) or (not t.namespaced and namespace is not None):
        raise not_found()
    verb = verb_of(request.method, t, name, sub, request.query)
    if t.namespaced and namespace is None and verb in ("create", "deletecollection"):
        raise not_allowed()
    rec.verb = verb
    rec.resource = t.plural if sub is None else f"{t.plural}/{sub}"
    info = RequestInfo(
        request.method,
        verb,
        request.path,
        dict(request.query),
        group,
        version,
        t.plural,
        sub,
        namespace,
        name,
        body,
        rec.user_agent,
        request.content_type,
    )
    answer = await server._inject(info, rec)
    if answer is not None:
        return answer
    return await verbs.serve(server, request, rec, info, t)


def verb_of(method: str, t: ResourceType, name: str | None, sub: str | None, query: Any) -> str:
    """The Kubernetes verb of a request (405 if the resource does not allow it, 404 for an unknown subresource)."""
    if sub is not None:
        allowed = t.subresources.get(sub)
        if allowed is None:
            raise not_found()
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "POST": "create"}.get(method, "")
        if verb not in allowed:
            raise not_allowed()
        return verb
    if name is None:
        verb = {"GET": "watch" if query.get("watch") in TRUE else "list", "POST": "create", "DELETE": "deletecollection"}.get(method, "")
    else:
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
    if verb not in t.verbs:
        raise not_allowed()
    return verb


def version_document(kubernetes_version: str) -> dict[str, Any]:
    m = re.match(r"v(\d+)\.(\d+)\.\d+(.?)", kubernetes_version)
    major, minor = (m.group(1), m.group(2)) if m else ("1", "34")
    if m and m.group(3) in ("-", "+"):
        minor += "+"  # a distribution's build (v1.36.1-eks-…): its minor reads "36+", as EKS and GKE report it
    return {
        "major": major,
        "minor": minor,
        "gitVersion": kubernetes_version,
        "gitCommit": "fake",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
