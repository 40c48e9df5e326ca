"""The webhook's HTTP edge, within the extender's request limits.

The body is read as the extender reads its verbs' (serving/body.py:
413 past --max-body-bytes without reading further, 408 past --body-timeout),
only JSON is accepted (415), a malformed review is a 400 naming the field,
and a client that hangs up is logged at debug, never as a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect

from serving.bad_request import BadRequest
from serving.body import JSON, Refused, bad_request, json_response, read_body, refusal, text
from serving.http_thread import Limits
from webhook import review as rv
from webhook.classes import DeviceClassNames

log = logging.getLogger("dra_extender.webhook")

CLASS_WAIT_SECONDS = 2.0  # a review that needs the DeviceClasses waits this long for their first list


def is_json(content_type: str | None) -> bool:
    """application/json, with or without parameters (charset)."""
    return (content_type or "").partition(";")[0].strip().lower() == JSON


def create_webhook_app(
    scheduler_name: str,
    classes: DeviceClassNames,
    *,
    limits: Limits | None = None,
    excluded: Collection[str] = (),
    class_wait: float = CLASS_WAIT_SECONDS,
    stale: Callable[[], bool] = lambda: False,
) -> FastAPI:
    """POST /mutate, GET /healthz (liveness) and GET /readyz (the DeviceClasses are listed and their watch is current).

    `stale` tells when the DeviceClass watch has not been current for longer
    than the source's staleness threshold: a class created meanwhile may be unknown.
    """
    app = FastAPI(title="dra-extender webhook", docs_url=None, redoc_url=None, openapi_url=None)
    limits = limits if limits is not None else Limits()
    excluded = frozenset(excluded)

    def unknown_classes() -> str | None:
        """Why the DeviceClasses may be incomplete, or None."""
        if not classes.ready:
            return "DeviceClasses not listed yet"
        if stale():
            return "the DeviceClass watch is stale (no successful list or watch lately)"
        return None

    @app.get("/healthz")
    async def healthz() -> Response:
        return text("ok")

    @app.get("/readyz")
    async def readyz() -> Response:
        problem = unknown_classes()
        return text("ok") if problem is None else text(problem, 503)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        if not is_json(request.headers.get("content-type")):
            return refusal(Refused(415, f"Content-Type {request.headers.get('content-type', '')[:60]!r}: only {JSON} is accepted"))
        try:
            body = await read_body(request, limits)
        except Refused as e:
            log.info("review refused", extra={"status": e.status, "err": str(e)})
            return refusal(e)
        except ClientDisconnect:
            log.debug("client disconnected before sending its review")
            return Response(status_code=499)
        try:
            review = rv.parse_review(body)
        except BadRequest as e:
            log.info("bad AdmissionReview", extra={"err": str(e)})
            return bad_request(e)
        if rv.needs_class_list(review, classes.served()):
            await classes.wait_ready(class_wait)
            problem = unknown_classes()
            if problem is not None:
                # Fail closed: it may use a DRA-backed resource the webhook cannot see.
                log.warning("refusing a pod: its resources may be DRA-backed", extra={"pod": review.name, "err": problem})
                message = f"dra-extender webhook: {problem}, so it cannot tell whether the pod uses DRA devices; retry"
                return json_response(rv.refusal(review, 503, message))
        patch, why = rv.decide(review, scheduler_name, classes.served(), excluded)
        if patch:
            log.info("set schedulerName", extra={"pod": review.name, "scheduler": scheduler_name, "why": why})
        else:
            log.debug("left pod alone", extra={"pod": review.name, "why": why})
        return json_response(rv.answer(review, patch))

    return app
