"""A journal of the requests the fake API server answered, write bodies included: what a bench replays against another server.

`python -m kubesim.fakeapi --journal PATH` records every API request as it
arrives (monotonic time, User-Agent, method, verb, resource, path, query,
content type; the body of a write) and writes them as JSON lines when the
server stops, so recording costs the measured run a list append, not a
file write. bench/bench_isolation.py replays one component's writes at the
times it made them, to tell the API server's cost of those writes from the
component's own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from kubesim.fakeapi.faults import RequestInfo

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Journal:
    """A reactor that answers nothing and records every request (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def __call__(self, info: RequestInfo) -> None:
        entry: dict[str, Any] = {
            "at": time.monotonic(),
            "user_agent": info.user_agent,
            "method": info.method,
            "verb": info.verb,
            "resource": info.resource + (f"/{info.subresource}" if info.subresource else ""),
            "path": info.path,
            "query": info.query,
        }
        if info.method in WRITE_METHODS:
            entry["content_type"] = info.content_type
            entry["body"] = info.json()
        self.entries.append(entry)

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in self.entries))
        return out


def read(path: str | Path) -> list[dict[str, Any]]:
    """A journal's entries, oldest first."""
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]
