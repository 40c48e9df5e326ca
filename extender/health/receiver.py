"""The alert webhook listener (`--alerts-listen`): Alertmanager's `webhook_config` and Grafana's webhook.

Its own FastAPI app on its own socket, served by the HTTP thread like the
extender's (same body size and time limits). Every request needs the bearer
token read from `--alerts-token-file` (re-read when the mounted Secret
changes): 401 without it. A body that is not a valid delivery is a 400
naming the field; a valid one is handed to the controller on the main loop,
which answers 200 once it is applied in memory (its loop writes the rules
right after), or 503 when it cannot act (not the leader, the API server
refusing writes) so that Alertmanager retries.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from pathlib import Path

import orjson
from fastapi import FastAPI, Request, Response

from extender.health.alerts import BadPayload, parse_delivery
from extender.health.controller import Answer, HealthController
from extender.http_thread import InlineBridge, Limits, LoopBridge
from extender.metrics import Metrics
from extender.routes.body import Refused, json_response, read_body, refusal

log = logging.getLogger("dra_extender.health")


class TokenError(ValueError):
    pass


class TokenFile:
    """The bearer token, re-read when the file changes (a Secret's projected volume is updated in place)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = b""
        self.read()

    def read(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                token = self.path.read_bytes().strip()
                if not token:
                    raise TokenError(f"--alerts-token-file {self.path}: the file is empty")
                self._token, self._stamp = token, stamp
        except OSError as e:
            if not self._token:
                raise TokenError(f"--alerts-token-file {self.path}: {e.strerror or e}") from None
            log.warning("alerts token file unreadable; keeping the last token", extra={"path": str(self.path), "err": str(e)})
        return self._token

    def accepts(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self.read())


class Receiver:
    def __init__(
        self,
        controller: HealthController,
        token_file: Path,
        limits: Limits,
        *,
        bridge: LoopBridge | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.controller = controller
        self.token = TokenFile(token_file)
        self.limits = limits
        self.bridge = bridge if bridge is not None else InlineBridge()
        self.metrics = metrics or controller.metrics
        self.app = self._create_app()

    def _create_app(self) -> FastAPI:
        app = FastAPI(title="dra-extender alerts", docs_url=None, redoc_url=None, openapi_url=None)

        async def receive(request: Request) -> Response:
            start = time.perf_counter()
            response = await self._handle(request)
            self.metrics.health_deliveries.labels(str(response.status_code)).observe(time.perf_counter() - start)
            return response

        for path in ("/alerts", "/api/v2/alerts/webhook"):
            app.add_api_route(path, receive, methods=["POST"])
        return app

    async def _handle(self, request: Request) -> Response:
        if not self.token.accepts(request.headers.get("authorization")):
            return json_response(orjson.dumps({"error": "missing or wrong bearer token"}), 401)
        try:
            body = await read_body(request, self.limits)
        except Refused as e:
            return refusal(e)
        try:
            # In a worker thread: parsing 20,000 alerts takes a few hundred ms that the HTTP thread's loop,
            # which also reads /filter's requests, must not be held for (docs/health.md, Bounded state).
            delivery = await asyncio.to_thread(parse_delivery, body)
        except BadPayload as e:
            return json_response(orjson.dumps({"error": str(e), "field": e.field}), 400)
        answer: Answer = await self.bridge.call(lambda: self.controller.deliver(delivery))
        return json_response(orjson.dumps(answer.body), answer.status)
