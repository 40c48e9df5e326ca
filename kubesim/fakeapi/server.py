"""A fake Kubernetes API server over real HTTP (aiohttp), for tests of the production client path.

Run it in the test's event loop (`async with FakeApiServer() as api:`) or as
a subprocess (`python -m kubesim.fakeapi`). Clients reach it exactly as they
reach a real cluster: through a kubeconfig (`write_kubeconfig`), discovery,
list/watch with resourceVersions, and writes; tests seed and inspect state
with the Python helpers (privileged: they bypass HTTP validation and status
isolation) and inject faults (errors, latency, dropped watches, compaction,
API groups switched off). See `kubesim/fakeapi/__init__.py` for the overview.
"""

from __future__ import annotations

import asyncio
import builtins
import gc
import inspect
import logging
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from kubesim.fakeapi.crd import CRD_TYPE, crd_errors, resource_type
from kubesim.fakeapi.disruption import check_eviction, disruption_condition
from kubesim.fakeapi.raw_extension import raw_parameters, stored_parameters
from kubesim.fakeapi.registry import Registry, ResourceType, default_types
from kubesim.fakeapi.selectors import SelectorError, both, parse_field_selector, parse_label_selector
from kubesim.fakeapi.store import ApiError, Store, Stored, Watcher, invalid, not_found

log = logging.getLogger("fakeapi")

# The CRDs the project ships: served by default, exactly as a cluster would have them installed.
SHIPPED_CRDS = Path(__file__).resolve().parents[2] / "charts" / "dra-extender" / "crds"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
TRUE = ("true", "1", "True", "TRUE", "t", "T")
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


# ---------------------------------------------------------------------- faults, request log, reactors


@dataclass
class Faults:
    """Injected failures for non-`/_fake` requests; `verbs`/`paths` narrow which requests they hit."""

    error_rate: float = 0.0  # fraction of matching requests answered with `error_status`
    error_status: int = 500  # 500, 429 (with Retry-After), 503, 504...
    latency_ms: float = 0.0  # added before answering (before the first byte of a watch)
    jitter_ms: float = 0.0  # uniform extra latency in [0, jitter_ms]
    verbs: frozenset[str] | None = None  # Kubernetes verbs (list, watch, get, create, update, patch, delete) or HTTP methods
    paths: tuple[str, ...] | None = None  # regular expressions searched in the request path
    retry_after_seconds: int = 1
    fail_next: int = 0  # the next N matching requests fail for certain (deterministic)
    # A frozen server (its process stopped, its connections open): every request waits
    # unanswered and open watches send nothing until this is cleared; then all proceeds.
    # Ignores `verbs`/`paths`. /_fake stays served, to clear it.
    hang: bool = False

    def matches(self, method: str, verb: str, path: str) -> bool:
        if self.verbs is not None and verb not in self.verbs and method not in self.verbs:
            return False
        return not (self.paths is not None and not any(re.search(p, path) for p in self.paths))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verbs"] = sorted(self.verbs) if self.verbs is not None else None
        d["paths"] = list(self.paths) if self.paths is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Faults:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fault settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        kw = dict(data)
        if kw.get("verbs") is not None:
            kw["verbs"] = frozenset(kw["verbs"])
        if kw.get("paths") is not None:
            kw["paths"] = tuple(kw["paths"])
        return cls(**kw)


@dataclass
class RequestRecord:
    """One API request as the server saw it (status is set when the answer starts)."""

    method: str
    path: str
    query: dict[str, str]
    verb: str = ""
    resource: str = ""
    status: int | None = None
    started: float = field(default_factory=time.time)
    duration_ms: float | None = None
    fault: str | None = None  # "error" or "reactor" when injected
    user_agent: str = ""  # tells the extender's requests from the test's own client

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RequestInfo:
    """What a reactor sees about a request."""

    method: str
    verb: str
    path: str
    query: dict[str, str]
    group: str
    version: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


# A reactor may answer a request itself: return None to pass, an ApiError to fail it,
# (status, body) to answer it, or a web.Response. It may be a coroutine function.
Reactor = Callable[[RequestInfo], Any]


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def _error(e: ApiError) -> web.Response:
    return _json(e.body(), e.code, e.headers or None)


def _success(code: int = 201) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _parse_body(data: bytes, content_type: str) -> Any:
    if not data:
        return None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(data)
        return orjson.loads(data)
    except (orjson.JSONDecodeError, yaml.YAMLError) as e:
        raise ApiError(400, f"the request body could not be decoded: {e}", "BadRequest") from e


def iter_manifests(*sources: str | Path) -> Iterable[dict[str, Any]]:
    """Objects in YAML/JSON files or directories (recursive, sorted); multi-doc and `kind: List` unrolled."""
    for source in sources:
        p = Path(source)
        files = sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml", ".json")) if p.is_dir() else [p]
        for f in files:
            text = f.read_text()
            docs = [orjson.loads(text)] if f.suffix == ".json" else list(yaml.safe_load_all(text))
            for doc in docs:
                yield from _unroll(doc)


def _unroll(doc: Any) -> Iterable[dict[str, Any]]:
    if not isinstance(doc, dict):
        return
    if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _unroll(item)
    else:
        yield doc


# ---------------------------------------------------------------------- the server


class FakeApiServer:
    """A Kubernetes API server fake with real resourceVersions, watches, conflicts and faults."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
        history_limit: int = 100_000,
        resource_versions: Sequence[str] = ("v1", "v1beta2"),
        device_taint_rule_versions: Sequence[str] = ("v1beta2", "v1alpha3"),
        crds: bool = True,
        extra_types: Iterable[ResourceType] = (),
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        auto_create_namespaces: bool = True,
        token: str | None = None,
        kubernetes_version: str = "v1.34.0",
        default_watch_timeout: float | None = None,
        request_log_limit: int = 100_000,
        seed: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.token = token
        self.kubernetes_version = kubernetes_version
        self.default_watch_timeout = default_watch_timeout
        self.registry = Registry(
            [
                *default_types(resource_versions=resource_versions, device_taint_rule_versions=device_taint_rule_versions),
                CRD_TYPE,
                *extra_types,
            ]
        )
        self.store = Store(self.registry, history_limit=history_limit)
        self.store.auto_create_namespaces = auto_create_namespaces
        self.store.observers[CRD_TYPE.key] = [self._crd_changed]
        for ns in namespaces:
            self.store.create(self.registry.types[("", "namespaces")], {"metadata": {"name": ns}}, http=False)
        # RawExtension bytes as their creator sent them, by (plural, namespace, name, uid).
        self._raw_parameters: dict[tuple[str, str, str, str], list[bytes]] = {}
        self.faults = Faults()
        self.requests: deque[RequestRecord] = deque(maxlen=request_log_limit)
        self.reactors: list[Reactor] = []
        self._rng = random.Random(seed)
        self._runner: web.AppRunner | None = None
        if crds:
            for crd in iter_manifests(SHIPPED_CRDS):
                self.install_crd(crd)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> FakeApiServer:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0, handler_cancellation=True
        )  # a client that goes away ends its watch
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]  # started above: the server exists
        self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.store.drop_watches(abrupt=False)
        await asyncio.sleep(0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """A kubeconfig (insecure, bearer token) that `kubernetes_asyncio.config.load_kube_config` accepts."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "fake", "user": {"token": self.token or "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
            "preferences": {},
        }
        p.write_text(yaml.safe_dump(config, sort_keys=False))
        return p

    # ------------------------------------------------------------------ CustomResourceDefinitions

    def install_crd(self, crd: dict[str, Any]) -> dict[str, Any]:
        """Store a CRD as `kubectl apply` would, refused (422, the real wording) as the real server refuses it."""
        errors = crd_errors(crd)
        if errors:
            raise invalid(CRD_TYPE, str((crd.get("metadata") or {}).get("name", "")), errors)
        return self.apply(crd)

    def _crd_changed(self, etype: str, crd: dict[str, Any]) -> None:
        """A stored CRD serves its kind (with its schema); a deleted one stops serving it and drops its objects."""
        t = resource_type(crd)
        if etype == "DELETED":
            self.registry.types.pop(t.key, None)
            for w in list(self.store.watchers.pop(t.key, ())):
                w.close(abrupt=False)
            self.store.objects.pop(t.key, None)
        else:
            self.registry.add(t)

    # ------------------------------------------------------------------ Python-level helpers (privileged)

    def _type(self, kind_or_resource: str, group: str | None = None) -> ResourceType:
        return self.registry.resolve(kind_or_resource, group)

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Store a new object (status kept as given); raises ApiError (409 if it exists)."""
        obj = orjson.loads(orjson.dumps(obj))
        t, version = self.registry.for_object(obj)
        return self.store.create(t, obj, version=version, namespace=namespace, http=False).copy()

    def get(self, kind_or_resource: str, namespace: str | None, name: str, *, group: str | None = None) -> dict[str, Any] | None:
        s = self.store.lookup(self._type(kind_or_resource, group), namespace, name)
        return s.copy() if s is not None else None

    def update(self, obj: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        """Replace an object as given, status included; a set `metadata.resourceVersion` must be current (409)."""
        obj = orjson.loads(orjson.dumps(obj))
        t, _ = self.registry.for_object(obj)
        meta = obj.get("metadata") or {}
        return self.store.update(t, obj, namespace=meta.get("namespace"), name=meta.get("name"), subresource=subresource, http=False).copy()

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.update(obj, subresource="status")

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace (no resourceVersion check): seeding state in one call."""
        return self._apply(orjson.loads(orjson.dumps(obj))).copy()

    def _apply(self, obj: dict[str, Any]) -> Stored:
        """Upsert an object the store may own (no copy in or out: bulk loads stay fast)."""
        t, version = self.registry.for_object(obj)
        meta = obj.setdefault("metadata", {})
        if self.store.lookup(t, meta.get("namespace") or "default", meta.get("name", "")) is None:
            return self.store.create(t, obj, version=version, http=False)
        meta.pop("resourceVersion", None)
        return self.store.update(t, obj, namespace=meta.get("namespace"), name=meta.get("name"), http=False)

    def patch(
        self,
        kind_or_resource: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        """patch_type: merge, strategic, json or apply."""
        t = self._type(kind_or_resource, group)
        return self.store.patch(t, namespace, name, patch, patch_type, subresource=subresource, http=False).copy()

    def delete(
        self,
        kind_or_resource: str,
        namespace: str | None,
        name: str,
        *,
        group: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        force: bool = False,
    ) -> dict[str, Any] | None:
        """Delete (finalizers only mark deletionTimestamp unless force). Returns the object, None if missing."""
        t = self._type(kind_or_resource, group)
        if self.store.lookup(t, namespace, name) is None:
            return None
        stored, _ = self.store.delete(t, namespace, name, uid=uid, resource_version=resource_version, force=force)
        return stored.copy()

    def list(
        self,
        kind_or_resource: str,
        namespace: str | None = None,
        *,
        group: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        t = self._type(kind_or_resource, group)
        match = both(parse_label_selector(label_selector), parse_field_selector(field_selector, t.field_selectors))
        return [s.copy() for s in self.store.list(t, namespace=namespace, match=match)[1]]

    def count(self, kind_or_resource: str, *, group: str | None = None) -> int:
        return len(self.store.table(self._type(kind_or_resource, group)))

    def bind(self, namespace: str, name: str, node: str) -> dict[str, Any]:
        return self.store.bind(namespace, name, {"target": {"kind": "Node", "name": node}}).copy()

    def load(self, *sources: str | Path | dict[str, Any], copy: bool = True) -> int:
        """Apply (upsert) manifests: files, directories, or objects (`kind: List` unrolled).

        The bulk way to seed state: nothing is copied back, and GC is paused meanwhile.
        `copy=False` hands the given dicts to the store (which stamps and keeps them: don't
        touch them afterwards), saving a parse per object. CustomResourceDefinitions are
        installed first (and refused as the real server refuses them). Returns how many
        objects were applied.
        """
        n = 0
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for source in sources:
                if isinstance(source, dict):
                    objs: Iterable[dict[str, Any]] = _unroll(orjson.loads(orjson.dumps(source)) if copy else source)
                else:
                    objs = iter_manifests(source)
                objs = sorted(objs, key=lambda o: o.get("kind") != "CustomResourceDefinition")  # stable: CRDs first
                for obj in objs:
                    if obj.get("kind") == "CustomResourceDefinition":
                        self.install_crd(obj)
                    else:
                        self._apply(obj)
                    n += 1
        finally:
            if gc_was_enabled:
                gc.enable()
        return n

    # ------------------------------------------------------------------ fault controls

    def compact(self) -> int:
        """Move the compaction point to now: older resourceVersions answer 410. Returns it."""
        return self.store.compact()

    def set_faults(self, **kw: Any) -> Faults:
        """Replace the fault configuration (see Faults); no arguments clears it."""
        self.faults = Faults.from_dict(kw)
        return self.faults

    def clear_faults(self) -> None:
        self.faults = Faults()

    def fail_next(
        self, count: int = 1, *, status: int = 500, verbs: Iterable[str] | None = None, paths: Iterable[str] | None = None
    ) -> None:
        """Fail exactly the next `count` matching requests with `status`."""
        self.faults = Faults(
            error_status=status,
            fail_next=count,
            verbs=frozenset(verbs) if verbs is not None else None,
            paths=tuple(paths) if paths is not None else None,
        )

    def drop_watches(self, *, abrupt: bool = True, resource: str | None = None, group: str | None = None) -> int:
        """End open watch streams now: abrupt cuts the connection (no ERROR, no final chunk). Returns how many."""
        keys = None
        if resource is not None:
            keys = [self._type(resource, group).key]
        return self.store.drop_watches(abrupt=abrupt, keys=keys)

    def set_served(self, group: str, version: str | None = None, served: bool = True) -> None:
        """Switch a group (or one version) on or off: off answers 404, vanishes from discovery, ends its watches."""
        self.registry.set_served(group, version, served)
        if not served:
            keys = [t.key for t in self.registry.types.values() if t.group == group]
            for key in keys:
                for w in list(self.store.watchers.get(key, ())):
                    if version is None or w.version == version:
                        w.close(abrupt=False)
                        self.store.watchers[key].discard(w)

    def add_reactor(self, fn: Reactor) -> Reactor:
        """Let `fn` answer requests first (see Reactor). Returns fn, for remove_reactor."""
        self.reactors.append(fn)
        return fn

    def remove_reactor(self, fn: Reactor) -> None:
        self.reactors.remove(fn)

    def clear_requests(self) -> None:
        self.requests.clear()

    def requests_for(
        self, *, verb: str | None = None, resource: str | None = None, method: str | None = None
    ) -> builtins.list[RequestRecord]:
        return [
            r
            for r in self.requests
            if (verb is None or r.verb == verb) and (resource is None or r.resource == resource) and (method is None or r.method == method)
        ]

    @property
    def open_watches(self) -> int:
        return len(self.store.all_watchers())

    def watches_on(self, resource: str, *, group: str | None = None) -> int:
        return len(self.store.watchers.get(self._type(resource, group).key, ()))

    async def wait_for_watches(
        self, count: int = 1, *, resource: str | None = None, group: str | None = None, timeout: float = 5.0
    ) -> None:
        """Wait until at least `count` watches are open (on `resource` if given)."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.watches_on(resource, group=group) if resource else self.open_watches
            if n >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n} open watches, wanted {count}")
            await asyncio.sleep(0.01)

    def state(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "resourceVersion": self.store.rv,
            "compactedResourceVersion": self.store.history_start,
            "objects": {t.resource_name(): len(self.store.table(t)) for t in self.registry.types.values() if t.plural != "bindings"},
            "watches": self.open_watches,
            "faults": self.faults.to_dict(),
            "served": self.registry.groups(),
            "requests": len(self.requests),
        }

    # ------------------------------------------------------------------ HTTP entry

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_fake/") or request.path == "/_fake":
            try:
                return await self._control(request)
            except ApiError as e:
                return _error(e)
            except (ValueError, KeyError, TypeError) as e:
                return _error(ApiError(400, f"{type(e).__name__}: {e}", "BadRequest"))
        rec = RequestRecord(request.method, request.path, dict(request.query), user_agent=request.headers.get("User-Agent", ""))
        self.requests.append(rec)
        t0 = time.monotonic()
        await self._while_hung()
        try:
            resp = await self._serve(request, rec)
        except ApiError as e:
            resp = _error(e)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("fake API server failed on %s %s", request.method, request.path_qs)
            resp = _error(ApiError(500, f"fake API server bug: {type(e).__name__}: {e}", "InternalError"))
        finally:
            rec.duration_ms = round((time.monotonic() - t0) * 1000, 3)
        if rec.status is None:
            rec.status = resp.status
        return resp

    async def _serve(self, request: web.Request, rec: RequestRecord) -> web.StreamResponse:
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            rec.verb = "auth"
            raise ApiError(401, "Unauthorized", "Unauthorized")
        parts = [p for p in request.path.split("/") if p]
        query = request.query
        method = request.method
        body = await request.read() if method in ("POST", "PUT", "PATCH", "DELETE") else b""

        # --- non-resource paths and discovery
        if parts in (["healthz"], ["readyz"], ["livez"]):
            rec.verb = "get"
            await self._inject(RequestInfo(method, "get", request.path, dict(query), "", "", "", None, None, None, body), rec)
            return web.Response(text="ok")
        if parts == ["version"]:
            rec.verb = "get"
            await self._inject(RequestInfo(method, "get", request.path, dict(query), "", "", "", None, None, None, body), rec)
            return _json(self._version())
        if not parts or parts[0] not in ("api", "apis"):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if parts[0] == "api":
            group, rest = "", parts[1:]
        else:
            if len(parts) < 2:
                rest, group = [], None
            else:
                group, rest = parts[1], parts[2:]
        rec.verb = "get"
        if group is None or not rest:
            info = RequestInfo(method, "get", request.path, dict(query), group or "", "", "", None, None, None, body)
            await self._inject(info, rec)
            if method != "GET":
                raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
            if group is None:
                return _json(self.registry.api_group_list())
            if group == "":
                return _json(self.registry.api_versions())
            doc = self.registry.api_group(group)
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            return _json(doc)
        version, rest = rest[0], rest[1:]
        if not self.registry.served(group, version):
            await self._inject(RequestInfo(method, "get", request.path, dict(query), group, version, "", None, None, None, body), rec)
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if not rest:
            await self._inject(RequestInfo(method, "get", request.path, dict(query), group, version, "", None, None, None, body), rec)
            return _json(self.registry.api_resource_list(group, version))

        # --- resource paths
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            nt = self.registry.lookup(group, version, rest[2])
            if nt is not None and nt.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        t = self.registry.lookup(group, version, rest[0])
        if t is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (t.namespaced and name is not None and namespace is None) or (not t.namespaced and namespace is not None):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        verb = self._verb(method, t, name, sub, query)
        if t.namespaced and namespace is None and verb in ("create", "deletecollection"):
            raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
        rec.verb = verb
        rec.resource = t.plural if sub is None else f"{t.plural}/{sub}"
        info = RequestInfo(method, verb, request.path, dict(query), group, version, t.plural, sub, namespace, name, body)
        answer = await self._inject(info, rec)
        if answer is not None:
            return answer
        return await self._resource(request, rec, info, t)

    def _verb(self, method: str, t: ResourceType, name: str | None, sub: str | None, query: Any) -> str:
        if sub is not None:
            allowed = t.subresources.get(sub)
            if allowed is None:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "POST": "create"}.get(method, "")
            if verb not in allowed:
                raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
            return verb
        if name is None:
            verb = {"GET": "watch" if query.get("watch") in TRUE else "list", "POST": "create", "DELETE": "deletecollection"}.get(
                method, ""
            )
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
        if verb not in t.verbs:
            raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
        return verb

    async def _while_hung(self) -> None:
        while self.faults.hang:
            await asyncio.sleep(0.05)

    async def _inject(self, info: RequestInfo, rec: RequestRecord) -> web.StreamResponse | None:
        """Latency, injected errors and reactors, in that order."""
        f = self.faults
        hit = f.matches(info.method, info.verb, info.path)
        if hit and (f.latency_ms or f.jitter_ms):
            await asyncio.sleep((f.latency_ms + self._rng.uniform(0, f.jitter_ms)) / 1000)
        fail = False
        if hit and f.fail_next > 0:
            f.fail_next -= 1
            fail = True
        elif hit and f.error_rate > 0 and self._rng.random() < f.error_rate:
            fail = True
        if fail:
            rec.fault = "error"
            code = f.error_status
            headers = {}
            details: dict[str, Any] | None = None
            if code == 429:
                headers["Retry-After"] = str(f.retry_after_seconds)
                details = {"retryAfterSeconds": f.retry_after_seconds}
                message = "Too many requests, please try again later (injected fault)"
            else:
                message = f"Internal error occurred: injected fault (HTTP {code})"
            raise ApiError(code, message, None, details=details, headers=headers)
        for reactor in list(self.reactors):
            result = reactor(info)
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                continue
            rec.fault = "reactor"
            if isinstance(result, ApiError):
                raise result
            if isinstance(result, web.StreamResponse):
                return result
            status, data = result
            return _json(data, status)
        return None

    def _version(self) -> dict[str, Any]:
        m = re.match(r"v(\d+)\.(\d+)", self.kubernetes_version)
        major, minor = (m.group(1), m.group(2)) if m else ("1", "34")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.kubernetes_version,
            "gitCommit": "fake",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    # ------------------------------------------------------------------ resource verbs

    async def _resource(self, request: web.Request, rec: RequestRecord, info: RequestInfo, t: ResourceType) -> web.StreamResponse:
        q = request.query
        store = self.store
        av = t.api_version(info.version)
        dry_run = q.get("dryRun") == "All"
        ctype = (request.content_type or "application/json").lower()
        verb, ns, name, sub = info.verb, info.namespace, info.name, info.subresource

        if verb in ("list", "watch", "deletecollection"):
            try:
                match = both(parse_label_selector(q.get("labelSelector")), parse_field_selector(q.get("fieldSelector"), t.field_selectors))
            except SelectorError as e:
                raise ApiError(400, str(e), "BadRequest") from e
            if verb == "watch":
                return await self._watch(request, rec, t, info, match)
            if verb == "deletecollection":
                _, objs, _, _ = store.list(t, namespace=ns, match=match)
                items = []
                for each in objs:
                    deleted, _ = store.delete(t, each.key[0], each.key[1], dry_run=dry_run)
                    items.append(deleted)
                return self._list_response(t, av, store.rv, items, None, None)
            try:
                limit = int(q.get("limit") or 0)
            except ValueError as e:
                raise ApiError(400, f"limit: Invalid value: {q.get('limit')!r}", "BadRequest") from e
            rv, items, token, remaining = store.list(
                t,
                namespace=ns,
                match=match,
                limit=limit,
                continue_token=q.get("continue") or None,
                resource_version=q.get("resourceVersion"),
                resource_version_match=q.get("resourceVersionMatch") or None,
            )
            return self._list_response(t, av, rv, items, token, remaining)

        if verb == "get":
            s = store.lookup(t, ns, name or "")
            if s is None:
                raise not_found(t, name or "")
            return _json(s.encode(av))

        if verb == "create" and sub in ("binding", "eviction"):
            obj = _parse_body(info.body, ctype)
            if not isinstance(obj, dict):
                raise ApiError(400, "the body of the request is not an object", "BadRequest")
            if sub == "binding":
                bname = (obj.get("metadata") or {}).get("name")
                if bname and bname != name:
                    raise ApiError(400, f"the name of the object ({bname}) does not match the name on the URL ({name})", "BadRequest")
                store.bind(ns or "default", name or "", obj)
                return _json(_success(201), 201)
            opts = obj.get("deleteOptions") or {}
            pre = opts.get("preconditions") or {}
            current = store.require(t, ns, name or "")
            if pre.get("uid") and pre["uid"] != current.obj["metadata"]["uid"]:
                raise ApiError(
                    409,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {current.obj['metadata']['uid']}",
                    "Conflict",
                )
            check_eviction(store, ns or "default", current.obj)
            if not (dry_run or opts.get("dryRun") == ["All"]) and not current.obj["metadata"].get("deletionTimestamp"):
                store.patch(
                    t, ns, name or "", {"status": {"conditions": [disruption_condition()]}}, "strategic", subresource="status", http=False
                )
            store.delete(
                t,
                ns,
                name or "",
                uid=pre.get("uid"),
                resource_version=pre.get("resourceVersion"),
                dry_run=dry_run or opts.get("dryRun") == ["All"],
            )
            return _json(_success(201), 201)

        if verb == "create" and t.plural == "bindings":
            obj = _parse_body(info.body, ctype)
            if not isinstance(obj, dict) or not (obj.get("metadata") or {}).get("name"):
                raise ApiError(422, "Binding is invalid: metadata.name: Required value", "Invalid")
            store.bind(ns or "default", obj["metadata"]["name"], obj)
            return _json(_success(201), 201)

        if verb == "create":
            obj = _parse_body(info.body, ctype)
            s = store.create(t, obj, version=info.version, namespace=ns, dry_run=dry_run)
            if not dry_run and "yaml" not in ctype:
                self._remember_parameters(t, s, raw_parameters(info.body, t.plural))
            return _json(s.encode(av), 201)

        if verb == "update":
            obj = _parse_body(info.body, ctype)
            if not isinstance(obj, dict):
                raise ApiError(400, "the body of the request is not an object", "BadRequest")
            want_av = obj.get("apiVersion")
            if want_av and want_av != av:
                raise ApiError(400, f"the API version in the data ({want_av}) does not match the expected API version ({av})", "BadRequest")
            if sub is None and "yaml" not in ctype:
                self._check_parameters(t, ns, name or "", raw_parameters(info.body, t.plural))
            s = store.update(t, obj, namespace=ns, name=name, subresource=sub, dry_run=dry_run)
            return _json(s.encode(av))

        if verb == "patch":
            ptype = PATCH_TYPES.get(ctype)
            if ptype is None:
                raise ApiError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
                    "UnsupportedMediaType",
                )
            if ptype == "apply" and not q.get("fieldManager"):
                raise ApiError(
                    422, 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch', "Invalid"
                )
            patch = _parse_body(info.body, "yaml" if ptype == "apply" else "json")
            existed = store.lookup(t, ns, name or "") is not None
            s = store.patch(t, ns, name or "", patch, ptype, subresource=sub, dry_run=dry_run, version=info.version)
            return _json(s.encode(av), 200 if existed else 201)

        if verb == "delete":
            opts = _parse_body(info.body, ctype) or {}
            pre = opts.get("preconditions") or {}
            dry = dry_run or opts.get("dryRun") == ["All"]
            s, removed = store.delete(t, ns, name or "", uid=pre.get("uid"), resource_version=pre.get("resourceVersion"), dry_run=dry)
            return _json(s.encode(av), 200 if removed else 202)

        raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")

    def _parameters_key(self, t: ResourceType, obj: dict[str, Any]) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        return (t.plural, meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "")

    def _remember_parameters(self, t: ResourceType, stored: Stored, raw: builtins.list[bytes] | None) -> None:
        if raw is not None:
            self._raw_parameters[self._parameters_key(t, stored.obj)] = raw

    def _check_parameters(self, t: ResourceType, namespace: str | None, name: str, raw: builtins.list[bytes] | None) -> None:
        """An update must send the immutable spec's RawExtensions byte for byte as stored."""
        current = self.store.lookup(t, namespace, name)
        if raw is None or current is None:
            return
        key = self._parameters_key(t, current.obj)
        stored = self._raw_parameters.get(key)
        if stored is None:
            stored = stored_parameters(current.obj, t.plural)
        if raw != stored:
            raise invalid(t, name, 'spec: Invalid value: "object": field is immutable')

    def _list_response(
        self, t: ResourceType, av: str, rv: int, items: Sequence[Stored], token: str | None, remaining: int | None
    ) -> web.Response:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        if remaining:
            meta["remainingItemCount"] = remaining
        head = orjson.dumps({"kind": t.list_kind, "apiVersion": av, "metadata": meta})
        with_type = t.custom
        body = head[:-1] + b',"items":[' + b",".join(s.encode(av, with_type) for s in items) + b"]}"
        return web.Response(body=body, content_type="application/json")

    async def _watch(self, request: web.Request, rec: RequestRecord, t: ResourceType, info: RequestInfo, match: Any) -> web.StreamResponse:
        q = request.query
        bookmarks = q.get("allowWatchBookmarks") in TRUE
        send_initial = q.get("sendInitialEvents") in TRUE
        if send_initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise ApiError(422, "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true", "Invalid")
        timeout: float | None = self.default_watch_timeout
        if q.get("timeoutSeconds"):
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError as e:
                raise ApiError(400, f"timeoutSeconds: Invalid value: {q['timeoutSeconds']!r}", "BadRequest") from e
        av = t.api_version(info.version)
        w = self.store.open_watch(
            t, info.version, namespace=info.namespace, match=match, resource_version=q.get("resourceVersion"), send_initial=send_initial
        )
        if send_initial:
            mark = {
                "kind": t.kind,
                "apiVersion": av,
                "metadata": {"resourceVersion": str(self.store.rv), "annotations": {"k8s.io/initial-events-end": "true"}},
            }
            w.queue.put_nowait(b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n")
        rec.status = 200
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        next_mark = loop.time() + self.bookmark_interval if bookmarks else None
        try:
            await resp.prepare(request)
            while True:
                now = loop.time()
                waits = [x - now for x in (deadline, next_mark) if x is not None]
                try:
                    if waits:
                        async with asyncio.timeout(max(0.0, min(waits))):
                            line = await w.queue.get()
                    else:
                        line = await w.queue.get()
                except TimeoutError:
                    now = loop.time()
                    if deadline is not None and now >= deadline:
                        break
                    if next_mark is not None and now >= next_mark:
                        await self._while_hung()
                        if w.queue.empty():
                            mark = {"kind": t.kind, "apiVersion": av, "metadata": {"resourceVersion": str(self.store.rv)}}
                            await resp.write(b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n")
                        next_mark = now + self.bookmark_interval
                    continue
                await self._while_hung()
                if line is Watcher.DROP:
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    return resp
                if line is Watcher.CLOSE:
                    break
                batch = [line]
                ended = None
                while not w.queue.empty() and len(batch) < 512:
                    nxt = w.queue.get_nowait()
                    if nxt is Watcher.DROP or nxt is Watcher.CLOSE:
                        ended = nxt
                        break
                    batch.append(nxt)
                await resp.write(b"".join(batch))
                if ended is Watcher.DROP:
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    return resp
                if ended is Watcher.CLOSE:
                    break
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.store.close_watch(w)
        return resp

    # ------------------------------------------------------------------ /_fake control endpoints

    async def _control(self, request: web.Request) -> web.Response:
        action = request.path[len("/_fake/") :].strip("/")
        method = request.method
        data: Any = None
        if method in ("POST", "PUT"):
            raw = await request.read()
            data = _parse_body(raw, request.content_type or "application/json") if raw else None
        if data is None:
            data = {}
        if action == "state" and method == "GET":
            return _json(self.state())
        if action == "faults":
            if method == "GET":
                return _json(self.faults.to_dict())
            if method == "DELETE":
                self.clear_faults()
                return _json(self.faults.to_dict())
            if method in ("POST", "PUT"):
                drop = data.pop("drop_watches", False)
                abrupt = data.pop("abrupt", True)
                self.faults = Faults.from_dict(data)
                dropped = self.drop_watches(abrupt=abrupt) if drop else 0
                return _json({**self.faults.to_dict(), "dropped_watches": dropped})
        if action == "fail-next" and method == "POST":
            self.fail_next(int(data.get("count", 1)), status=int(data.get("status", 500)), verbs=data.get("verbs"), paths=data.get("paths"))
            return _json(self.faults.to_dict())
        if action == "compact" and method == "POST":
            return _json({"compactedResourceVersion": self.compact()})
        if action == "drop-watches" and method == "POST":
            abrupt = data.get("abrupt", request.query.get("abrupt", "true") in TRUE)
            n = self.drop_watches(
                abrupt=bool(abrupt), resource=data.get("resource") or request.query.get("resource"), group=data.get("group")
            )
            return _json({"dropped": n})
        if action == "serve" and method == "POST":
            self.set_served(data["group"], data.get("version"), bool(data.get("served", True)))
            return _json({"served": self.registry.groups()})
        if action == "requests":
            if method == "GET":
                since = int(request.query.get("since", 0))
                return _json([r.to_dict() for r in list(self.requests)[since:]])
            if method == "DELETE":
                self.clear_requests()
                return _json({})
        if action == "objects" and method == "POST":
            n = self.load(data)
            return _json({"applied": n, "resourceVersion": self.store.rv})
        raise ApiError(404, f"no control endpoint {method} /_fake/{action}", "NotFound")


__all__ = ["FakeApiServer", "Faults", "RequestInfo", "RequestRecord", "iter_manifests"]
