"""The API server as a Source: our own reflectors over kubernetes-asyncio.

kubernetes-asyncio provides configuration, authentication and the HTTP
session; it has no informer, and its models are 16x slower than orjson on
raw bytes (docs/dependencies.md#kubernetes-asyncio), so every list and watch here goes through
`call_api(..., _preload_content=False)` and orjson.

One reflector per kind: paginated list, then watch from the list's
resourceVersion with bookmarks; a dropped stream resumes from the last
resourceVersion seen, a 410 Gone re-lists and reconciles (objects missing
from the new list are deleted), and failures back off exponentially with
jitter. The last consistent view keeps serving throughout.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiohttp.helpers
import orjson
import yarl

from tracker import events as ev
from tracker.events import EventSink
from tracker.source import Conflict, Invalid, NotFound, SourceError

log = logging.getLogger("dra_extender.source")

LIST_PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 290
OPTIONAL_RECHECK_SECONDS = 60.0
# Small first steps: under a partly failing API server (say 20 % errors) a reflector
# then rarely sits in a long sleep when the server recovers. The cap bounds how long the
# view lags after an outage: the next attempt comes at most BACKOFF_MAX x 1.5 (jitter)
# = 0.9 s after the server is back, so a resumed watch catches up within a second or two
# and a re-list within its own time + 1 s. A server that is down gets ~1.5 requests/s per
# reflector (8 reflectors: ~12/s), a load any API server shrugs off.
BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 0.6
STALE_THRESHOLD = 30.0  # seconds without a successful list/watch before a kind is "stale"
STALE_CHECK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Resource:
    """Where one kind lives on the API server."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    required: bool = True

    @property
    def api_prefix(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace:
            return f"{self.api_prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.api_prefix}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace if self.namespaced else None)}/{name}"


CORE_RESOURCES = [
    Resource(ev.NODE, ev.GROUP_CORE, "v1", "nodes", False),
    Resource(ev.POD, ev.GROUP_CORE, "v1", "pods", True),
    Resource(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "v1", "resourceslices", False),
    Resource(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "v1", "resourceclaims", True),
    Resource(ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE, "v1", "resourceclaimtemplates", True),
    Resource(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "v1", "deviceclasses", False),
    Resource(ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE, "v1", "persistentvolumeclaims", True),  # volume taints
    Resource(ev.PERSISTENT_VOLUME, ev.GROUP_CORE, "v1", "persistentvolumes", False),
]
UPSTREAM_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
OWN_RULES = Resource(ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, "v1alpha1", "devicetaintrules", False, required=False)
OWN_PATCHES = Resource(ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, "v1alpha1", "resourceslicepatches", False, required=False)

KIND_RESOURCES = {r.kind: r for r in CORE_RESOURCES}


class _GcPause:
    """The collector stays off while any reflector lists (docs/dependencies.md#pythons-garbage-collector: GC roughly doubles a big parse).

    Reflectors list concurrently: GC is re-enabled when the last one is done,
    not when the first one finishes while the others still parse. It covers
    turning the items into the state (`sink.replace`), which allocates most.
    """

    depth = 0
    was_enabled = True

    def __enter__(self) -> None:
        if _GcPause.depth == 0:
            _GcPause.was_enabled = gc.isenabled()
            gc.disable()
        _GcPause.depth += 1

    def __exit__(self, *exc: object) -> None:
        _GcPause.depth -= 1
        if _GcPause.depth == 0 and _GcPause.was_enabled:
            gc.enable()


@dataclass(slots=True)
class _SyncState:
    """How fresh one kind's view is: what the metrics and /debug report."""

    last_sync: float = 0.0  # wall clock (epoch s) of the last list, event, bookmark or watch start
    last_sync_monotonic: float | None = None
    started: float = field(default_factory=time.monotonic)  # before the first list: stale counts from here
    watching: bool = False  # a watch stream is open: the view follows the server
    errors: int = 0
    stale: bool = False  # as last logged
    last_error: str = ""

    def synced(self) -> None:
        self.last_sync = time.time()
        self.last_sync_monotonic = time.monotonic()

    def staleness(self) -> float:
        """Seconds since the view was last known current: 0 while a watch is open."""
        if self.watching:
            return 0.0
        since = self.last_sync_monotonic if self.last_sync_monotonic is not None else self.started
        return time.monotonic() - since


class _Gone(Exception):
    """The watch's resourceVersion is too old: re-list."""


class _Unknown(Exception):
    """Discovery failed (not a 404): whether the API is served is unknown."""


SHORT_WATCH_SECONDS = 1.0


@dataclass(slots=True)
class _WatchProgress:
    """Where a reflector's watch stands: the RV to resume from, and whether the last stream was of use."""

    rv: str
    opened_at: float | None = None  # monotonic time the server accepted the current watch
    delivered: int = 0  # events and bookmarks on the current watch

    def start(self) -> None:
        self.opened_at, self.delivered = None, 0

    def useful(self) -> bool:
        """It delivered something, or stayed open a while: its end is no failure in a row.

        A watch the server closes or breaks at once, with nothing delivered, is one
        (client-go's "very short watch"): repeated, it must back off, not hot-loop.
        """
        if self.delivered:
            return True
        return self.opened_at is not None and time.monotonic() - self.opened_at >= SHORT_WATCH_SECONDS


def _status_error(status: int, body: bytes, what: str) -> SourceError:
    try:
        message = orjson.loads(body).get("message") or body.decode(errors="replace")
    except (orjson.JSONDecodeError, AttributeError):
        message = body.decode(errors="replace")[:500]
    text = f"{what}: HTTP {status}: {message}"
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status in (400, 422):
        return Invalid(text)
    err = SourceError(text)
    err.status = status
    return err


def _without_per_request_env_lookups(api: Any, configuration: Any) -> None:
    """The client's session with `trust_env` off, and the environment's proxy read once.

    kubernetes-asyncio opens its aiohttp session with `trust_env=True`, so
    every request looks up ~/.netrc and the proxy variables in a worker
    thread: two thread hops per call, measured at ~0.5 ms each and GIL
    contention on a busy 2-core scheduler host. The API server's address
    does not change, so its proxy (if any) is resolved once here instead.
    """
    rest = api.rest_client
    old = rest.pool_manager
    if configuration.proxy is None:
        try:
            proxy, _auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(configuration.host))
            rest.proxy = str(proxy)
        except LookupError:
            pass  # no proxy for the API server
    rest.pool_manager = aiohttp.ClientSession(connector=old.connector, trust_env=False, read_bufsize=2**21)
    old.detach()  # the new session owns the connector now


class ApiSource:
    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        in_cluster: bool = False,
        context: str | None = None,
        optional_recheck_seconds: float = OPTIONAL_RECHECK_SECONDS,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        stale_threshold: float = STALE_THRESHOLD,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.in_cluster = in_cluster
        self.context = context
        self.description = "in-cluster API server" if in_cluster else f"API server from kubeconfig {kubeconfig}"
        self.optional_recheck_seconds = optional_recheck_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self._api: Any = None
        self.rule_resources: list[Resource] = []
        self.last_resource_versions: dict[tuple[str, str], str] = {}
        self.stats: dict[str, int] = {"lists": 0, "watch_events": 0, "relists_410": 0, "watch_restarts": 0, "errors": 0}
        self.stale_threshold = stale_threshold
        self._sync: dict[str, _SyncState] = {}  # "Kind" or "Kind.group", as /debug/objects names kinds

    # ------------------------------------------------------------------ freshness

    def _sync_of(self, res: Resource) -> _SyncState:
        name = f"{res.kind}.{res.group}" if res.group else res.kind
        st = self._sync.get(name)
        if st is None:
            st = self._sync[name] = _SyncState()
        return st

    def sync_status(self) -> dict[str, dict[str, Any]]:
        """Per kind: last_sync (epoch s, or 0 never), staleness_seconds, stale, errors, watching, last_error."""
        now = time.time()
        out: dict[str, dict[str, Any]] = {}
        for name, st in sorted(self._sync.items()):
            age = st.staleness()
            out[name] = {
                "last_sync": now if st.watching else st.last_sync,
                "staleness_seconds": round(age, 3),
                "stale": age > self.stale_threshold,
                "errors": st.errors,
                "watching": st.watching,
                "last_error": st.last_error,
            }
        return out

    async def _watch_staleness(self) -> None:
        """Log each kind entering and leaving the stale state (the metrics show it continuously)."""
        while True:
            await asyncio.sleep(STALE_CHECK_SECONDS)
            for name, st in list(self._sync.items()):
                age = st.staleness()
                stale = age > self.stale_threshold
                if stale and not st.stale:
                    log.warning(
                        "view is stale: no successful list or watch",
                        extra={
                            "kind": name,
                            "seconds": round(age, 1),
                            "never_synced": st.last_sync_monotonic is None,
                            "err": st.last_error,
                        },
                    )
                elif st.stale and not stale:
                    log.info("view caught up: list/watch succeeds again", extra={"kind": name})
                st.stale = stale

    # ------------------------------------------------------------------ client

    async def _client(self) -> Any:
        if self._api is not None:
            return self._api
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        if self.in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            await config.load_kube_config(config_file=self.kubeconfig, context=self.context, client_configuration=configuration)
        api = client.ApiClient(configuration)
        _without_per_request_env_lookups(api, configuration)
        self._api = api
        return self._api

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = 30.0,
    ) -> tuple[int, bytes]:
        api = await self._client()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        resp = await api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        try:
            data = await resp.read()
            return resp.status, data
        finally:
            resp.release()

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    # ------------------------------------------------------------------ discovery

    async def _served(self, group: str, version: str) -> set[str] | None:
        """The resources served at group/version: empty when not served (404), None when unknown (an error)."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            status, body = await self.request("GET", path, timeout=10)
        except (TimeoutError, OSError, aiohttp.ClientError) as e:
            log.warning("discovery failed", extra={"path": path, "err": str(e) or type(e).__name__})
            return None
        if status == 404:
            return set()
        if status != 200:
            log.warning("discovery failed", extra={"path": path, "status": status})
            return None
        try:
            return {r.get("name", "") for r in orjson.loads(body).get("resources", [])}
        except (orjson.JSONDecodeError, AttributeError):
            log.warning("discovery failed: not an APIResourceList", extra={"path": path})
            return None

    async def _discover_rules(self) -> Resource | None:
        """resource.k8s.io DeviceTaintRule at the newest served version; None if none; _Unknown on errors."""
        for version in UPSTREAM_RULE_VERSIONS:
            served = await self._served(ev.GROUP_RESOURCE, version)
            if served is None:
                raise _Unknown(f"{ev.GROUP_RESOURCE}/{version}")  # a newer version may be served: don't guess
            if "devicetaintrules" in served:
                return Resource(ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, version, "devicetaintrules", False, required=False)
        return None

    # ------------------------------------------------------------------ run

    async def run(self, sink: EventSink) -> None:
        await self._client()
        tasks = [asyncio.create_task(self._reflect(r, sink), name=f"reflector-{r.plural}") for r in CORE_RESOURCES]
        tasks.append(asyncio.create_task(self._optional(sink), name="optional-apis"))
        tasks.append(asyncio.create_task(self._watch_staleness(), name="staleness"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def _optional(self, sink: EventSink) -> None:
        """Upstream DeviceTaintRules and our CRDs: started when served, re-checked slowly when not.

        Only a 404 means "not served". A discovery error leaves that group as it was
        (its reflectors keep running, its objects stay in the view, a kind not yet
        known stays unsynced) and is retried sooner, with backoff.
        """
        running: dict[str, asyncio.Task] = {}
        reported: set[str] = set()
        served: dict[str, list[Resource]] = {}  # group -> what it serves, once discovery has answered
        backoff = BACKOFF_INITIAL
        try:
            while True:
                unknown: list[str] = []
                try:
                    upstream = await self._discover_rules()
                    served[ev.GROUP_RESOURCE] = [upstream] if upstream is not None else []
                    self.rule_resources = served[ev.GROUP_RESOURCE]
                except _Unknown as e:
                    unknown.append(str(e))
                own = await self._served(ev.GROUP_EXTENDER, OWN_RULES.version)
                if own is None:
                    unknown.append(f"{ev.GROUP_EXTENDER}/{OWN_RULES.version}")
                else:
                    served[ev.GROUP_EXTENDER] = [r for r in (OWN_RULES, OWN_PATCHES) if r.plural in own]
                wanted = {f"{r.group}/{r.version}/{r.plural}": r for rs in served.values() for r in rs}
                for key, r in wanted.items():
                    if key not in running or running[key].done():
                        log.info("watching optional API", extra={"resource": key})
                        running[key] = asyncio.create_task(self._reflect(r, sink), name=f"reflector-{key}")
                for key in [k for k in running if k not in wanted]:
                    log.info("optional API no longer served", extra={"resource": key})
                    running.pop(key).cancel()
                for group, label in (
                    (ev.GROUP_RESOURCE, "resource.k8s.io DeviceTaintRule"),
                    (ev.GROUP_EXTENDER, "resource.dra-extender.io CRDs"),
                ):
                    if group not in served:
                        continue
                    if not served[group] and label not in reported:
                        reported.add(label)
                        log.info("optional API not served; checking again periodically", extra={"resource": label})
                    elif served[group]:
                        reported.discard(label)
                # Known not to be served: their (empty) state is complete. A served one is
                # marked synced by its reflector's first list (readiness waits for it).
                for kind, group in (
                    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE),
                    (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER),
                    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER),
                ):
                    if group in served and not any(r.kind == kind for r in served[group]):
                        sink.replace(kind, group, [])
                        sink.mark_synced(kind, group)
                if unknown:
                    delay = min(self.optional_recheck_seconds, backoff) * (0.5 + random.random())
                    backoff = min(self.optional_recheck_seconds, backoff * 2)
                    log.warning(
                        "optional API discovery failed; keeping what runs", extra={"apis": ",".join(unknown), "retry_in_s": round(delay, 2)}
                    )
                else:
                    delay, backoff = self.optional_recheck_seconds, BACKOFF_INITIAL
                await asyncio.sleep(delay)
        finally:
            for t in running.values():
                t.cancel()

    async def _reflect(self, res: Resource, sink: EventSink) -> None:
        """List+watch forever; every failure backs off, a 410 re-lists."""
        backoff = BACKOFF_INITIAL
        progress: _WatchProgress | None = None
        sync = self._sync_of(res)
        while True:
            try:
                if progress is None:
                    progress = _WatchProgress(await self._list(res, sink))
                    backoff = BACKOFF_INITIAL
                progress.start()
                await self._watch(res, sink, progress)
                self.stats["watch_restarts"] += 1
                if progress.useful():
                    backoff = BACKOFF_INITIAL
                    continue  # ended (timeout or closed): resume at once from the last RV seen
                problem = "watch ended at once without delivering anything"
            except asyncio.CancelledError:
                # An optional API no longer served (or shutdown): nothing to be stale about.
                self._sync.pop(f"{res.kind}.{res.group}" if res.group else res.kind, None)
                raise
            except _Gone:
                self.stats["relists_410"] += 1
                log.info("watch expired (410 Gone); re-listing", extra={"resource": res.plural})
                progress = None
                continue
            except Exception as e:
                self.stats["errors"] += 1
                sync.errors += 1
                problem = str(e) or type(e).__name__
                sync.last_error = problem[:300]
                if progress is not None and progress.useful():
                    # The stream broke after it was established and of use (a dropped
                    # connection): resume from the last RV it delivered after one short
                    # delay, rather than as the next step of a failure streak.
                    backoff = BACKOFF_INITIAL
            finally:
                if sync.watching:
                    sync.synced()  # current up to the moment the stream ended
                sync.watching = False
            delay = min(BACKOFF_MAX, backoff) * (0.5 + random.random())
            log.warning("list/watch failed; retrying", extra={"resource": res.plural, "err": problem, "retry_in_s": round(delay, 2)})
            await asyncio.sleep(delay)
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def _list(self, res: Resource, sink: EventSink) -> str:
        started = time.perf_counter()
        items: list[dict[str, Any]] = []
        cont = ""
        rv = ""
        with _GcPause():
            while True:
                query: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
                if cont:
                    query["continue"] = cont
                status, body = await self.request("GET", res.collection(), query=query, timeout=120)
                if status == 410:
                    cont = ""  # the continue token expired: start over
                    items.clear()
                    continue
                if status != 200:
                    raise _status_error(status, body, f"list {res.plural}")
                page = orjson.loads(body)
                for item in page.get("items") or []:
                    item.setdefault("kind", res.kind)
                    item.setdefault("apiVersion", f"{res.group}/{res.version}" if res.group else res.version)
                    items.append(item)
                meta = page.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                cont = meta.get("continue") or ""
                if not cont:
                    break
            was_ready = getattr(sink, "ready", True)
            sink.replace(res.kind, res.group, items)
            self._sync_of(res).synced()
            sink.mark_synced(res.kind, res.group)  # the last kind's warms the CEL cache of every device
            if len(items) > 1000 or (not was_ready and getattr(sink, "ready", False)):
                gc.freeze()  # the big, long-lived results need not be scanned by every full collection
        self.stats["lists"] += 1
        self.last_resource_versions[(res.kind, res.group)] = rv
        log.info(
            "listed",
            extra={"resource": res.plural, "items": len(items), "resourceVersion": rv, "seconds": round(time.perf_counter() - started, 3)},
        )
        return rv

    async def _watch(self, res: Resource, sink: EventSink, progress: _WatchProgress) -> None:
        """Follow one watch stream from `progress.rv`, advancing it with every event and bookmark."""
        api = await self._client()
        query = [
            ("watch", "true"),
            ("resourceVersion", progress.rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_timeout_seconds)),
        ]
        resp = await api.call_api(
            res.collection(),
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=self.watch_timeout_seconds + 30,
        )
        try:
            if resp.status == 410:
                raise _Gone()
            if resp.status != 200:
                raise _status_error(resp.status, await resp.read(), f"watch {res.plural}")
            progress.opened_at = time.monotonic()
            sync = self._sync_of(res)
            sync.synced()
            sync.watching = True
            while True:
                line = await resp.content.readline()
                if not line:
                    return  # stream ended (timeout or closed): the caller resumes from progress.rv
                line = line.strip()
                if not line:
                    continue
                event = orjson.loads(line)
                etype = event.get("type")
                obj = event.get("object") or {}
                if etype == "ERROR":
                    code = obj.get("code")
                    if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                        raise _Gone()
                    raise SourceError(f"watch {res.plural}: {obj.get('message') or obj}")
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    progress.delivered += 1
                    if new_rv:
                        progress.rv = new_rv
                        self.last_resource_versions[(res.kind, res.group)] = new_rv
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                obj.setdefault("kind", res.kind)
                sink.apply(ev.ObjectEvent(etype, res.kind, res.group, ev.object_key(res.kind, obj), obj))
                self.stats["watch_events"] += 1
                progress.delivered += 1
                if new_rv:
                    progress.rv = new_rv
                    self.last_resource_versions[(res.kind, res.group)] = new_rv
                # readline() does not suspend while the stream has buffered lines: without a
                # yield, a burst of events (a driver republishing its slices) would hold the
                # event loop, and the scheduler's /filter calls with it, until it is applied.
                await asyncio.sleep(0)
        finally:
            resp.release()

    # ------------------------------------------------------------------ reads and writes

    def _resource(self, kind: str, group: str | None = None) -> Resource:
        if kind == ev.DEVICE_TAINT_RULE:
            if group == ev.GROUP_EXTENDER:
                return OWN_RULES
            return next((r for r in self.rule_resources), Resource(kind, ev.GROUP_RESOURCE, "v1beta2", "devicetaintrules", False))
        if kind == ev.RESOURCE_SLICE_PATCH:
            return OWN_PATCHES
        return KIND_RESOURCES[kind]

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        res = self._resource(kind, group)
        status, body = await self.request("GET", res.item(namespace, name))
        if status == 404:
            return None
        if status != 200:
            raise _status_error(status, body, f"get {kind} {namespace}/{name}")
        return orjson.loads(body)

    async def send(
        self, method: str, path: str, body: Any, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> tuple[int, bytes]:
        """A write with a compact JSON body (orjson), on the client's authenticated session.

        kubernetes-asyncio serializes bodies with `json.dumps` (spaces after `:`
        and `,`); the API server keeps RawExtension bytes (a claim's
        `opaque.parameters`) as their creator sent them and compares them
        byte-wise on update, so a re-serialized spec reads as a change to an
        immutable field. Sending compact bytes ourselves avoids that.
        """
        api = await self._client()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        headers.update(api.default_headers)
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        session = api.rest_client.pool_manager
        url = api.configuration.host + path
        async with session.request(
            method,
            url,
            data=orjson.dumps(body),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            proxy=api.rest_client.proxy or None,
        ) as resp:
            return resp.status, await resp.read()

    async def _write(self, method: str, path: str, body: Any, what: str, content_type: str = "application/json") -> dict[str, Any]:
        status, data = await self.send(method, path, body, content_type=content_type)
        if status not in (200, 201, 202):
            raise _status_error(status, data, what)
        return orjson.loads(data) if data else {}

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        res = KIND_RESOURCES[ev.RESOURCE_CLAIM]
        path = res.item(namespace, name) + ("/status" if status else "")
        what = f"patch ResourceClaim {namespace}/{name}{' status' if status else ''}"
        return await self._write("PATCH", path, patch, what, content_type="application/merge-patch+json")

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._write(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            patch,
            f"patch Pod {namespace}/{name}",
            content_type="application/merge-patch+json",
        )

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._write("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding, f"bind Pod {namespace}/{name}")

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self._write("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body, f"delete Pod {namespace}/{name}")

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        await self._write("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body, f"evict Pod {namespace}/{name}")

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        patch = {"status": {"conditions": [condition]}}
        await self._write(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            patch,
            f"patch Pod {namespace}/{name} status",
            content_type="application/strategic-merge-patch+json",
        )

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self._write(
            "PATCH",
            res.item("", name) + "/status",
            {"status": status},
            f"patch DeviceTaintRule {name} status",
            content_type="application/merge-patch+json",
        )

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a rule's `spec.taint.timeAdded` (our CRD rules: the API server does not, as it does upstream's)."""
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self._write(
            "PATCH",
            res.item("", name),
            {"spec": {"taint": {"timeAdded": time_added}}},
            f"patch DeviceTaintRule {name} timeAdded",
            content_type="application/merge-patch+json",
        )

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Rewrite a PVC's or PV's volume-taints annotation (the eviction controller's timeAdded)."""
        from tracker.volumes import TAINTS_ANNOTATION

        res = KIND_RESOURCES[kind]
        await self._write(
            "PATCH",
            res.item(namespace, name),
            {"metadata": {"annotations": {TAINTS_ANNOTATION: text}}},
            f"patch {kind} {namespace + '/' if namespace else ''}{name} volume taints",
            content_type="application/merge-patch+json",
        )

    async def create_event(self, event: dict[str, Any]) -> None:
        involved = event.get("involvedObject") or {}
        namespace = involved.get("namespace") or "default"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved.get('name', 'dra-extender')}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": event.get("reason", ""),
            "message": event.get("message", ""),
            "type": event.get("type", "Normal"),
            "source": {"component": "dra-extender"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._write("POST", f"/api/v1/namespaces/{namespace}/events", body, "create Event")
        except (TimeoutError, SourceError, OSError) as e:
            log.warning("could not record event", extra={"err": str(e), "object": involved.get("name")})


__all__ = ["ApiSource", "Resource"]
