"""One reflector per kind: paginated list, then watch with bookmarks, forever.

A dropped stream resumes from the last resourceVersion seen, a 410 Gone
re-lists and reconciles (objects missing from the new list are deleted),
and failures back off exponentially with jitter. The last consistent view
keeps serving throughout.

What one line of a watch stream means is a pure function, `process_line`
(as lightkube's watch driver decodes its stream): an event, a bookmark, a
410 Gone, an error, or nothing. Everything here reaches the API server
through a `Transport` (tracker.apiserver.source.ApiSource).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from tracker import events as ev
from tracker.apiserver.discovery import Transport
from tracker.events import EventSink
from tracker.heap import release_free_memory
from tracker.resources import Resource
from tracker.source import SourceError, status_error

log = logging.getLogger("dra_extender.source")

LIST_PAGE_SIZE = 500
LIST_TIMEOUT_SECONDS = 120.0
# Small first steps: under a partly failing API server (say 20 % errors) a reflector
# then rarely sits in a long sleep when the server recovers. The cap bounds how long the
# view lags after an outage: the next attempt comes at most BACKOFF_MAX x 1.5 (jitter)
# = 0.9 s after the server is back, so a resumed watch catches up within a second or two
# and a re-list within its own time + 1 s. A server that is down gets ~1.5 requests/s per
# reflector (8 reflectors: ~12/s), a load any API server shrugs off.
BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 0.6
STALE_CHECK_SECONDS = 1.0
# An open HTTP/1.1 watch says nothing about a server that stopped answering (its process
# frozen, the connection open): no bytes, no error. client-go pings over HTTP/2 for this;
# here the server is asked for /version this often, with this timeout. Anything it
# answers (that, a list, a watch line) proves it is there; an open watch counts as
# current only as long as the server last answered.
PROBE_INTERVAL_SECONDS = 5.0
PROBE_TIMEOUT_SECONDS = 5.0
SHORT_WATCH_SECONDS = 1.0
GC_FREEZE_ITEMS = 1000  # a list this long is frozen out of the collector's full scans


# What no reader of these kinds uses, dropped as each object is decoded: a list then holds
# lean objects until it is applied, not the API server's whole objects (on a 5,000-node
# cluster a Node's managedFields and pulled images are most of its ~10 KB). The eviction
# controller reads DeviceTaintRules' managedFields, so only these kinds lose theirs.
_NO_MANAGED_FIELDS = frozenset({ev.NODE, ev.POD, ev.RESOURCE_SLICE, ev.RESOURCE_CLAIM})


def lighten(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what nothing here reads: managedFields of `_NO_MANAGED_FIELDS`' kinds, a Node's status.images."""
    if kind in _NO_MANAGED_FIELDS:
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        if kind == ev.NODE:
            status = obj.get("status")
            if isinstance(status, dict):
                status.pop("images", None)
    return obj


# ---------------------------------------------------------------------- one watch line


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """ADDED, MODIFIED or DELETED: the object, and the resourceVersion it brings (None if it has none)."""

    type: ev.EventType
    object: dict[str, Any]
    resource_version: str | None


@dataclass(frozen=True, slots=True)
class Bookmark:
    """The server's progress marker: resume from here (None: a bookmark without a version)."""

    resource_version: str | None


@dataclass(frozen=True, slots=True)
class Gone:
    """An ERROR with 410 (or reason Expired/Gone): the watch's resourceVersion is too old; re-list."""


@dataclass(frozen=True, slots=True)
class WatchError:
    """Any other ERROR object on the stream."""

    message: str


WatchLine = WatchEvent | Bookmark | Gone | WatchError | None

_OBJECT_EVENTS: frozenset[str] = frozenset({"ADDED", "MODIFIED", "DELETED"})


def process_line(line: bytes) -> WatchLine:
    """What one line of a watch stream says; None for a blank line or an event type of no interest.

    A line that is not JSON raises `orjson.JSONDecodeError` (a ValueError),
    one that is not an object `AttributeError`: the stream is broken.
    """
    line = line.strip()
    if not line:
        return None
    event = orjson.loads(line)
    etype = event.get("type")
    obj = event.get("object") or {}
    if etype == "ERROR":
        if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
            return Gone()
        return WatchError(str(obj.get("message") or obj))
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    if etype == "BOOKMARK":
        return Bookmark(rv or None)
    if etype not in _OBJECT_EVENTS:
        return None
    return WatchEvent(etype, obj, rv or None)


# ---------------------------------------------------------------------- the pieces around it


class GcPause:
    """The collector stays off while any reflector lists (docs/dependencies.md#pythons-garbage-collector: GC roughly doubles a big parse).

    Reflectors list concurrently: GC is re-enabled when the last one is done,
    not when the first one finishes while the others still parse. It covers
    turning the items into the state (`sink.replace`), which allocates most.
    """

    depth = 0
    was_enabled = True

    def __enter__(self) -> None:
        if GcPause.depth == 0:
            GcPause.was_enabled = gc.isenabled()
            gc.disable()
        GcPause.depth += 1

    def __exit__(self, *exc: object) -> None:
        GcPause.depth -= 1
        if GcPause.depth == 0 and GcPause.was_enabled:
            gc.enable()


@dataclass(slots=True)
class SyncState:
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


def sync_name(res: Resource) -> str:
    """ "Kind" or "Kind.group", as /debug/objects names kinds."""
    return f"{res.kind}.{res.group}" if res.group else res.kind


class Freshness:
    """Every reflector's SyncState, reported per kind and logged when a kind goes stale or catches up."""

    def __init__(self, stale_threshold: float) -> None:
        self.stale_threshold = stale_threshold
        self.kinds: dict[str, SyncState] = {}
        self.last_answer: float | None = None  # monotonic: the API server last answered anything

    def answered(self) -> None:
        """The API server answered (a probe, a list, a watch line): open watches still follow it."""
        self.last_answer = time.monotonic()

    def silence(self) -> float:
        """Seconds since the API server last answered (0 before anything was asked)."""
        return 0.0 if self.last_answer is None else time.monotonic() - self.last_answer

    def age(self, st: SyncState) -> float:
        """How old a kind's view may be: while its watch is open, as old as the server's silence."""
        return self.silence() if st.watching else st.staleness()

    async def probe(self, transport: Transport) -> None:
        """Ask the server for /version every PROBE_INTERVAL_SECONDS, so a frozen one shows as stale."""
        while True:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_SECONDS + 1):
                    status, _ = await transport.request("GET", "/version", timeout=PROBE_TIMEOUT_SECONDS)
                if status < 500:
                    self.answered()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("API server probe failed", extra={"err": str(e) or type(e).__name__})
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)

    def of(self, res: Resource) -> SyncState:
        name = sync_name(res)
        st = self.kinds.get(name)
        if st is None:
            st = self.kinds[name] = SyncState()
        return st

    def forget(self, res: Resource) -> None:
        self.kinds.pop(sync_name(res), None)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per kind: last_sync (epoch s, or 0 never), staleness_seconds, stale, errors, watching, last_error."""
        now = time.time()
        out: dict[str, dict[str, Any]] = {}
        for name, st in sorted(self.kinds.items()):
            age = self.age(st)
            out[name] = {
                "last_sync": now - age if st.watching else st.last_sync,
                "staleness_seconds": round(age, 3),
                "stale": age > self.stale_threshold,
                "errors": st.errors,
                "watching": st.watching,
                "last_error": st.last_error,
            }
        return out

    async def watch(self) -> None:
        """Log each kind entering and leaving the stale state (the metrics show it continuously)."""
        while True:
            await asyncio.sleep(STALE_CHECK_SECONDS)
            for name, st in list(self.kinds.items()):
                age = self.age(st)
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


@dataclass(slots=True)
class WatchProgress:
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


class GoneError(Exception):
    """The watch's resourceVersion is too old: re-list."""


class StreamReader(Protocol):
    def readline(self) -> Awaitable[bytes]: ...


class WatchResponse(Protocol):
    """An open watch: the HTTP status and a stream of lines (an aiohttp response)."""

    @property
    def status(self) -> int: ...

    @property
    def content(self) -> StreamReader: ...

    def read(self) -> Awaitable[bytes]: ...

    def release(self) -> Any: ...

    async def open_watch(self, path: str, query: list[tuple[str, str]], timeout: float) -> WatchResponse: ...


class WatchTransport(Transport, Protocol):
    """The API server as a reflector needs it: requests, and watches it reads line by line."""

    async def open_watch(self, path: str, query: list[tuple[str, str]], timeout: float) -> WatchResponse: ...


# ---------------------------------------------------------------------- the reflector


class Reflector:
    """List+watch one kind into `sink`; `stats` and `last_resource_versions` are shared by every reflector of a source."""

    def __init__(
        self,
        res: Resource,
        sink: EventSink,
        transport: WatchTransport,
        *,
        freshness: Freshness,
        stats: dict[str, int],
        last_resource_versions: dict[tuple[str, str], str],
        watch_timeout_seconds: int,
    ) -> None:
        self.res = res
        self.sink = sink
        self.transport = transport
        self.freshness = freshness
        self.stats = stats
        self.last_resource_versions = last_resource_versions
        self.watch_timeout_seconds = watch_timeout_seconds
        self._listed = False  # a list was tried: any further one is held whole (see `list`)

    async def run(self) -> None:
        """List+watch forever; every failure backs off, a 410 re-lists."""
        res = self.res
        backoff = BACKOFF_INITIAL
        progress: WatchProgress | None = None
        sync = self.freshness.of(res)
        while True:
            try:
                if progress is None:
                    progress = WatchProgress(await self.list())
                    backoff = BACKOFF_INITIAL
                progress.start()
                await self.watch(progress)
                self.stats["watch_restarts"] += 1
                if progress.useful():
                    backoff = BACKOFF_INITIAL
                    continue  # ended (timeout or closed): resume at once from the last RV seen
                problem = "watch ended at once without delivering anything"
            except asyncio.CancelledError:
                # An optional API no longer served (or shutdown): nothing to be stale about.
                self.freshness.forget(res)
                raise
            except GoneError:
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

    async def list(self) -> str:
        """One consistent, paginated list into the sink; the list's resourceVersion."""
        res, sink = self.res, self.sink
        started = time.perf_counter()
        items: list[dict[str, Any]] = []
        cont = ""
        rv = ""
        # The first list of a sink that serves nothing yet is applied page by page: the whole
        # list is never held at once (at 5,000 nodes it would be the process's peak). Anything
        # else (a retry, a 410 mid-list, a re-list while serving) is held whole and replaced
        # at once, so that objects gone from the list are deleted and no half-applied list is served.
        stream = not self._listed and not sink.ready and getattr(sink, "streams_initial_lists", False)
        self._listed = True
        listed = 0
        with GcPause():
            while True:
                query: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
                if cont:
                    query["continue"] = cont
                status, body = await self.transport.request("GET", res.collection(), query=query, timeout=LIST_TIMEOUT_SECONDS)
                if status == 410:
                    cont = ""  # the continue token expired: start over
                    items.clear()
                    listed = 0
                    stream = False  # what the pages applied so far hold that the new list lacks is deleted by replace
                    continue
                if status != 200:
                    raise status_error(status, body, f"list {res.plural}")
                page = orjson.loads(body)
                for item in page.get("items") or []:
                    lighten(res.kind, item)
                    item.setdefault("kind", res.kind)
                    item.setdefault("apiVersion", res.api_version)
                    listed += 1
                    if stream:
                        sink.apply(ev.ObjectEvent("MODIFIED", res.kind, res.group, ev.object_key(res.kind, item), item))
                    else:
                        items.append(item)
                meta = page.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                cont = meta.get("continue") or ""
                del page, body  # a page's objects live on in the sink (or `items`) alone
                if not cont:
                    break
            was_ready = sink.ready
            self.freshness.answered()
            if not stream:
                sink.replace(res.kind, res.group, items)
            self.freshness.of(res).synced()
            sink.mark_synced(res.kind, res.group)  # the last kind's warms the CEL cache of every device
            if listed > GC_FREEZE_ITEMS or (not was_ready and sink.ready):
                gc.freeze()  # the big, long-lived results need not be scanned by every full collection
            if not was_ready and sink.ready:
                release_free_memory()  # the decoded pages' freed C heap, back to the system once (tracker/heap.py)
        self.stats["lists"] += 1
        self.last_resource_versions[(res.kind, res.group)] = rv
        log.info(
            "listed",
            extra={"resource": res.plural, "items": listed, "resourceVersion": rv, "seconds": round(time.perf_counter() - started, 3)},
        )
        return rv

    async def watch(self, progress: WatchProgress) -> None:
        """Follow one watch stream from `progress.rv`, advancing it with every event and bookmark."""
        res = self.res
        query = [
            ("watch", "true"),
            ("resourceVersion", progress.rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_timeout_seconds)),
        ]
        resp = await self.transport.open_watch(res.collection(), query, self.watch_timeout_seconds + 30)
        try:
            if resp.status == 410:
                raise GoneError()
            if resp.status != 200:
                raise status_error(resp.status, await resp.read(), f"watch {res.plural}")
            progress.opened_at = time.monotonic()
            freshness = self.freshness
            freshness.answered()
            sync = freshness.of(res)
            sync.synced()
            sync.watching = True
            while True:
                line = await resp.content.readline()
                if not line:
                    return  # stream ended (timeout or closed): the caller resumes from progress.rv
                freshness.answered()
                if self.handle(process_line(line), progress):
                    # readline() does not suspend while the stream has buffered lines: without a
                    # yield, a burst of events (a driver republishing its slices) would hold the
                    # event loop, and the scheduler's /filter calls with it, until it is applied.
                    await asyncio.sleep(0)
        finally:
            resp.release()

    def handle(self, line: WatchLine, progress: WatchProgress) -> bool:
        """Apply one decoded line; True when it was an object event (the caller yields the loop)."""
        res = self.res
        if line is None:
            return False
        if isinstance(line, Gone):
            raise GoneError()
        if isinstance(line, WatchError):
            raise SourceError(f"watch {res.plural}: {line.message}")
        if isinstance(line, Bookmark):
            progress.delivered += 1
            self._advance(progress, line.resource_version)
            return False
        obj = line.object
        obj.setdefault("kind", res.kind)
        self.sink.apply(ev.ObjectEvent(line.type, res.kind, res.group, ev.object_key(res.kind, obj), lighten(res.kind, obj)))
        self.stats["watch_events"] += 1
        progress.delivered += 1
        self._advance(progress, line.resource_version)
        return True

    def _advance(self, progress: WatchProgress, rv: str | None) -> None:
        if rv:
            progress.rv = rv
            self.last_resource_versions[(self.res.kind, self.res.group)] = rv
