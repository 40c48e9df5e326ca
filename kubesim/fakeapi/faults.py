"""Injected failures, the request log and reactors: what a test uses to make the fake API server misbehave.

`Faults` answers matching requests with errors or latency (or freezes the
server); reactors may answer a request themselves; every request is logged
as a `RequestRecord`. `FaultControls` is the part of `FakeApiServer` that
holds them and applies them to each request before it is served.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from aiohttp import web

from kubesim.fakeapi.responses import json_response
from kubesim.fakeapi.store import ApiError


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
    user_agent: str = ""  # tells the extender's commands (and the test's own client) apart
    content_type: str = ""

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


# A reactor may answer a request itself: return None to pass, an ApiError to fail it,
# (status, body) to answer it, or a web.Response. It may be a coroutine function.
Reactor = Callable[[RequestInfo], Any]


def injected_error(f: Faults) -> ApiError:
    """The error an injected fault answers: 429 with Retry-After, or the configured status."""
    code = f.error_status
    if code == 429:
        return ApiError(
            code,
            "Too many requests, please try again later (injected fault)",
            None,
            details={"retryAfterSeconds": f.retry_after_seconds},
            headers={"Retry-After": str(f.retry_after_seconds)},
        )
    return ApiError(code, f"Internal error occurred: injected fault (HTTP {code})", None, details=None, headers={})


class FaultControls:
    """The fault, reactor and request-log half of FakeApiServer (its public controls and the per-request hook)."""

    faults: Faults
    requests: deque[RequestRecord]
    reactors: list[Reactor]
    _rng: random.Random

    def _init_faults(self, *, request_log_limit: int, seed: int | None) -> None:
        self.faults = Faults()
        self.requests = deque(maxlen=request_log_limit)
        self.reactors = []
        self._rng = random.Random(seed)

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

    def add_reactor(self, fn: Reactor) -> Reactor:
        """Let `fn` answer requests first (see Reactor). Returns fn, for remove_reactor."""
        self.reactors.append(fn)
        return fn

    def remove_reactor(self, fn: Reactor) -> None:
        self.reactors.remove(fn)

    def clear_requests(self) -> None:
        self.requests.clear()

    def requests_for(self, *, verb: str | None = None, resource: str | None = None, method: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.requests
            if (verb is None or r.verb == verb) and (resource is None or r.resource == resource) and (method is None or r.method == method)
        ]

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
            raise injected_error(f)
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
            return json_response(data, status)
        return None
