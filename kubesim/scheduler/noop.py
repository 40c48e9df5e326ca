"""The reference extender: every node passes, scores 0, /bind only creates the Binding.

python -m kubesim.scheduler.noop --kubeconfig K --listen HOST:PORT
"""

from __future__ import annotations

import argparse
import base64
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from fastapi import FastAPI, Request, Response


def noop_extender(kubeconfig: str, listen: str) -> None:
    """FastAPI + uvicorn like dra-extender: every node passes, scores 0, /bind only creates the Binding."""
    import uvicorn
    import yaml

    conf = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = conf["clusters"][0]["cluster"]
    server = cluster["server"].rstrip("/")
    token = ((conf.get("users") or [{}])[0].get("user") or {}).get("token")
    tls: ssl.SSLContext | bool = True
    if cluster.get("certificate-authority-data"):  # a real API server's own CA (bench/real_plane_modes.py)
        tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    app = FastAPI()
    state: dict[str, aiohttp.ClientSession] = {}

    def session() -> aiohttp.ClientSession:
        if "s" not in state:
            state["s"] = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {token}"} if token else {}, connector=aiohttp.TCPConnector(ssl=tls)
            )
        return state["s"]

    def ok(body: Any) -> Response:
        return Response(orjson.dumps(body), media_type="application/json")

    @app.get("/readyz")
    @app.get("/livez")
    async def ready() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return ok({"NodeNames": args.get("NodeNames") or [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return ok([{"Host": n, "Score": 0} for n in args.get("NodeNames") or []])

    @app.post("/bind")
    async def bind(request: Request) -> Response:
        a = orjson.loads(await request.body())
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": a["PodName"], "namespace": a["PodNamespace"], "uid": a["PodUID"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": a["Node"]},
        }
        async with session().post(
            f"{server}/api/v1/namespaces/{a['PodNamespace']}/pods/{a['PodName']}/binding",
            data=orjson.dumps(binding),
            headers={"Content-Type": "application/json"},
        ) as resp:
            text = await resp.text()
            return ok({"Error": "" if resp.status in (200, 201) else f"binding: HTTP {resp.status}: {text[:200]}"})

    host, _, port = listen.rpartition(":")
    loop = "uvloop"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        loop = "asyncio"
    uvicorn.run(app, host=host, port=int(port), log_config=None, access_log=False, http="httptools", loop=loop)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kubesim.scheduler.noop")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--listen", default="127.0.0.1:8888")
    a = p.parse_args(argv)
    noop_extender(a.kubeconfig, a.listen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
