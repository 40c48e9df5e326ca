"""The HTTP edge: FastAPI routes over raw bodies and orjson bytes.

FACTS.md measured raw body + orjson + `Response(bytes)` at ~2x pydantic
models and >10x returning dicts, so no models sit on the hot path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
import orjson
from fastapi import FastAPI, Query, Request, Response

from allocator.types import DeviceID
from extender import wire
from extender.service import NotReady, Service

log = logging.getLogger("dra_extender.http")

JSON = "application/json"


def _json(body: bytes, status: int = 200) -> Response:
    return Response(content=body, status_code=status, media_type=JSON)


def _bad_request(e: wire.BadRequest) -> Response:
    return _json(orjson.dumps({"error": str(e), "field": e.field}), 400)


def create_app(service: Service, *, probes_only: bool = False) -> FastAPI:
    app = FastAPI(title="dra-extender", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = service.metrics
    state = service.state

    @app.get("/livez")
    @app.get("/healthz")
    async def livez() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if state.ready:
            return Response(b"ok", media_type="text/plain")
        return Response(
            f"not ready: waiting for the initial state of {', '.join(state.missing())}".encode(),
            status_code=503,
            media_type="text/plain",
        )

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.ready.set(1 if state.ready else 0)
        metrics.leader.set(1 if service.is_leader() else 0)
        for k, v in state.device_state_counts().items():
            metrics.devices.labels(k).set(v)
        stats = getattr(state.cel, "stats", None)
        if isinstance(stats, dict):
            for k, v in stats.items():
                metrics.cel.labels(k).set(v)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    if probes_only:
        return app

    def timed(verb: str, handler: Callable[[bytes], object], on_error: Callable[[str], bytes]):
        async def route(request: Request) -> Response:
            start = time.perf_counter()
            ok = False
            try:
                body = await request.body()
                result = handler(body)
                if hasattr(result, "__await__"):
                    result = await result  # type: ignore[misc]
                ok = True
                return result  # type: ignore[return-value]
            except wire.BadRequest as e:
                log.info("bad request", extra={"verb": verb, "err": str(e)})
                return _bad_request(e)
            except Exception as e:  # noqa: BLE001 - the scheduler must get an answer, not a 500
                log.exception("internal error", extra={"verb": verb})
                return _json(on_error(f"internal error in dra-extender {verb}: {e}"))
            finally:
                metrics.observe(verb, time.perf_counter() - start, ok)

        return route

    async def do_filter(body: bytes) -> Response:
        args = wire.parse_extender_args(body)
        try:
            passed, failed = await service.filter(args)
        except NotReady as e:
            return _json(wire.error_filter_result(str(e)))
        return _json(wire.filter_result(args, passed, failed))

    def do_prioritize(body: bytes) -> Response:
        args = wire.parse_extender_args(body)
        try:
            scores = service.prioritize(args)
        except NotReady:
            # HostPriorityList has no error field: a neutral answer keeps the scheduler going.
            scores = [(n, 0) for n in args.names]
        return _json(wire.priority_list(scores))

    async def do_bind(body: bytes) -> Response:
        args = wire.parse_binding_args(body)
        try:
            error = await service.bind(args)
        except NotReady as e:
            error = str(e)
        return _json(wire.binding_result(error))

    app.add_api_route("/filter", timed("filter", do_filter, wire.error_filter_result), methods=["POST"])
    app.add_api_route("/prioritize", timed("prioritize", do_prioritize, lambda _e: b"[]"), methods=["POST"])
    app.add_api_route("/bind", timed("bind", do_bind, wire.binding_result), methods=["POST"])

    @app.get("/debug/devices")
    async def debug_devices(
        node: str = "",
        driver: str = "",
        pool: str = "",
        tainted: str = "",
        limit: int = 500,
        cont: str = Query("", alias="continue"),
    ) -> Response:
        return _json(orjson.dumps(debug_device_page(service, node, driver, pool, tainted, limit, cont)))

    @app.get("/debug/objects")
    async def debug_objects() -> Response:
        """resourceVersion of every object in the view, by `Kind.group`: compare it with the API server."""
        state = service.state
        body = {
            f"{kind}.{group}" if group else kind: dict(sorted(versions.items()))
            for (kind, group), versions in sorted(state.versions.items())
        }
        return _json(orjson.dumps({"generation": state.generation, "ready": state.ready, "objects": body}))

    return app


def debug_device_page(
    service: Service, node: str, driver: str, pool: str, tainted: str, limit: int, cont: str
) -> dict[str, object]:
    """The patched device view, page by page (sorted by driver/pool/device)."""
    state = service.state
    limit = max(1, min(limit, 5000))
    ids = sorted(state.devices, key=lambda d: (d.driver, d.pool, d.device))
    if node:
        reach = {d.id for s in state.slices_for_node(node) for d in s.devices}
        ids = [d for d in ids if d in reach]
    if driver:
        ids = [d for d in ids if d.driver == driver]
    if pool:
        ids = [d for d in ids if d.pool == pool]
    if tainted.lower() == "true":
        ids = [d for d in ids if state.devices[d].taints]
    start = 0
    if cont:
        after = tuple(cont.split("\x1f"))
        start = next((i for i, d in enumerate(ids) if (d.driver, d.pool, d.device) > after), len(ids))
    page = ids[start : start + limit]
    items = []
    for did in page:
        view = state.devices[did]
        slice_ = state.slices.get(state._device_slice.get(did, ""))  # noqa: SLF001 - read-only debug view
        original = next((d for d in slice_.devices if d.name == did.device), None) if slice_ else None
        items.append(
            {
                "driver": did.driver,
                "pool": did.pool,
                "device": did.device,
                "node": view.node_name,
                "attributes": {
                    "original": _attrs(original.attributes) if original else {},
                    "effective": _attrs(view.attributes),
                },
                "capacity": {
                    "original": {k: str(v) for k, v in original.capacity.items()} if original else {},
                    "effective": {k: str(v) for k, v in view.capacity.items()},
                },
                "taints": [
                    {"key": t.key, "value": t.value, "effect": t.effect, "timeAdded": t.time_added, "source": src}
                    for t, src in zip(view.taints, view.taint_sources, strict=False)
                ],
                "allocatedTo": state.allocated.get(did),
            }
        )
    more = start + limit < len(ids)
    last: DeviceID | None = page[-1] if page and more else None
    return {"items": items, "continue": "\x1f".join((last.driver, last.pool, last.device)) if last else ""}


def _attrs(attrs) -> dict[str, object]:
    return {k: (v if isinstance(v, int | bool | str) else str(v)) for k, v in attrs.items()}

