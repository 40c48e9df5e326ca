"""/filter, /prioritize and /bind: read and parse where the listener is served, decide on the main loop through the service.

serve's --listen is served on the main loop (its bridge awaits in place); through a LoopBridge from
another loop the decision hops to the main loop and back.

Each verb's route (`VerbRoute`) reads its body from the ASGI messages and its answer is sent as two
messages, no Request or Response object on the way (three requests per pod). FastAPI still routes them
when the app's direct dispatch does not (extender/app.py), through `VerbRoute.endpoint`, same bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

from extender import wire
from extender.service import BudgetExceeded, NotReady, Service
from serving.body import CLIENT_GONE, Answer, Refused, bad_request_answer, json_answer, read_asgi_body, refusal_answer
from serving.http_thread import Limits, LoopBridge, call_and_await
from serving.metrics import Metrics

log = logging.getLogger("dra_extender.http")
decisions = logging.getLogger("dra_extender.filter")  # --log-level debug: every /filter decision

A = TypeVar("A")  # a verb's parsed arguments


@dataclass(frozen=True, slots=True)
class Verb(Generic[A]):
    """One verb: how its body is parsed, decided, answered on error, and (maybe) answered without the main loop.

    `quick`, when given, may answer from the request alone (a pod without
    claims) or from what the main loop prepared for it (/prioritize after
    /filter), without the handler: no decision, and through a LoopBridge
    no hop.
    """

    name: str
    parse: Callable[[bytes], A]
    handler: Callable[[A], Awaitable[bytes] | bytes]  # the JSON answer
    on_error: Callable[[str], bytes]
    quick: Callable[[A], bytes | None] | None = None


class InFlight(Protocol):
    """Where the verbs in flight are counted (the state's tracker/foreground.py, through the service)."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


class VerbRoute:
    """The route of one verb over raw ASGI messages: read and parse here, decide on the main loop (through the bridge).

    From its first byte to its answer the verb counts in `foreground`, so the
    state's optional background work waits (tracker/foreground.py).
    """

    __slots__ = ("bridge", "foreground", "limits", "metrics", "verb")

    def __init__(self, verb: Verb[A], limits: Limits, bridge: LoopBridge, metrics: Metrics, foreground: InFlight) -> None:
        self.verb: Verb[object] = verb  # type: ignore[assignment]  # A is only passed from parse to handler
        self.limits, self.bridge, self.metrics, self.foreground = limits, bridge, metrics, foreground

    async def endpoint(self, request: Request) -> Response:
        """The same answer as a Response, for FastAPI's own routing of the path."""
        return (await self.answer(request.scope, request.receive)).response()

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        self.foreground.begin()
        try:
            return await self.counted(scope, receive)
        finally:
            self.foreground.end()

    async def counted(self, scope: Scope, receive: Receive) -> Answer:
        verb, name = self.verb, self.verb.name
        start = time.perf_counter()
        try:
            body = await read_asgi_body(scope, receive, self.limits)
        except Refused as e:
            log.info("request refused", extra={"verb": name, "status": e.status, "err": str(e)})
            return refusal_answer(e)
        except ClientDisconnect:
            # The client went away: nothing to answer, no error, no latency sample.
            log.debug("client disconnected before sending its request", extra={"verb": name})
            return CLIENT_GONE
        try:
            args = verb.parse(body)
            answered = verb.quick(args) if verb.quick is not None else None
        except wire.BadRequest as e:
            log.info("bad request", extra={"verb": name, "err": str(e)})
            self.metrics.observe(name, time.perf_counter() - start, False)
            return bad_request_answer(e)
        except Exception as e:
            log.exception("internal error", extra={"verb": name})
            self.metrics.observe(name, time.perf_counter() - start, False)
            return json_answer(verb.on_error(f"internal error in dra-extender {name}: {e}"))
        if answered is not None:
            self.metrics.observe(name, time.perf_counter() - start, True)
            return json_answer(answered)
        return await self.bridge.run(self.decide(args, start))

    async def decide(self, args: object, start: float) -> Answer:
        verb, name = self.verb, self.verb.name
        ok = False
        try:
            result = await call_and_await(lambda: verb.handler(args))
            ok = True
            return json_answer(result)
        except wire.BadRequest as e:
            log.info("bad request", extra={"verb": name, "err": str(e)})
            return bad_request_answer(e)
        except Exception as e:
            log.exception("internal error", extra={"verb": name})
            return json_answer(verb.on_error(f"internal error in dra-extender {name}: {e}"))
        finally:
            self.metrics.observe(name, time.perf_counter() - start, ok)


def log_decision(args: wire.ExtenderArgs, passed: list[str], failed: dict[str, str], error: str = "") -> None:
    """At debug level, every /filter decision: the pod, the nodes that fit, and each rejected node's reason."""
    if not decisions.isEnabledFor(logging.DEBUG):
        return
    meta = args.pod.get("metadata") or {}
    decisions.debug(
        "filter decision",
        extra={
            "pod": f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}",
            "asked": len(args.names),
            "fit": ",".join(passed),
            "rejected": failed,
            **({"err": error} if error else {}),
        },
    )


def filter_verb(service: Service, budget: float | None) -> Verb[wire.ExtenderArgs]:
    async def decide(args: wire.ExtenderArgs) -> bytes:
        try:
            passed, failed = await service.filter(args, budget=budget)
        except (NotReady, BudgetExceeded) as e:
            log_decision(args, [], {}, str(e))
            return wire.error_filter_result(str(e))
        log_decision(args, passed, failed)
        return wire.filter_result(args, passed, unresolvable=failed)

    def quick(args: wire.ExtenderArgs) -> bytes | None:
        passed = service.filter_without_state(args)
        if passed is not None:
            log_decision(args, passed, {})
        return None if passed is None else wire.filter_result(args, passed, unresolvable={})

    return Verb("filter", wire.parse_extender_args, decide, wire.error_filter_result, quick)


def prioritize_verb(service: Service) -> Verb[wire.ExtenderArgs]:
    def decide(args: wire.ExtenderArgs) -> bytes:
        try:
            scores = service.prioritize(args)
        except NotReady:
            # HostPriorityList has no error field: a neutral answer keeps the scheduler going.
            scores = [(n, 0) for n in args.names]
        return wire.priority_list(scores)

    def quick(args: wire.ExtenderArgs) -> bytes | None:
        scores = service.prioritize_without_state(args)
        return None if scores is None else wire.priority_list(scores)

    return Verb("prioritize", wire.parse_extender_args, decide, lambda _e: b"[]", quick)


def bind_verb(service: Service, bridge: LoopBridge) -> Verb[wire.BindingArgs]:
    async def decide(args: wire.BindingArgs) -> bytes:
        try:
            refusal = await service.bind(args)
            error = "" if refusal is None else refusal.message
        except NotReady as e:
            error = str(e)
        return wire.binding_result(error)

    def parse(raw: bytes) -> wire.BindingArgs:
        """A /bind the scheduler sent but we cannot read is decided too: release its pod in the gate."""
        try:
            return wire.parse_binding_args(raw)
        except wire.BadRequest:
            uid = wire.pod_uid_of(raw)
            if uid:
                bridge.call_soon(lambda: service.bind_decided(uid))
            raise

    return Verb("bind", parse, decide, wire.binding_result)


class Route(Protocol):
    """What the app's direct dispatch needs of a verb's route: its answer to one request's ASGI messages."""

    async def answer(self, scope: Scope, receive: Receive) -> Answer: ...


def add_verb_routes(app: FastAPI, service: Service, bridge: LoopBridge, limits: Limits, *, filter_budget: float | None) -> dict[str, Route]:
    """The three POST routes, registered on `app`; returned by path for the app's direct dispatch (extender/app.py)."""
    metrics, foreground = service.metrics, service.foreground
    routes: dict[str, VerbRoute] = {
        "/filter": VerbRoute(filter_verb(service, filter_budget), limits, bridge, metrics, foreground),
        "/prioritize": VerbRoute(prioritize_verb(service), limits, bridge, metrics, foreground),
        "/bind": VerbRoute(bind_verb(service, bridge), limits, bridge, metrics, foreground),
    }
    for path, route in routes.items():
        app.add_api_route(path, route.endpoint, methods=["POST"])
    return dict[str, Route](routes)
