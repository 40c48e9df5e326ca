"""What handing a verb from the HTTP thread to the main loop and back costs, alone: `LoopBridge.run` against an await in place.

serve reads every verb on the HTTP thread's event loop and runs it on the
main loop (serving/http_thread.py): /filter and /bind cross twice each per pod
(/prioritize is answered on the HTTP thread). This times that round trip with
a coroutine that does nothing, so what is left is the bridge: the future
handed across, the task on the main loop, the wake-ups of both loops and the
GIL changing threads. CPU time of the whole process (both threads) and wall
time per round trip; rounds alternate with an await in place on the HTTP
thread's loop, the cost the same coroutine has without the hop.

    .venv/bin/python -m bench.loop_hop --name loop-hop
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import uvloop

from bench.common import RESULTS
from kubesim.measure import machine
from serving.http_thread import LoopBridge


async def _nothing() -> int:
    return 1


async def _timed(calls: int, bridge: LoopBridge | None) -> dict[str, float]:
    cpu, wall = time.process_time(), time.perf_counter()  # the process's CPU: both threads
    for _ in range(calls):
        if bridge is None:
            await _nothing()
        else:
            await bridge.run(_nothing())
    return {"cpu_us": (time.process_time() - cpu) / calls * 1e6, "wall_us": (time.perf_counter() - wall) / calls * 1e6}


def measure(rounds: int, calls: int) -> list[dict[str, Any]]:
    """`rounds` pairs of (hop, in place), `calls` round trips each, from a thread as serve's HTTP thread does."""
    main = uvloop.new_event_loop()
    bridge = LoopBridge(main, stall_threshold=float("inf"))
    out: list[dict[str, Any]] = []
    failure: list[BaseException] = []

    def http_thread() -> None:
        loop = uvloop.new_event_loop()
        try:
            for r in range(rounds):
                hop = loop.run_until_complete(_timed(calls, bridge))
                inline = loop.run_until_complete(_timed(calls, None))
                out.append({"round": r, "hop": hop, "in_place": inline})
        except BaseException as e:  # reported by the main thread
            failure.append(e)
        finally:
            loop.close()
            main.call_soon_threadsafe(main.stop)

    thread = threading.Thread(target=http_thread, name="http")
    thread.start()
    main.run_forever()
    thread.join()
    main.close()
    if failure:
        raise failure[0]
    return out


def render(result: dict[str, Any]) -> str:
    rows = [
        f"| {r['round']} | {r['hop']['cpu_us']:.1f} | {r['hop']['wall_us']:.1f} | {r['in_place']['cpu_us']:.2f} |" for r in result["rounds"]
    ]
    hop = sorted(r["hop"]["cpu_us"] for r in result["rounds"])
    m = result["machine"]
    return "\n".join(
        [
            "# The HTTP thread's hop to the main loop and back (`python -m bench.loop_hop`)",
            "",
            f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; load average {m['loadavg_1_5_15']} at the start; "
            f"{result['calls']:,} round trips a round, a coroutine that does nothing.",
            "",
            "| round | hop: CPU µs (both threads) | hop: wall µs | in place: CPU µs |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            f"Median hop: {hop[len(hop) // 2]:.1f} µs of CPU per round trip. /filter and /bind cross once each per pod.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--name", default="loop-hop")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    if a.rounds < 1 or a.calls < 1:
        p.error("--rounds and --calls must be 1 or more")
    result = {"machine": machine(), "calls": a.calls, "rounds": measure(a.rounds, a.calls)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (a.out / f"{a.name}.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
