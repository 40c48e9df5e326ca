"""A fake Kubernetes API server over real HTTP (aiohttp), for tests of the production client path.

Run it in the test's event loop (`async with FakeApiServer() as api:`) or as
a subprocess (`python -m kubesim.fakeapi`). Clients reach it exactly as they
reach a real cluster: through a kubeconfig (`write_kubeconfig`), discovery,
list/watch with resourceVersions, and writes; tests seed and inspect state
with the Python helpers (privileged: they bypass HTTP validation and status
isolation) and inject faults (errors, latency, dropped watches, compaction,
API groups switched off). See `kubesim/fakeapi/__init__.py` for the overview.

This module holds the server's state, lifecycle and Python helpers; the
HTTP side is `routing.py` (paths and discovery) and `verbs.py`, watches and
their controls `watch.py`, faults, reactors and the request log `faults.py`,
the `/_fake/` endpoints `control.py`.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from kubesim.fakeapi import routing
from kubesim.fakeapi.crd import CRD_TYPE, crd_errors, resource_type
from kubesim.fakeapi.faults import FaultControls, Faults, RequestInfo, RequestRecord
from kubesim.fakeapi.raw_extension import RawParameters
from kubesim.fakeapi.registry import Registry, ResourceType, default_types
from kubesim.fakeapi.selectors import both, parse_field_selector, parse_label_selector
from kubesim.fakeapi.store import Store, Stored, invalid
from kubesim.fakeapi.watch import WatchControls

# The CRDs the project ships: served by default, exactly as a cluster would have them installed.
SHIPPED_CRDS = Path(__file__).resolve().parents[2] / "charts" / "dra-extender" / "crds"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


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


class FakeApiServer(FaultControls, WatchControls):
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
        kubernetes_version: str = "v1.36.2",  # /version; the extender takes its minor's feature-gate defaults
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
        self.raw_parameters = RawParameters()
        self._init_faults(request_log_limit=request_log_limit, seed=seed)
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
        app.router.add_route("*", "/{tail:.*}", functools.partial(routing.handle, self))
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

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Store a new object (status kept as given); raises ApiError (409 if it exists)."""
        obj = orjson.loads(orjson.dumps(obj))
        t, version = self.registry.for_object(obj)
        return self.store.create(t, obj, version=version, namespace=namespace, http=False).copy()

    def get(self, kind_or_resource: str, namespace: str | None, name: str, *, group: str | None = None) -> dict[str, Any] | None:
        s = self.store.lookup(self.registry.resolve(kind_or_resource, group), namespace, name)
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
        t = self.registry.resolve(kind_or_resource, group)
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
        t = self.registry.resolve(kind_or_resource, group)
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
        t = self.registry.resolve(kind_or_resource, group)
        match = both(parse_label_selector(label_selector), parse_field_selector(field_selector, t.field_selectors))
        return [s.copy() for s in self.store.list(t, namespace=namespace, match=match)[1]]

    def count(self, kind_or_resource: str, *, group: str | None = None) -> int:
        return len(self.store.table(self.registry.resolve(kind_or_resource, group)))

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


# Faults, RequestInfo and RequestRecord stay importable from here, where tests have always found them.
__all__ = ["SHIPPED_CRDS", "FakeApiServer", "Faults", "RequestInfo", "RequestRecord", "iter_manifests"]
