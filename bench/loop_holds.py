"""`dra-extender` with a probe of its main event loop, for bench/bench_health_storm.py.

    .venv/bin/python -m bench.loop_holds --out FILE -- serve|all ARGS...

Runs `dra_extender.cli.main(ARGS)` in this process with one more task on the
main event loop (the one that answers /filter): it sleeps 1 ms at a time and
records, as a JSON line in FILE, every wake-up that came more than
`--threshold` ms late, with when (CLOCK_MONOTONIC, the same clock the
benchmark reads) and how late. A late wake-up is the time the loop was held
by something else (one turn of callbacks, or the GIL held by another
thread), which is what a /filter arriving then waits. The loop is uvloop's,
whose callbacks cannot be timed one by one from Python; the probe sees what
the verbs see. A wrapper and not a flag of `serve`: the probe wakes the loop
a thousand times a second, for a benchmark only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

PERIOD = 0.001


def where(handle: asyncio.events.Handle) -> str:
    """What a handle runs: a task's name and the coroutines it is suspended in, outermost first; else the callback."""
    task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]  # Handle's own field
    if not isinstance(task, asyncio.Task):
        return repr(handle)[:200]
    chain: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None and len(chain) < 12:
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if code is None:
            break
        chain.append(f"{code.co_qualname}:{frame.f_lineno if frame else '-'}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return f"{task.get_name()} [{' > '.join(chain)}]"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.loop_holds")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threshold", type=float, default=5.0, help="ms late before a wake-up is recorded")
    p.add_argument(
        "--attribute",
        action="store_true",
        help="run on asyncio's own loop instead of uvloop and record each callback over the threshold with what it ran",
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    holds: list[tuple[float, float, str]] = []
    lock = threading.Lock()
    threshold = args.threshold / 1000

    async def probe() -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(PERIOD)
            late = time.perf_counter() - start - PERIOD
            if late > threshold:
                with lock:
                    holds.append((time.monotonic() - late, late, ""))

    def flush() -> None:
        with args.out.open("a") as f:
            while True:
                time.sleep(0.2)
                with lock:
                    taken = holds[:]
                    holds.clear()
                for at, late, what in taken:
                    f.write(json.dumps({"at": round(at, 4), "ms": round(late * 1000, 2), **({"callback": what} if what else {})}) + "\n")
                f.flush()

    if args.attribute:
        sys.modules["uvloop"] = None  # type: ignore[assignment]  # cli.py and http_thread.py fall back to asyncio
        main_thread = threading.get_ident()
        run = asyncio.events.Handle._run

        def timed(handle: asyncio.events.Handle) -> None:
            if threading.get_ident() != main_thread:
                run(handle)
                return
            before = where(handle)
            start, cpu = time.perf_counter(), time.thread_time()
            run(handle)
            took, cpu = time.perf_counter() - start, time.thread_time() - cpu
            if took > threshold:
                with lock:
                    holds.append((time.monotonic() - took, took, f"cpu {cpu * 1000:.1f} ms: {before} -> {where(handle)}"))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]  # the probe of a benchmark, this process only
        collecting: dict[str, float] = {}

        def collections(phase: str, info: dict[str, Any]) -> None:
            """Garbage collections over the threshold, whichever thread ran them: a pause of the whole process."""
            if phase == "start":
                collecting["at"] = time.perf_counter()
                return
            took = time.perf_counter() - collecting.pop("at", time.perf_counter())
            if took > threshold:
                with lock:
                    holds.append((time.monotonic() - took, took, f"gc generation {info['generation']} ({info['collected']} collected)"))

        gc.callbacks.append(collections)

    import dra_extender.cli as cli

    run_command = cli.run_command

    async def probed(args: argparse.Namespace) -> int:
        task = asyncio.create_task(probe(), name="loop-holds-probe")
        try:
            return await run_command(args)
        finally:
            task.cancel()

    cli.run_command = probed  # the same signature: whichever command ARGS name
    threading.Thread(target=flush, name="loop-holds-flush", daemon=True).start()
    return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
