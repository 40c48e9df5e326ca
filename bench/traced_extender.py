"""`dra-extender` with a memory recorder in the same process, for bench/bench_churn_memory.py.

    .venv/bin/python -m bench.traced_extender --out DIR [--every 5] [--snapshot-every 0] [--snapshot-after 0] [--frames 3] -- serve ARGS...

Runs `dra_extender.cli.main(ARGS)` in this process, with a daemon thread that
appends the process's resident set (VmRSS, VmHWM), Python's live blocks,
glibc's malloc figures (mallinfo2) and the number of modules loaded to
DIR/rss.jsonl every `--every` seconds (bench/results/issue-31-memory.md
reads a 5,000-node run with it) and, with `--snapshot-every S` > 0, starts tracemalloc
before the extender is imported and, from `--snapshot-after` seconds after
the extender's readiness on, every S seconds dumps the traced heap to
DIR/snapshot-N.pickle (tracemalloc.Snapshot.load reads it) with a summary in
DIR/snapshot-N.json (when, RSS, traced MB, gc-tracked objects by type); the
row of rss.jsonl where /readyz first answered 200 has "ready": true. Why a
wrapper and not a flag of `dra-extender serve`: tracing costs the extender
about twice its CPU and a third more memory, so it is for a benchmark only,
and the extender's command line stays without a debugging knob.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
import threading
import time
import tracemalloc
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from kubesim.measure import proc_status_mb


def dump_snapshot(path: Path, t: float) -> dict[str, Any]:
    """The traced heap pickled to `path` (read back by the benchmark, not here), and gc-tracked objects by type.

    Taking and pickling a snapshot runs in C; grouping its traces by site is a
    Python pass over every trace, which on a busy machine takes the extender's
    GIL for tens of seconds, so that is left to the benchmark's process.
    """
    started = time.perf_counter()
    snap = tracemalloc.take_snapshot()
    snap.dump(str(path))
    del snap
    types = Counter(type(o).__qualname__ for o in gc.get_objects())
    return {
        "t": round(t, 1),
        "rss_mb": round(proc_status_mb(_PID), 1),
        "traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 2),
        "snapshot": path.name,
        "gc_objects_by_type": types.most_common(TYPES_KEPT),
        "gc_objects": sum(types.values()),
        "snapshot_s": round(time.perf_counter() - started, 2),
    }


TYPES_KEPT = 80


_PID = 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _malloc_mib() -> dict[str, float]:
    """glibc's malloc over all its arenas (mallinfo2): held from the system, in use, free inside; {} without glibc >= 2.33.

    Set beside the RSS, it tells memory malloc keeps but nothing uses (freed
    blocks of pages not given back) from memory something still holds.
    """
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    mib = 2**20
    return {
        "malloc_sbrk_mib": round(m.arena / mib, 1),
        "malloc_mmap_mib": round(m.hblkhd / mib, 1),
        "malloc_used_mib": round(m.uordblks / mib, 1),
        "malloc_free_mib": round(m.fordblks / mib, 1),
    }


def _ready(url: str | None) -> bool:
    if url is None:
        return True
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _recorder(out: Path, every: float, snapshot_every: float, snapshot_after: float, ready_url: str | None, t0: float) -> None:
    """Every `every` s a row of rss.jsonl; `snapshot_after` s after readiness, and then every `snapshot_every` s, a snapshot summary."""
    next_snap = float("inf")
    n = 0
    with (out / "rss.jsonl").open("a") as f:
        while True:
            now = time.monotonic()
            row: dict[str, Any] = {
                "t": round(now - t0, 1),
                "rss_mb": round(proc_status_mb(_PID), 1),
                "hwm_mb": round(proc_status_mb(_PID, "VmHWM"), 1),
                # Python's live memory blocks: unlike the RSS, it shrinks when objects are freed and does not
                # stay flat while new objects fill the arenas freed after the initial lists.
                "blocks_k": round(sys.getallocatedblocks() / 1000, 1),
                **_malloc_mib(),
                "modules": len(sys.modules),  # an import during serving (a lazily completed package) shows here
            }
            if tracemalloc.is_tracing():
                row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 2)
            if ready_url is not None and _ready(ready_url):
                ready_url = None
                row["ready"] = True
                if snapshot_every:
                    next_snap = now + snapshot_after
            f.write(json.dumps(row) + "\n")
            f.flush()
            if now >= next_snap:
                summary = dump_snapshot(out / f"snapshot-{n}.pickle", now - t0)
                (out / f"snapshot-{n}.json").write_text(json.dumps(summary))
                n += 1
                next_snap = max(next_snap + snapshot_every, time.monotonic())
            time.sleep(max(0.0, every - (time.monotonic() - now)))


def main(argv: list[str] | None = None) -> int:
    global _PID
    import os

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: python -m bench.traced_extender --out DIR [...] -- serve ARGS", file=sys.stderr)
        return 2
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m bench.traced_extender")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--snapshot-every", type=float, default=0.0, help="seconds between tracemalloc snapshots (0: no tracing)")
    p.add_argument("--snapshot-after", type=float, default=0.0, help="seconds after readiness of the first snapshot")
    p.add_argument("--frames", type=int, default=3, help="frames kept per traced allocation")
    a = p.parse_args(argv[:split])
    a.out.mkdir(parents=True, exist_ok=True)
    _PID = os.getpid()
    if a.snapshot_every:
        tracemalloc.start(a.frames)
    rest = argv[split + 1 :]
    listen = rest[rest.index("--listen") + 1] if "--listen" in rest[:-1] else None
    ready_url = f"http://{listen}/readyz" if listen else None
    threading.Thread(
        target=_recorder, args=(a.out, a.every, a.snapshot_every, a.snapshot_after, ready_url, time.monotonic()), daemon=True
    ).start()
    from dra_extender.cli import main as extender_main

    return extender_main(rest)


if __name__ == "__main__":
    sys.exit(main())
