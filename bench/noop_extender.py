"""A no-op scheduler extender on the extender's own stack, the baseline of `bench_workloads`.

FastAPI + uvicorn (uvloop, httptools), raw bodies and orjson, as `extender/app.py`
serves: `/filter` passes every node, `/prioritize` scores every node 0, `/bind`
binds nothing and answers success. What a sequential driver measures against it
is the driver's and HTTP's own cost, so `extender pods/s / no-op pods/s` is the
share of scheduling time the extender leaves to the rest.

    .venv/bin/python -m bench.noop_extender --port 8899
"""

from __future__ import annotations

import argparse

import orjson
from fastapi import FastAPI, Request, Response

JSON = "application/json"


def create_app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return Response(
            orjson.dumps(
                {"Nodes": None, "NodeNames": args.get("NodeNames") or [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
            ),
            media_type=JSON,
        )

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return Response(orjson.dumps([{"Host": n, "Score": 0} for n in args.get("NodeNames") or []]), media_type=JSON)

    @app.post("/bind")
    async def bind(request: Request) -> Response:
        await request.body()
        return Response(b'{"Error":""}', media_type=JSON)

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:  # pragma: no cover
        loop = "asyncio"
    uvicorn.run(
        create_app(), host="127.0.0.1", port=args.port, log_config=None, access_log=False, loop=loop, http="httptools", lifespan="off"
    )


if __name__ == "__main__":
    main()
