"""scheduler_perf-style DRA workloads (docs/performance.md), driven as kube-scheduler drives an extender.

Workloads are named after upstream `test/integration/scheduler_perf/dra`:

- `SchedulingWithResourceClaimTemplate`: 500 nodes x 10 devices `instance-i` of
  driver `test-driver.cdi.k8s.io`, half of them allocated already (upstream's
  init pods), then 2,500 measured pods sharing one template shape: each has its
  own claim with the identical spec, as kube-controller-manager generates it from
  the template, and the pod's `status.resourceClaimStatuses` names it.
- `SteadyState`: the same cluster at 50 % occupancy; pods are created and the
  oldest deleted at a constant rate while the driver schedules what appears.
- `Toleration`: a NoSchedule DeviceTaintRule on every device; claims tolerate it.
- `FirstAvailable`: claims with `firstAvailable` subrequests (a scarce model first,
  then any device).
- `Scale5k`: 5,000 nodes x 8 devices: /filter with the 500 names kube-scheduler's
  percentageOfNodesToScore sends at that size (a rotating window), and with all
  5,000; the first pod of a never-seen claim shape (a new CEL selector) over the
  40,000 devices; the extender's peak RSS (VmHWM), in cluster mode including a
  watch burst (5,000 slice updates + 5,000 claim status updates).
- `TaintChurn` (cluster mode): DeviceTaintRules added and removed at 10/s while
  scheduling; the time from each write to the first /filter that reflects it, at
  1,000 and at 40,000 devices, beside the in-process cost of a rule event.

Every workload runs in `--source` mode (a manifest directory; /bind in memory) and
in cluster mode (`--kubeconfig` against the in-repo fake API server, which /bind
writes to). The driver is sequential ("extender alone"): for one pod at a time,
/filter with the node names, /prioritize with the feasible ones (when more than
one), /bind to the best score (random among equals), over HTTP with the Go field
names and `nodeCacheCapable: true` (names, no Node objects). The same driver runs
against a no-op extender on the same stack (`bench/noop_extender.py`) in the same
run, and the ratio of pods/s is reported.

    .venv/bin/python -m bench workloads                  # everything (< 20 min on 2 cores)
    .venv/bin/python -m bench.bench_workloads --quick    # a smaller version (~5 min)
    .venv/bin/python -m bench.bench_workloads --only Scale5k --only TaintChurn
    BENCH_QUICK=1 .venv/bin/python -m bench workloads    # --quick through `python -m bench`

Results: bench/results/workloads.json, workloads.md, workloads-latency.png,
workloads-throughput.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.workloads import env
from bench.workloads.partitions import partitions, partitions_5k
from bench.workloads.plots import plots
from bench.workloads.report import markdown
from bench.workloads.runs import Config
from bench.workloads.scale5k import scale5k
from bench.workloads.slice_events import slice_events
from bench.workloads.taint_churn import taint_churn
from bench.workloads.template import first_available, scheduling_with_template, steady_state, toleration
from kubesim.measure import loadavg, machine, steal_seconds

WORKLOADS: dict[str, Callable[[Config, Path], dict[str, Any]]] = {
    "SchedulingWithResourceClaimTemplate": scheduling_with_template,
    "SteadyState": steady_state,
    "Toleration": toleration,
    "FirstAvailable": first_available,
    "Scale5k": scale5k,
    "TaintChurn": taint_churn,
    "SliceEvents": slice_events,
    "Partitions": partitions,
    "Partitions5k": partitions_5k,
}


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.render:
        result = json.loads((args.out / f"{args.name}.json").read_text())
        _add_notes(result)
        (args.out / f"{args.name}.md").write_text(markdown(result))
        plots(result, args.out)
        return
    if args.extender_cpus:
        env.pin_beside_extender({int(c) for c in args.extender_cpus.split(",")})
    if args.profile is not None:
        env.PROFILE_DIR = args.profile.resolve()
        env.PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    cfg = Config(quick=args.quick, modes=tuple(args.mode or ("source", "cluster")))
    names = args.only or list(WORKLOADS)
    args.out.mkdir(parents=True, exist_ok=True)
    result = _run(cfg, names)
    previous = args.out / f"{args.name}.json"
    if args.merge and previous.exists():
        _merge(result, json.loads(previous.read_text()), names)
    _add_notes(result)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, separators=(",", ":")) + "\n")  # compact: per-pod samples
    (args.out / f"{args.name}.md").write_text(markdown(result))
    for p in plots(result, args.out) if args.name == "workloads" else []:
        print(f"plot: {p}")
    print(markdown(result))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="scheduler_perf-style DRA workloads over HTTP, beside a no-op extender")
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
        help="a smaller version (also BENCH_QUICK=1)",
    )
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run only these workloads (repeatable)")
    parser.add_argument("--mode", action="append", choices=("source", "cluster"), help="only this mode (repeatable; default both)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="workloads", help="results file stem (default workloads)")
    parser.add_argument("--profile", type=Path, help="run every extender under cProfile and write the dumps (and their top entries) here")
    parser.add_argument(
        "--extender-cpus",
        help="e.g. 0: the extender on these CPUs, the benchmark client and the fake API server on the others (recorded in the results)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="only redraw workloads.md and the plots from workloads.json (e.g. after editing workloads_notes.md)",
    )
    parser.add_argument(
        "--merge", action="store_true", help="keep the other workloads of an existing results file and replace only those run now"
    )
    return parser


def _run(cfg: Config, names: list[str]) -> dict[str, Any]:
    """The workloads named, in order, each with its seconds and the load average after it."""
    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-workloads-"))
    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(),
        "quick": cfg.quick,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "loadavg_before": loadavg(),
        "extender_cpus": sorted(env.EXTENDER_CPUS) if env.EXTENDER_CPUS is not None else None,
        "workloads": {},
    }
    try:
        for name in names:
            print(f"== workload {name}", flush=True)
            t, stolen = time.perf_counter(), steal_seconds()
            result["workloads"][name] = WORKLOADS[name](cfg, tmp)
            result["workloads"][name]["seconds"] = round(time.perf_counter() - t, 1)
            result["workloads"][name]["loadavg_after"] = loadavg()
            after = steal_seconds()
            if stolen is not None and after is not None:
                result["workloads"][name]["cpu_steal_s"] = round(after - stolen, 2)
            print(f"== workload {name} done in {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["loadavg_after"] = loadavg()
    return result


def _merge(result: dict[str, Any], old: dict[str, Any], names: list[str]) -> None:
    """--merge: the earlier file's other workloads kept, this run recorded as a rerun, the file's start kept."""
    merged = {**old["workloads"], **result["workloads"]}
    result["workloads"] = {k: merged[k] for k in WORKLOADS if k in merged}
    result["reruns"] = [
        *old.get("reruns", []),
        {
            "workloads": names,
            "started": result["started"],
            "loadavg_before": result["loadavg_before"],
            "loadavg_after": result["loadavg_after"],
            "seconds": result["seconds"],
        },
    ]
    for k in ("started", "loadavg_before", "seconds"):
        result[k] = old[k]


def _add_notes(result: dict[str, Any]) -> None:
    notes_path = Path(__file__).with_name("workloads_notes.md")
    if notes_path.exists():
        result["profiles"] = notes_path.read_text().splitlines()


if __name__ == "__main__":
    main()
