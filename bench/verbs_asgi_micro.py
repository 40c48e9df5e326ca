"""A verb's body read and answer sent, in process: Starlette's Request and Response against the raw ASGI path.

The HTTP thread's own share of each verb, without the decision: an 85 KB /filter body (5,000 names) read
from one ASGI message and a small JSON answer sent. `--before-tree` is another checkout whose
serving/body.py `read_body` (on a Starlette Request) is timed against this tree's `read_asgi_body` and
`Answer`; rounds alternate their order. CPU time of this thread per request, µs.

    .venv/bin/python -m bench.verbs_asgi_micro --before-tree /tmp/old --name i42-filter-asgi-micro
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from fastapi import Response
from starlette.requests import Request

from bench.bench_scheduling import pod_body
from bench.common import RESULTS
from serving.body import Answer, read_asgi_body
from serving.http_thread import Limits

ANSWER = b'{"Nodes":null,"NodeNames":["node-00001"],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before-tree", type=Path, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("before_body", a.before_tree / "serving" / "body.py")
    assert spec is not None and spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    body = orjson.dumps(pod_body(1, [f"node-{i:05d}" for i in range(5000)]))
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/filter",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 2),
        "http_version": "1.1",
        "asgi": {"version": "3.0"},
    }
    limits = Limits()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(_message: Any) -> None:
        pass

    async def starlette() -> None:
        await before.read_body(Request(scope, receive), limits)
        await Response(content=ANSWER, status_code=200, media_type="application/json")(scope, receive, send)

    async def raw() -> None:
        await read_asgi_body(scope, receive, limits)
        await Answer(ANSWER).send(send)

    async def per_request(fn: Callable[[], Awaitable[None]], n: int = 5000) -> float:
        t0 = time.process_time()
        for _ in range(n):
            await fn()
        return round((time.process_time() - t0) / n * 1e6, 2)

    async def rounds() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"starlette": [], "raw": []}
        for r in range(a.rounds):
            order = [("starlette", starlette), ("raw", raw)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                out[name].append(await per_request(fn))
        return out

    load_start = os.getloadavg()
    result = {"name": a.name, "body_bytes": len(body), "us_per_request_cpu": asyncio.run(rounds())}
    result["median_us"] = {k: sorted(v)[len(v) // 2] for k, v in result["us_per_request_cpu"].items()}
    result["loadavg_start_end"] = [list(load_start), list(os.getloadavg())]
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
