"""The API server as a Source: our own reflectors over kubernetes-asyncio.

kubernetes-asyncio provides configuration, authentication and the HTTP
session; it has no informer, and its models are 16x slower than orjson on
raw bytes (docs/dependencies.md#kubernetes-asyncio), so every list and watch here goes through
`call_api(..., _preload_content=False)` and orjson.

This module wires the pieces: the client and its session, one reflector per
kind (tracker/apiserver/reflector.py: list, watch, resume, 410 re-list, backoff, GC
freeze), discovery of the optional APIs (tracker/apiserver/discovery.py), the writes
(tracker/apiserver/writes.py) and Events (tracker/k8s_events.py); where each kind
lives is tracker/resources.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING, Any

import aiohttp
import aiohttp.helpers
import orjson
import yarl

from tracker import events as ev
from tracker.apiserver.discovery import DiscoveryUnknown, discover_upstream_rules, served
from tracker.apiserver.reflector import BACKOFF_INITIAL, Freshness, Reflector, WatchResponse
from tracker.apiserver.writer import Writer, ssl_context
from tracker.apiserver.writes import ApiWrites
from tracker.events import EventSink
from tracker.resources import CORE_RESOURCES, OPTIONAL_KINDS, OWN_PATCHES, OWN_RULES, Resource
from tracker.source import ReadOnlyRefused, Source, status_error

log = logging.getLogger("dra_extender.source")

WATCH_TIMEOUT_SECONDS = 290
OPTIONAL_RECHECK_SECONDS = 60.0
STALE_THRESHOLD = 30.0  # seconds without a successful list/watch before a kind is "stale"


def user_agent(program: str) -> str:
    """`PROGRAM/VERSION`: the API server names a write's field manager after the part before the slash.

    kubernetes-asyncio's default (`OpenAPI-Generator/...`) would make every
    write of the extender, the controllers and kubectl dra read as one
    anonymous generated client in managedFields and audit logs.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{program}/{version('dra-extender')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return f"{program}/unknown"


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


class ApiSource(ApiWrites):
    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        in_cluster: bool = False,
        context: str | None = None,
        optional_recheck_seconds: float = OPTIONAL_RECHECK_SECONDS,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        stale_threshold: float = STALE_THRESHOLD,
        read_only: bool = False,
        program: str = "dra-extender",
    ) -> None:
        self.kubeconfig = kubeconfig
        # Every request's User-Agent, so its field manager is `program`; each command names itself
        # (dra-extender-serve, dra-extender-controllers), so audit logs tell the sidecar from the controllers.
        self.user_agent = user_agent(program)
        # --read-only: every write is refused here, whatever asks for it, so the promise holds in one place.
        self.read_only = read_only
        self.in_cluster = in_cluster
        self.context = context
        self.description = "in-cluster API server" if in_cluster else f"API server from kubeconfig {kubeconfig}"
        self.optional_recheck_seconds = optional_recheck_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self._api: Any = None
        self._writer: Writer | None = None  # the writes' own connections (tracker/apiserver/writer.py); None behind a proxy
        self.rule_resources: list[Resource] = []
        self.last_resource_versions: dict[tuple[str, str], str] = {}
        self.stats: dict[str, int] = {"lists": 0, "watch_events": 0, "relists_410": 0, "watch_restarts": 0, "errors": 0}
        self.freshness = Freshness(stale_threshold)

    @property
    def stale_threshold(self) -> float:
        return self.freshness.stale_threshold

    def sync_status(self) -> dict[str, dict[str, Any]]:
        """Per kind: last_sync (epoch s, or 0 never), staleness_seconds, stale, errors, watching, last_error."""
        return self.freshness.status()

    # ------------------------------------------------------------------ client

    async def connect(self, where: str = "--kubeconfig") -> None:
        """Load the kubeconfig (or the pod's configuration) now: a fault is a one-line KubeconfigError naming WHERE and the file, not a traceback at the first request."""
        from tracker.apiserver import client_modules
        from tracker.apiserver.kubeconfig import KubeconfigError, check

        client_modules.load()  # before any `kubernetes_asyncio` import: without the generated models (35 MiB)
        from kubernetes_asyncio.config.config_exception import ConfigException

        if not self.in_cluster and self.kubeconfig:
            check(self.kubeconfig, where, self.context)
        try:
            await self._client()
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
            label = "--in-cluster" if self.in_cluster else f"{where} {self.kubeconfig}"
            raise KubeconfigError(f"{label}: {' '.join(str(e).split()) or type(e).__name__}") from None

    async def _client(self) -> Any:
        if self._api is not None:
            return self._api
        from tracker.apiserver import client_modules

        configuration_type, api_client_type, config = client_modules.load()
        configuration = configuration_type()
        if self.in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            await config.load_kube_config(config_file=self.kubeconfig, context=self.context, client_configuration=configuration)
        api = api_client_type(configuration)
        api.user_agent = self.user_agent  # default_headers: call_api and send() both add them
        _without_per_request_env_lookups(api, configuration)
        host = configuration.host or ""
        if not api.rest_client.proxy and host.startswith(("http:", "https:")):
            tls = ssl_context(configuration) if host.startswith("https:") else None
            self._writer = Writer(
                host, tls=tls, server_hostname=configuration.tls_server_name, limit=configuration.connection_pool_maxsize or 100
            )
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
        self._refuse_if_read_only(method, path)
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
            data: bytes = await resp.read()
            return resp.status, data
        finally:
            resp.release()

    async def open_watch(self, path: str, query: list[tuple[str, str]], timeout: float) -> WatchResponse:
        """A watch stream on the client's session, its body unread (the reflector reads it line by line)."""
        api = await self._client()
        resp: WatchResponse = await api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return resp

    async def send(
        self, method: str, path: str, body: Any, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> tuple[int, bytes]:
        """A write with a compact JSON body (orjson), with the client's authentication.

        kubernetes-asyncio serializes bodies with `json.dumps` (spaces after `:`
        and `,`); the API server keeps RawExtension bytes (a claim's
        `opaque.parameters`) as their creator sent them and compares them
        byte-wise on update, so a re-serialized spec reads as a change to an
        immutable field. Sending compact bytes ourselves avoids that. The
        request goes on the writes' own connections (a third of aiohttp's CPU
        per write: tracker/apiserver/writer.py), or through the client's
        aiohttp session behind a proxy or for a path that needs quoting.
        """
        self._refuse_if_read_only(method, path)
        api = await self._client()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        headers.update(api.default_headers)
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        data = orjson.dumps(body)
        writer = self._writer
        if writer is not None and writer.takes(path):
            return await writer.request(method, path, headers, data, timeout)
        session = api.rest_client.pool_manager
        url = api.configuration.host + path
        async with session.request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            proxy=api.rest_client.proxy or None,
        ) as resp:
            return resp.status, await resp.read()

    def _refuse_if_read_only(self, method: str, path: str) -> None:
        if self.read_only and method.upper() not in ("GET", "HEAD"):
            raise ReadOnlyRefused(f"read-only (--read-only): {method} {path} not sent")

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        res = self._resource(kind, group)
        status, body = await self.request("GET", res.item(namespace, name))
        if status == 404:
            return None
        if status != 200:
            raise status_error(status, body, f"get {kind} {namespace}/{name}")
        obj: dict[str, Any] = orjson.loads(body)
        return obj

    # ------------------------------------------------------------------ run

    def reflector(self, res: Resource, sink: EventSink) -> Reflector:
        """A reflector of `res` into `sink` on this client, sharing the freshness and stats of the others."""
        return Reflector(
            res,
            sink,
            self,
            freshness=self.freshness,
            stats=self.stats,
            last_resource_versions=self.last_resource_versions,
            watch_timeout_seconds=self.watch_timeout_seconds,
        )

    async def run(self, sink: EventSink) -> None:
        await self._client()
        tasks = [asyncio.create_task(self.reflector(r, sink).run(), name=f"reflector-{r.plural}") for r in CORE_RESOURCES]
        tasks.append(asyncio.create_task(self._optional(sink), name="optional-apis"))
        tasks.append(asyncio.create_task(self.freshness.watch(), name="staleness"))
        tasks.append(asyncio.create_task(self.freshness.probe(self), name="api-probe"))
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
        apis = _OptionalApis(self, sink)
        backoff = BACKOFF_INITIAL
        try:
            while True:
                unknown = await apis.discover()
                apis.follow_served()
                apis.report_unserved()
                apis.complete_unserved()
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
            apis.stop()


class _OptionalApis:
    """Which optional APIs the server serves (as far as discovery has answered), and a reflector for each served kind."""

    _LABELS = (
        (ev.GROUP_RESOURCE, "resource.k8s.io DeviceTaintRule"),
        (ev.GROUP_EXTENDER, "resource.dra-extender.io CRDs"),
    )

    def __init__(self, source: ApiSource, sink: EventSink) -> None:
        self.source = source
        self.sink = sink
        self.running: dict[str, asyncio.Task[None]] = {}
        self.reported: set[str] = set()
        self.served_by: dict[str, list[Resource]] = {}  # group -> what it serves, once discovery has answered

    async def discover(self) -> list[str]:
        """Ask again what is served; the APIs whose answer is unknown this time (their group keeps its last answer)."""
        unknown: list[str] = []
        try:
            upstream = await discover_upstream_rules(self.source)
            self.served_by[ev.GROUP_RESOURCE] = [upstream] if upstream is not None else []
            self.source.rule_resources = self.served_by[ev.GROUP_RESOURCE]
        except DiscoveryUnknown as e:
            unknown.append(str(e))
        own = await served(self.source, ev.GROUP_EXTENDER, OWN_RULES.version)
        if own is None:
            unknown.append(f"{ev.GROUP_EXTENDER}/{OWN_RULES.version}")
        else:
            self.served_by[ev.GROUP_EXTENDER] = [r for r in (OWN_RULES, OWN_PATCHES) if r.plural in own]
        return unknown

    def follow_served(self) -> None:
        """A reflector for each served kind (restarted if it ended); none for a kind no longer served."""
        wanted = {f"{r.group}/{r.version}/{r.plural}": r for rs in self.served_by.values() for r in rs}
        for key, r in wanted.items():
            if key not in self.running or self.running[key].done():
                log.info("watching optional API", extra={"resource": key})
                self.running[key] = asyncio.create_task(self.source.reflector(r, self.sink).run(), name=f"reflector-{key}")
        for key in [k for k in self.running if k not in wanted]:
            log.info("optional API no longer served", extra={"resource": key})
            self.running.pop(key).cancel()

    def report_unserved(self) -> None:
        """Log once that a group is not served (again after it has been)."""
        for group, label in self._LABELS:
            if group not in self.served_by:
                continue
            if not self.served_by[group] and label not in self.reported:
                self.reported.add(label)
                log.info("optional API not served; checking again periodically", extra={"resource": label})
            elif self.served_by[group]:
                self.reported.discard(label)

    def complete_unserved(self) -> None:
        """Known not to be served: their (empty) state is complete.

        A served kind is marked synced by its reflector's first list (readiness waits for it).
        """
        for kind, group in OPTIONAL_KINDS:
            if group in self.served_by and not any(r.kind == kind for r in self.served_by[group]):
                self.sink.replace(kind, group, [])
                self.sink.mark_synced(kind, group)

    def stop(self) -> None:
        for t in self.running.values():
            t.cancel()


__all__ = ["ApiSource", "Resource"]


if TYPE_CHECKING:

    def _implements_source(source: ApiSource) -> Source:
        return source  # mypy checks ApiSource against the Source protocol here
