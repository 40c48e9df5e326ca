"""/debug/devices, /debug/objects and /debug/volumes: bodies built and encoded on the main loop, sent from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Query, Response

from extender.service import Service
from serving.body import json_response
from serving.http_thread import LoopBridge


def add_debug_routes(app: FastAPI, service: Service, bridge: LoopBridge, *, source_status: Callable[[], dict[str, Any]] | None) -> None:
    """The pages are built on the main loop; where the app is served from the HTTP thread, that thread only sends bytes (probes wait on it)."""

    @app.get("/debug/devices")
    async def debug_devices(
        node: str = "",
        driver: str = "",
        pool: str = "",
        tainted: str = "",
        limit: int = 500,
        cont: str = Query("", alias="continue"),
    ) -> Response:
        body = await bridge.call(lambda: orjson.dumps(service.debug_devices(node, driver, pool, tainted, limit, cont)))
        return json_response(body)

    @app.get("/debug/objects")
    async def debug_objects() -> Response:
        """resourceVersion of every object in the view, by `Kind.group`, and how fresh each kind is."""

        def snapshot() -> dict[str, Any]:
            out = service.debug_objects()
            if source_status is not None:
                out["sources"] = source_status()
            return out

        return json_response(await bridge.call(lambda: orjson.dumps(snapshot())))

    @app.get("/debug/volumes")
    async def debug_volumes() -> Response:
        """Each tainted PVC/PV: its taints, and the pods using it and whether they tolerate them."""
        return json_response(await bridge.call(lambda: orjson.dumps({"items": service.debug_volumes()})))
