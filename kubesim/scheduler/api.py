"""The API server as the model sees it: JSON over aiohttp, and informers (list, then watch from its resourceVersion)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson

from kubesim.scheduler.config import key_of


class Api:
    """A thin aiohttp client for the (fake) API server: JSON in and out, list pages, watch lines."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        self.session = aiohttp.ClientSession(
            headers=self.headers,
            read_bufsize=2**22,
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.session is not None
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        assert self.session is not None
        data = orjson.dumps(body) if body is not None else None
        async with self.session.request(method, self.url + path, data=data, headers={"Content-Type": content_type}) as resp:
            raw = await resp.read()
            return resp.status, (orjson.loads(raw) if raw else None)

    async def list(self, path: str) -> tuple[list[dict[str, Any]], str] | None:
        """Every object (paged) and the list's resourceVersion; None when the server does not serve it."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            status, body = await self.request("GET", f"{path}?limit=500" + (f"&continue={token}" if token else ""))
            if status == 404:
                return None
            if status != 200:
                raise RuntimeError(f"list {path}: HTTP {status}: {str(body)[:300]}")
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items, body["metadata"]["resourceVersion"]

    async def watch(self, path: str, rv: str) -> AsyncIterator[dict[str, Any]]:
        assert self.session is not None
        url = f"{self.url}{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: HTTP {resp.status}")
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield orjson.loads(line)


class Informer:
    """List, then watch from the list's resourceVersion; re-list on 410 or a broken watch. Calls handler(type, old, new)."""

    def __init__(
        self, api: Api, kind: str, path: str, handler: Callable[[str, str, dict[str, Any] | None, dict[str, Any] | None], None]
    ) -> None:
        self.api, self.kind, self.path, self.handler = api, kind, path, handler
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.served = True

    async def run(self) -> None:
        while True:
            try:
                listed = await self.api.list(self.path)
                if listed is None:
                    self.served = False
                    self.synced.set()
                    return
                items, rv = listed
                fresh = {key_of(o): o for o in items}
                for k, gone in list(self.cache.items()):
                    if k not in fresh:
                        del self.cache[k]
                        self.handler(self.kind, "DELETED", gone, None)
                for k, obj in fresh.items():
                    old = self.cache.get(k)
                    self.cache[k] = obj
                    if old is None or old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                        self.handler(self.kind, "MODIFIED" if old else "ADDED", old, obj)
                self.synced.set()
                async for ev in self.api.watch(self.path, rv):
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    if typ == "ERROR":
                        break  # 410 Gone or another error: re-list
                    rv = obj["metadata"]["resourceVersion"]
                    k = key_of(obj)
                    old = self.cache.get(k)
                    if typ == "DELETED":
                        self.cache.pop(k, None)
                        self.handler(self.kind, typ, old, None)
                    else:
                        self.cache[k] = obj
                        self.handler(self.kind, "MODIFIED" if old else "ADDED", old, obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broken watch: re-list after a pause, as client-go does
                print(json.dumps({"informer": self.kind, "error": repr(e)[:200]}), file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)
