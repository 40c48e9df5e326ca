"""Hostile CEL selectors: how long the slowest evaluation takes before the cost limit stops it.

`.venv/bin/python -m bench.bench_cel_hostile` evaluates every expression of
`CASES` (each passes the compile-time checks; each tries to make one device
evaluation as slow as possible) on fresh devices with both runners, several
times, and writes the worst time per case to bench/results/cel-hostile.{json,md}.
The goal (docs/hostile-input.md): no evaluation, stopped or not, over 50 ms.
The cases are kubesim/hostile_cel.py's, which the tests use for the verdicts, never for timings.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from kubesim.hostile_cel import CASES

RESULTS = Path(__file__).resolve().parent / "results"


class _Device:
    """A fresh device version per evaluation, so no cached result answers."""

    driver = "gpu.example.com"
    capacity: ClassVar[dict[str, Any]] = {}
    allow_multiple_allocations = False

    def __init__(self, n: int) -> None:
        self.cel_key = ("hostile", n, time.monotonic_ns())
        self.attributes = {"gpu.example.com/model": "a100"}


def run(repeats: int) -> dict[str, Any]:
    from allocator.cel import CelEnvironment
    from allocator.cel.engine import CelCompileError
    from allocator.cel.lib.regex import clear_cache as clear_regex_cache

    rows = []
    n = 0
    for backend in ("compiled", "interpreted"):
        env = CelEnvironment(backend=backend)
        for case in CASES:
            try:
                selector = env.compile(case.expression)
            except CelCompileError as e:
                rows.append({"backend": backend, "case": case.name, "worst_ms": 0.0, "outcome": f"does not compile: {e.reason}"})
                continue
            worst = 0.0
            outcome = ""
            for _ in range(repeats):
                n += 1
                device = _Device(n)
                clear_regex_cache()  # every evaluation compiles its patterns: the worst case
                start = time.perf_counter()
                try:
                    outcome = "true" if env.evaluate(selector, device) else "false"
                except ValueError as e:
                    outcome = str(e).rsplit(": ", 1)[-1][:80]
                worst = max(worst, time.perf_counter() - start)
            rows.append({"backend": backend, "case": case.name, "worst_ms": round(worst * 1000, 2), "outcome": outcome})
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "repeats": repeats,
        "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "cpus": os.cpu_count(),
        "rows": rows,
    }


def markdown(r: dict[str, Any]) -> str:
    def worst(backend: str) -> dict[str, Any]:
        return max((row for row in r["rows"] if row["backend"] == backend), key=lambda row: row["worst_ms"])

    compiled, interpreted = worst("compiled"), worst("interpreted")
    lines = [
        "# Hostile CEL selectors",
        "",
        f"`.venv/bin/python -m bench.bench_cel_hostile`, {r['repeats']} evaluations per case and runner, each on a",
        f"fresh device version (no cached result); worst time per evaluation. {r['when']};",
        f"load average {r.get('loadavg', '?')} on {r.get('cpus', '?')} CPUs (shared machine).",
        "",
        f"**Worst case, compiled runner: {compiled['worst_ms']} ms** ({compiled['case']}). Goal: at most 50 ms.",
        "Every expression here and in the CEL conformance table runs on the compiled runner.",
        f"The interpreted fallback (only for an expression the transpiler cannot handle; none known): "
        f"{interpreted['worst_ms']} ms ({interpreted['case']}).",
        "",
        "| case | runner | worst ms | outcome |",
        "| --- | --- | ---: | --- |",
    ]
    for row in r["rows"]:
        lines.append(f"| {row['case']} | {row['backend']} | {row['worst_ms']} | {row['outcome']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    r = run(args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cel-hostile.json").write_text(json.dumps(r, indent=1) + "\n")
    (args.out / "cel-hostile.md").write_text(markdown(r))
    print(markdown(r))


if __name__ == "__main__":
    main()
