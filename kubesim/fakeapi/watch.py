"""Watches: the streams the fake API server sends, and the controls a test uses to end or count them.

A watch answers with its events as the store queues them (batched per
write), a BOOKMARK every `bookmark_interval` when the client allows them,
the initial-events-end bookmark for `sendInitialEvents`, and ends at its
timeout, on a clean close (a final chunk) or on an abrupt drop (the
connection cut, no ERROR event), as a real server's watches end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kubesim.fakeapi.faults import RequestInfo, RequestRecord
from kubesim.fakeapi.registry import Registry, ResourceType
from kubesim.fakeapi.responses import TRUE
from kubesim.fakeapi.store import ApiError, Store, Watcher


class WatchControls:
    """The watch half of FakeApiServer: compaction, dropping and counting watches, switching groups off."""

    store: Store
    registry: Registry

    def compact(self) -> int:
        """Move the compaction point to now: older resourceVersions answer 410. Returns it."""
        return self.store.compact()

    def drop_watches(self, *, abrupt: bool = True, resource: str | None = None, group: str | None = None) -> int:
        """End open watch streams now: abrupt cuts the connection (no ERROR, no final chunk). Returns how many."""
        keys = None
        if resource is not None:
            keys = [self.registry.resolve(resource, group).key]
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

    @property
    def open_watches(self) -> int:
        return len(self.store.all_watchers())

    def watches_on(self, resource: str, *, group: str | None = None) -> int:
        return len(self.store.watchers.get(self.registry.resolve(resource, group).key, ()))

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


@dataclass(frozen=True)
class WatchSettings:
    """What a stream needs from its server: the bookmark interval, the default timeout, and the freeze switch."""

    bookmark_interval: float
    default_timeout: float | None
    while_hung: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class _Stream:
    request: web.Request
    response: web.StreamResponse
    watcher: Watcher
    store: Store
    kind: str
    api_version: str

    def bookmark(self, *, initial: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if initial:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        mark = {"kind": self.kind, "apiVersion": self.api_version, "metadata": meta}
        return b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n"

    def abort(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()


def watch_options(query: Any, default_timeout: float | None) -> tuple[bool, bool, float | None]:
    """(bookmarks allowed, initial events wanted, timeout in seconds) from a watch's query."""
    bookmarks = query.get("allowWatchBookmarks") in TRUE
    send_initial = query.get("sendInitialEvents") in TRUE
    if send_initial and (query.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
        raise ApiError(422, "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true", "Invalid")
    timeout = default_timeout
    if query.get("timeoutSeconds"):
        try:
            timeout = float(query["timeoutSeconds"])
        except ValueError as e:
            raise ApiError(400, f"timeoutSeconds: Invalid value: {query['timeoutSeconds']!r}", "BadRequest") from e
    return bookmarks, send_initial, timeout


async def stream(
    request: web.Request, rec: RequestRecord, store: Store, t: ResourceType, info: RequestInfo, match: Any, settings: WatchSettings
) -> web.StreamResponse:
    """Answer a watch request: stream its events until it times out, is closed, or is dropped."""
    q = request.query
    bookmarks, send_initial, timeout = watch_options(q, settings.default_timeout)
    w = store.open_watch(
        t, info.version, namespace=info.namespace, match=match, resource_version=q.get("resourceVersion"), send_initial=send_initial
    )
    rec.status = 200
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
    resp.enable_chunked_encoding()
    s = _Stream(request, resp, w, store, t.kind, t.api_version(info.version))
    if send_initial:
        w.queue.put_nowait(s.bookmark(initial=True))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    next_mark = loop.time() + settings.bookmark_interval if bookmarks else None
    try:
        await resp.prepare(request)
        if await _pump(s, deadline, next_mark, settings):
            await resp.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.close_watch(w)
    return resp


async def _pump(s: _Stream, deadline: float | None, next_mark: float | None, settings: WatchSettings) -> bool:
    """Write events (and bookmarks) until the stream ends: True if it ends cleanly, False if it was dropped."""
    loop = asyncio.get_running_loop()
    while True:
        now = loop.time()
        waits = [x - now for x in (deadline, next_mark) if x is not None]
        try:
            if waits:
                async with asyncio.timeout(max(0.0, min(waits))):
                    line = await s.watcher.queue.get()
            else:
                line = await s.watcher.queue.get()
        except TimeoutError:
            now = loop.time()
            if deadline is not None and now >= deadline:
                return True
            if next_mark is not None and now >= next_mark:
                await settings.while_hung()
                if s.watcher.queue.empty():
                    await s.response.write(s.bookmark())
                next_mark = now + settings.bookmark_interval
            continue
        await settings.while_hung()
        batch, ended = _drain(line, s.watcher)
        if batch:
            await s.response.write(b"".join(batch))
        if ended is Watcher.DROP:
            s.abort()
            return False
        if ended is Watcher.CLOSE:
            return True


def _drain(line: Any, w: Watcher) -> tuple[list[bytes], Any]:
    """The events queued behind `line` (at most 512), and the end marker (DROP or CLOSE) that stopped them, if any."""
    if line is Watcher.DROP or line is Watcher.CLOSE:
        return [], line
    batch = [line]
    while not w.queue.empty() and len(batch) < 512:
        nxt = w.queue.get_nowait()
        if nxt is Watcher.DROP or nxt is Watcher.CLOSE:
            return batch, nxt
        batch.append(nxt)
    return batch, None
