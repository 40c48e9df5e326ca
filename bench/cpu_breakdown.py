"""`dra-extender serve` with its CPU split by thread and by component, for issue 31's CPU per pod.

    .venv/bin/python -m bench.kube_scheduler_model --workloads 5000x8-500 --no-reference --percentage-of-nodes-to-score 100 \\
        --extender-cmd "env PROF_OUT=DIR .venv/bin/python -m bench.cpu_breakdown serve --kubeconfig {kubeconfig} --standalone --listen {listen}"
    .venv/bin/python -m bench.cpu_breakdown summary DIR/breakdown.json PODS > bench/results/NAME.md

From the extender's readiness on, every thread's utime and stime
(/proc/self/task) and the thread CPU (time.thread_time) of the pieces a pod
goes through: synchronous sections bracketed, coroutines timed step by step
(each resumption's CPU, which includes the Python it calls synchronously, not
the event loop's protocol callbacks); nested pieces are reported both within
their callers and as their own rows. Written to DIR/breakdown.json every 2 s.
Why a wrapper and not deterministic profiling: cProfile and yappi hook every
call, and inflate call-heavy code (CEL evaluation, the verdicts loop) several
times over; py-spy samples wall time, and on a shared 2-core machine counts
threads waiting for a core. Thread CPU around whole pieces costs ~1 µs each.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

_ACTIVE = [False]
_ACC: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # name -> [calls, CPU seconds]
_TT = time.thread_time
_TICK = os.sysconf("SC_CLK_TCK")


def _add(name: str, dt: float) -> None:
    if _ACTIVE[0]:
        a = _ACC[name]
        a[0] += 1
        a[1] += dt


class _Timed:
    """Awaits a coroutine, adding the CPU of each of its steps to `name`."""

    __slots__ = ("coro", "name")

    def __init__(self, coro: Any, name: str) -> None:
        self.coro, self.name = coro, name

    def __await__(self) -> Generator[Any, Any, Any]:
        gen = self.coro.__await__()
        total = 0.0
        value: Any = None
        exc: BaseException | None = None
        try:
            while True:
                t = _TT()
                try:
                    y = gen.throw(exc) if exc is not None else gen.send(value)
                except StopIteration as s:
                    total += _TT() - t
                    return s.value
                total += _TT() - t
                exc = None
                try:
                    value = yield y
                except BaseException as e:
                    value, exc = None, e
        finally:
            _add(self.name, total)


def _wrap_async(owner: Any, attr: str, name: str | Callable[..., str]) -> None:
    f = getattr(owner, attr)

    async def timed(*a: Any, **k: Any) -> Any:
        return await _Timed(f(*a, **k), name(*a, **k) if callable(name) else name)

    setattr(owner, attr, timed)


def _wrap_sync(owner: Any, attr: str, name: str | Callable[..., str]) -> None:
    f = getattr(owner, attr)

    def timed(*a: Any, **k: Any) -> Any:
        t = _TT()
        try:
            return f(*a, **k)
        finally:
            _add(name(*a, **k) if callable(name) else name, _TT() - t)

    setattr(owner, attr, timed)


def _threads() -> dict[str, list[float]]:
    """Each thread's [utime, stime] in seconds, by thread name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        out[names.get(int(tid), tid)] = [int(fields[11]) / _TICK, int(fields[12]) / _TICK]
    return out


def _recorder(out: str, listen: str) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"http://{listen}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.2)
    at_ready = _threads()
    _ACTIVE[0] = True
    while True:
        time.sleep(2)
        pieces = {k: [v[0], round(v[1], 4)] for k, v in sorted(_ACC.items(), key=lambda kv: -kv[1][1])}
        with open(os.path.join(out, "breakdown.json"), "w") as f:
            json.dump({"t": time.time(), "ready": at_ready, "now": _threads(), "pieces": pieces}, f, indent=0)


def _write_target(path: str) -> str:
    """A write's subresource, or "object": one row per kind of write, not one per object."""
    last = path.rsplit("/", 1)[-1]
    return f".../{last}" if last in ("status", "binding", "eviction") else "object"


def _instrument() -> None:
    """Time the pieces a pod goes through (imported here: the extender's modules, after nothing else has run)."""
    from extender import service, wire
    from extender.bind import binder
    from extender.filter import outcomes
    from extender.prioritize import packing
    from extender.routes import verbs
    from serving import body
    from tracker import state, store
    from tracker.apiserver import reflector, source
    from tracker.views import warmup

    process_line = reflector.process_line

    def timed_line(line: bytes) -> Any:
        t = _TT()
        try:
            return process_line(line)
        finally:
            _add("watch: process_line (the event's JSON)", _TT() - t)

    reflector.process_line = timed_line
    _wrap_sync(reflector.Reflector, "handle", lambda self, line, progress: f"watch: Reflector.handle {self.res.kind} (parse and apply)")
    apply = state.ClusterState.apply

    def timed_apply(self: Any, event: Any) -> None:
        echo = event.type != "DELETED" and self._store.is_echo(event)
        t = _TT()
        try:
            apply(self, event)
        finally:
            _add(f"state.apply {event.kind}{' (an echo, skipped)' if echo else ''}", _TT() - t)

    state.ClusterState.apply = timed_apply  # type: ignore[method-assign]

    def timed_listeners(self: Any, event: Any) -> None:
        for listener in self._listeners:
            t = _TT()
            listener(event)
            _add(f"state listener: {getattr(listener, '__qualname__', type(listener).__qualname__)}", _TT() - t)

    state.ClusterState._tell_listeners = timed_listeners  # type: ignore[method-assign]
    _wrap_sync(store.ObjectStore, "apply", lambda self, event: f"state: ObjectStore.apply {event.kind} (parse and index)")
    _wrap_async(source.ApiSource, "send", lambda self, method, path, *a, **k: f"api write: ApiSource.send {method} {_write_target(path)}")
    _wrap_async(source.ApiSource, "request", lambda self, method, path, *a, **k: f"api read: ApiSource.request {method}")
    _wrap_async(verbs.VerbRoute, "answer", lambda self, scope, receive: f"http: the {self.verb.name} route (body, parse, hop, answer)")
    _wrap_async(body, "read_asgi_body", "http: read_asgi_body")
    setattr(verbs, "read_asgi_body", body.read_asgi_body)  # noqa: B010  # verbs imported the name: the timed one in its place
    for n in ("parse_extender_args", "parse_binding_args"):
        _wrap_sync(wire, n, f"http: wire.{n}")
    _wrap_async(service.Service, "filter", "main: Service.filter")
    _wrap_sync(service.Service, "prioritize", "main: Service.prioritize")
    _wrap_async(service.Service, "bind", "main: Service.bind")
    _wrap_sync(binder.Binder, "_decide", "main: Binder._decide (in Service.bind)")
    _wrap_sync(warmup.SelectorWarmup, "_warm_slice", "main: the devices' CEL warm-up (SelectorWarmup._warm_slice)")
    _wrap_sync(outcomes.OutcomeCache, "_compute", "main: a node's verdict computed (OutcomeCache._compute, in Service.filter)")
    _wrap_sync(packing.NodeFullness, "_compute", "main: a node's packing units computed (NodeFullness._compute, in Service.filter)")


def summary(path: str, pods: int) -> str:
    """The breakdown as a markdown table, in ms of CPU per pod bound."""
    d = json.loads(Path(path).read_text())
    ready, now = d["ready"], d["now"]
    lines = ["| thread or piece | CPU ms per pod | calls | ms per call |", "| --- | --- | --- | --- |"]
    for name in ready:
        if name in now and sum(now[name]) - sum(ready[name]) > 0.05:
            user, system = now[name][0] - ready[name][0], now[name][1] - ready[name][1]
            lines.append(
                f"| thread {name} (user {1e3 * user / pods:.2f}, system {1e3 * system / pods:.2f}) | {1e3 * (user + system) / pods:.2f} | | |"
            )
    pieces: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for name, (calls, cpu) in d["pieces"].items():
        if name.startswith("api write: ApiSource.send "):
            method, _, path = name.removeprefix("api write: ApiSource.send ").partition(" ")
            name = f"api write: ApiSource.send {method} {_write_target(path)}"  # runs recorded one row per object
        pieces[name][0] += calls
        pieces[name][1] += cpu
    for name, (calls, cpu) in sorted(pieces.items(), key=lambda kv: -kv[1][1]):
        if cpu > 0.002:
            lines.append(f"| {name} | {1e3 * cpu / pods:.3f} | {calls} | {1e3 * cpu / max(calls, 1):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "summary":
        sys.stdout.write(summary(argv[1], int(argv[2])))
        return 0
    out = os.environ["PROF_OUT"]
    os.makedirs(out, exist_ok=True)
    listen = argv[argv.index("--listen") + 1]
    threading.Thread(target=_recorder, args=(out, listen), daemon=True, name="breakdown-recorder").start()
    _instrument()
    from dra_extender.cli import main as extender_main

    return extender_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
