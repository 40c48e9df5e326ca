"""The alert webhook listener (`--alerts-listen`): Alertmanager's `webhook_config` and Grafana's webhook.

Its own FastAPI app on its own socket, served by the HTTP thread like the
extender's (same body size and time limits). Every request needs the bearer
token read from `--alerts-token-file` (re-read when the mounted Secret
changes): 401 without it. A body that is not a valid delivery is a 400
naming the field; a valid one is handed to the controller on the main loop,
which answers 200 once it is applied in memory (its loop writes the rules
right after), or 503 when it cannot act (not the leader, the API server
refusing writes) so that Alertmanager retries.

The token file keeps the last good token through a missing, empty or
unreadable moment (a Secret being rewritten); with no good token ever read
every delivery is refused with 503 and the reason, never let through. Every
refusal (400, 401, 408, 413, 503) is logged beside its metric, one line per
cause per minute with the count since the cause's last line
(docs/health.md#the-receiver).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from fastapi import FastAPI, Request, Response

from controllers.health.alerts import BadPayload, parse_delivery
from controllers.health.controller import Answer, HealthController
from serving.body import Refused, json_response, read_body, refusal
from serving.http_thread import InlineBridge, Limits, LoopBridge
from serving.metrics import Metrics
from tracker.clock import Clock, SystemClock

log = logging.getLogger("dra_extender.health")


LOG_EVERY = 60.0  # seconds: one line per cause at most this often


class TokenError(ValueError):
    pass


class EveryMinute:
    """Log lines rate-limited per cause: the first at once, then at most one per LOG_EVERY with the count since the last."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._last: dict[str, float] = {}  # cause -> when its last line was written
        self._since: dict[str, int] = {}  # cause -> occurrences since that line (the one written included)

    def note(self, cause: str, message: str, **extra: object) -> None:
        now = self.clock.now()
        self._since[cause] = self._since.get(cause, 0) + 1
        last = self._last.get(cause)
        if last is not None and now - last < LOG_EVERY:
            return
        count = self._since.pop(cause)
        self._last[cause] = now
        extra = {**extra, "cause": cause, "count": count}
        if last is not None:
            extra["since_s"] = round(now - last, 1)
        log.warning(message, extra=extra)


class TokenFile:
    """The bearer token, re-read when the file changes (a Secret's projected volume is updated in place).

    A file that is missing, empty or unreadable keeps the last good token
    (a Secret rewritten in place is briefly empty), with a warning per
    minute; TokenError only while no good token was ever read.
    `required`: read it now, TokenError if it cannot be (serve's startup
    check, a usage error); the receiver's own copy starts without that check.
    """

    def __init__(self, path: Path, *, warnings: EveryMinute | None = None, required: bool = True) -> None:
        self.path = path
        self.warnings = warnings or EveryMinute(SystemClock())
        self._stamp: tuple[int, int] | None = None  # the file's (mtime, size) when the token was last read from it
        self._token = b""
        if required:
            self.read()

    def read(self) -> bytes:
        """The token; TokenError (naming the flag, the path and why) while no good token was ever read."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return self._token
            token = self.path.read_bytes().strip()
            if not token:
                problem = "the file is empty"
            else:
                self._token, self._stamp = token, stamp
                return token
        except OSError as e:
            problem = str(e.strerror or e)
        if not self._token:
            raise TokenError(f"--alerts-token-file {self.path}: {problem}")
        self.warnings.note(
            f"token file: {problem}",
            "alerts token file unusable; keeping the last good token",
            path=str(self.path),
            err=problem,
        )
        return self._token

    def accepts(self, header: str | None) -> bool:
        """Whether the header carries the token; TokenError when there is no token to compare with."""
        token = self.read()
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), token)


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A delivery refused before the controller saw it: its status, the cause logged, and the answer."""

    status: int
    cause: str
    body: dict[str, object]


class Receiver:
    def __init__(
        self,
        controller: HealthController,
        token_file: Path,
        limits: Limits,
        *,
        bridge: LoopBridge | None = None,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.controller = controller
        self.refusals = EveryMinute(clock or controller.clock)
        self.token = TokenFile(token_file, warnings=self.refusals, required=False)
        self.limits = limits
        self.bridge = bridge if bridge is not None else InlineBridge()
        self.metrics = metrics or controller.metrics
        self.app = self._create_app()

    def _create_app(self) -> FastAPI:
        app = FastAPI(title="dra-extender alerts", docs_url=None, redoc_url=None, openapi_url=None)

        async def receive(request: Request) -> Response:
            start = time.perf_counter()
            try:
                response = await self._handle(request)
            except Exception as e:  # never a 500: Alertmanager retries a 503, and the log says why
                log.exception("alert delivery failed", extra={"path": request.url.path})
                response = self._refused(_Refusal(503, "internal error", {"error": f"internal error: {type(e).__name__}: retry"}))
            self.metrics.health_deliveries.labels(str(response.status_code)).observe(time.perf_counter() - start)
            return response

        for path in ("/alerts", "/api/v2/alerts/webhook"):
            app.add_api_route(path, receive, methods=["POST"])
        return app

    def _refused(self, r: _Refusal, response: Response | None = None) -> Response:
        self.refusals.note(f"{r.status} {r.cause}", "alert deliveries refused", status=r.status, detail=str(r.body.get("error", "")))
        return response or json_response(orjson.dumps(r.body), r.status)

    async def _handle(self, request: Request) -> Response:
        header = request.headers.get("authorization")
        try:
            accepted = self.token.accepts(header)
        except TokenError as e:  # fail closed: nothing to compare with, so nothing is let through
            return self._refused(_Refusal(503, "no bearer token to check against", {"error": f"{e}: the receiver refuses every delivery"}))
        if not accepted:
            cause = "missing bearer token" if not header else "wrong bearer token"
            return self._refused(_Refusal(401, cause, {"error": "missing or wrong bearer token"}))
        try:
            body = await read_body(request, self.limits)
        except Refused as e:
            return self._refused(_Refusal(e.status, "body refused", {"error": str(e)}), refusal(e))
        try:
            # In a worker thread: parsing 20,000 alerts takes a few hundred ms that the HTTP thread's loop,
            # which also reads /filter's requests, must not be held for (docs/health.md, Bounded state).
            delivery = await asyncio.to_thread(parse_delivery, body)
        except BadPayload as e:
            return self._refused(_Refusal(400, "bad payload", {"error": str(e), "field": e.field}))
        answer: Answer = await self.bridge.call(lambda: self.controller.deliver(delivery))
        if answer.status != 200:  # the cause is the reason's head ("not the leader", "API server write failed"): a few at most
            cause = str(answer.body.get("error") or "refused").split(":", 1)[0]
            return self._refused(_Refusal(answer.status, cause, answer.body))
        return json_response(orjson.dumps(answer.body), answer.status)
