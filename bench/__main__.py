"""Run every benchmark (`make bench`), then draw the plots.

    .venv/bin/python -m bench [NAME ...]     # e.g. `cel scheduling`; default: all

Each `bench/bench_<name>.py` writes `bench/results/<name>.json` and `.md`;
`kube_scheduler_model` (bench/kube_scheduler_model.py: the kube-scheduler
model of kubesim.scheduler, which the e2e tests also use) writes
`bench/results/kube-scheduler-model.json` and `.md`;
`bench/plots.py` turns the JSON into `bench/results/*.png` when matplotlib
is installed (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


# Benchmarks whose module is not bench/bench_<name>.py: name -> module.
MODULES = {"kube_scheduler_model": "bench.kube_scheduler_model"}


def available() -> list[str]:
    return sorted([*(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py")), *MODULES])


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    for name in names:
        print(f"== bench {name}", flush=True)
        started = time.perf_counter()
        importlib.import_module(MODULES.get(name, f"bench.bench_{name}")).main([])
        print(f"== bench {name} done in {time.perf_counter() - started:.0f} s", flush=True)
    from bench import plots

    plots.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
