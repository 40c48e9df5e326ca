"""The verbs on a resource, as the real API server serves them: list, watch, get, create, update, patch, delete.

Each verb reads its request once (`Call`) and answers from the store;
subresources `binding` and `eviction` (PodDisruptionBudgets honoured) are
creates of their own. Watches stream from `watch.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from kubesim.fakeapi.disruption import check_eviction, disruption_condition
from kubesim.fakeapi.faults import RequestInfo, RequestRecord
from kubesim.fakeapi.raw_extension import raw_parameters
from kubesim.fakeapi.registry import ResourceType
from kubesim.fakeapi.responses import json_response, parse_body, success
from kubesim.fakeapi.selectors import Matcher, SelectorError, both, parse_field_selector, parse_label_selector
from kubesim.fakeapi.store import ApiError, Stored, invalid, not_found
from kubesim.fakeapi.watch import WatchSettings, stream

if TYPE_CHECKING:
    from kubesim.fakeapi.server import FakeApiServer

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


@dataclass(frozen=True)
class Call:
    """One request on a resource, read once: where it goes and how it asks."""

    server: FakeApiServer
    request: web.Request
    rec: RequestRecord
    info: RequestInfo
    t: ResourceType

    @property
    def query(self) -> Any:
        return self.request.query

    @property
    def api_version(self) -> str:
        return self.t.api_version(self.info.version)

    @property
    def dry_run(self) -> bool:
        return bool(self.query.get("dryRun") == "All")

    @property
    def content_type(self) -> str:
        return (self.request.content_type or "application/json").lower()

    @property
    def name(self) -> str:
        return self.info.name or ""

    def body(self, content_type: str | None = None) -> Any:
        return parse_body(self.info.body, content_type or self.content_type)

    def object_body(self) -> dict[str, Any]:
        obj = self.body()
        if not isinstance(obj, dict):
            raise ApiError(400, "the body of the request is not an object", "BadRequest")
        return obj


async def serve(server: FakeApiServer, request: web.Request, rec: RequestRecord, info: RequestInfo, t: ResourceType) -> web.StreamResponse:
    call = Call(server, request, rec, info, t)
    verb, sub = info.verb, info.subresource
    if verb in ("list", "watch", "deletecollection"):
        return await _collection(call)
    if verb == "create" and sub in ("binding", "eviction"):
        return _bind(call) if sub == "binding" else _evict(call)
    if verb == "create" and t.plural == "bindings":
        return _create_binding(call)
    handler = _VERBS.get(verb)
    if handler is None:
        raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
    return await handler(call)


async def _collection(call: Call) -> web.StreamResponse:
    q, t, store = call.query, call.t, call.server.store
    try:
        match = both(parse_label_selector(q.get("labelSelector")), parse_field_selector(q.get("fieldSelector"), t.field_selectors))
    except SelectorError as e:
        raise ApiError(400, str(e), "BadRequest") from e
    if call.info.verb == "watch":
        s = call.server
        settings = WatchSettings(s.bookmark_interval, s.default_watch_timeout, s._while_hung)
        return await stream(call.request, call.rec, store, t, call.info, match, settings)
    if call.info.verb == "deletecollection":
        return _delete_collection(call, match)
    try:
        limit = int(q.get("limit") or 0)
    except ValueError as e:
        raise ApiError(400, f"limit: Invalid value: {q.get('limit')!r}", "BadRequest") from e
    rv, items, token, remaining = store.list(
        t,
        namespace=call.info.namespace,
        match=match,
        limit=limit,
        continue_token=q.get("continue") or None,
        resource_version=q.get("resourceVersion"),
        resource_version_match=q.get("resourceVersionMatch") or None,
    )
    return list_response(t, call.api_version, rv, items, token, remaining)


def _delete_collection(call: Call, match: Matcher | None) -> web.Response:
    store = call.server.store
    _, objs, _, _ = store.list(call.t, namespace=call.info.namespace, match=match)
    items = []
    for each in objs:
        deleted, _ = store.delete(call.t, each.key[0], each.key[1], dry_run=call.dry_run)
        items.append(deleted)
    return list_response(call.t, call.api_version, store.rv, items, None, None)


def list_response(t: ResourceType, av: str, rv: int, items: Sequence[Stored], token: str | None, remaining: int | None) -> web.Response:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if token:
        meta["continue"] = token
    if remaining:
        meta["remainingItemCount"] = remaining
    head = orjson.dumps({"kind": t.list_kind, "apiVersion": av, "metadata": meta})
    with_type = t.custom
    body = head[:-1] + b',"items":[' + b",".join(s.encode(av, with_type) for s in items) + b"]}"
    return web.Response(body=body, content_type="application/json")


async def _get(call: Call) -> web.StreamResponse:
    s = call.server.store.lookup(call.t, call.info.namespace, call.name)
    if s is None:
        raise not_found(call.t, call.name)
    return json_response(s.encode(call.api_version))


def _bind(call: Call) -> web.Response:
    obj = call.object_body()
    bname = (obj.get("metadata") or {}).get("name")
    if bname and bname != call.name:
        raise ApiError(400, f"the name of the object ({bname}) does not match the name on the URL ({call.name})", "BadRequest")
    call.server.store.bind(call.info.namespace or "default", call.name, obj)
    return json_response(success(201), 201)


def _evict(call: Call) -> web.Response:
    """pods/eviction: preconditions, PodDisruptionBudgets (429), the DisruptionTarget condition, then the delete."""
    store, t, ns, name = call.server.store, call.t, call.info.namespace, call.name
    opts = call.object_body().get("deleteOptions") or {}
    pre = opts.get("preconditions") or {}
    current = store.require(t, ns, name)
    uid = current.obj["metadata"]["uid"]
    if pre.get("uid") and pre["uid"] != uid:
        raise ApiError(409, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {uid}", "Conflict")
    check_eviction(store, ns or "default", current.obj)
    dry_run = call.dry_run or opts.get("dryRun") == ["All"]
    if not dry_run and not current.obj["metadata"].get("deletionTimestamp"):
        store.patch(t, ns, name, {"status": {"conditions": [disruption_condition()]}}, "strategic", subresource="status", http=False)
    store.delete(t, ns, name, uid=pre.get("uid"), resource_version=pre.get("resourceVersion"), dry_run=dry_run)
    return json_response(success(201), 201)


def _create_binding(call: Call) -> web.Response:
    obj = call.body()
    if not isinstance(obj, dict) or not (obj.get("metadata") or {}).get("name"):
        raise ApiError(422, "Binding is invalid: metadata.name: Required value", "Invalid")
    call.server.store.bind(call.info.namespace or "default", obj["metadata"]["name"], obj)
    return json_response(success(201), 201)


async def _create(call: Call) -> web.StreamResponse:
    s = call.server.store.create(call.t, call.body(), version=call.info.version, namespace=call.info.namespace, dry_run=call.dry_run)
    if not call.dry_run and "yaml" not in call.content_type:
        call.server.raw_parameters.remember(call.t.plural, s.obj, raw_parameters(call.info.body, call.t.plural))
    return json_response(s.encode(call.api_version), 201)


async def _update(call: Call) -> web.StreamResponse:
    obj = call.object_body()
    av = call.api_version
    want_av = obj.get("apiVersion")
    if want_av and want_av != av:
        raise ApiError(400, f"the API version in the data ({want_av}) does not match the expected API version ({av})", "BadRequest")
    if call.info.subresource is None and "yaml" not in call.content_type:
        _check_parameters(call)
    s = call.server.store.update(
        call.t, obj, namespace=call.info.namespace, name=call.info.name, subresource=call.info.subresource, dry_run=call.dry_run
    )
    return json_response(s.encode(av))


def _check_parameters(call: Call) -> None:
    """An update must send the immutable spec's RawExtensions byte for byte as stored."""
    current = call.server.store.lookup(call.t, call.info.namespace, call.name)
    if current is None:
        return
    if not call.server.raw_parameters.unchanged(call.t.plural, current.obj, raw_parameters(call.info.body, call.t.plural)):
        raise invalid(call.t, call.name, 'spec: Invalid value: "object": field is immutable')


async def _patch(call: Call) -> web.StreamResponse:
    ptype = PATCH_TYPES.get(call.content_type)
    if ptype is None:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
            "UnsupportedMediaType",
        )
    if ptype == "apply" and not call.query.get("fieldManager"):
        raise ApiError(422, 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch', "Invalid")
    patch = call.body("yaml" if ptype == "apply" else "json")
    store, t, ns = call.server.store, call.t, call.info.namespace
    existed = store.lookup(t, ns, call.name) is not None
    s = store.patch(t, ns, call.name, patch, ptype, subresource=call.info.subresource, dry_run=call.dry_run, version=call.info.version)
    return json_response(s.encode(call.api_version), 200 if existed else 201)


async def _delete(call: Call) -> web.StreamResponse:
    opts = call.body() or {}
    pre = opts.get("preconditions") or {}
    dry = call.dry_run or opts.get("dryRun") == ["All"]
    s, removed = call.server.store.delete(
        call.t, call.info.namespace, call.name, uid=pre.get("uid"), resource_version=pre.get("resourceVersion"), dry_run=dry
    )
    return json_response(s.encode(call.api_version), 200 if removed else 202)


_VERBS: dict[str, Callable[[Call], Awaitable[web.StreamResponse]]] = {
    "get": _get,
    "create": _create,
    "update": _update,
    "patch": _patch,
    "delete": _delete,
}
