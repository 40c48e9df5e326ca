"""The README's performance table, generated from `bench/results/*.json` (never typed by hand).

    .venv/bin/python -m bench.readme_table           # print the table
    .venv/bin/python -m bench.readme_table --write   # replace it in README.md

`tests/docs/test_bench_table.py` fails when README.md and the JSON disagree.
Every row says its conditions: wall time or CPU time, the whole HTTP call or
the bare CEL runner, how many cores, and what ran beside the extender.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BEGIN, END = "<!-- bench-table -->", "<!-- /bench-table -->"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return loaded


def _cores(data: dict[str, Any]) -> str:
    machine = data.get("machine")
    cores = machine.get("cores") if isinstance(machine, dict) else data.get("cpus")
    return f"{cores} cores" if cores else "cores not recorded"


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:g}"


def scheduling() -> tuple[str, str, str]:
    d = _load("scheduling")
    w, lat = d["workload"], d["latency_ms"]
    return (
        f"[scheduling](bench/results/scheduling.md): {w['nodes']:,} nodes x {w['devices_per_node']} GPUs, {w['pods']} pods, "
        "filter -> prioritize -> bind over HTTP",
        f"wall time per HTTP call, one pod at a time, the benchmark client on the same {_cores(d)}",
        f"filter p50 {lat['filter']['p50']:.0f} ms / p99 {lat['filter']['p99']:.0f} ms over {w['nodes']:,} nodes; "
        f"bind p50 {lat['bind']['p50']:.1f} ms; {d['pods_per_second']} pods/s; a new rule visible in /filter "
        f"{d['rule_update_to_filter_seconds']:.1f} s later",
    )


def reflector() -> tuple[str, str, str]:
    d = _load("reflector")
    w, lst, watch = d["workload"], d["list"], d["watch"]
    return (
        f"[reflector](bench/results/reflector.md): {w['slices']:,} slices x {w['devices_per_slice']} devices, "
        f"{w['pods']:,} pods, against the fake API server",
        f"wall time from start to /readyz 200, the fake API server on the same {_cores(d)}",
        f"ready in {lst['ready_seconds']} s ({lst['objects']:,} objects, {lst['objects_per_s']:,} objects/s listed); "
        f"{watch['updates']:,} watch events applied at {watch['applied_events_per_s']}/s while serving",
    )


def cel() -> tuple[str, str, str]:
    d = _load("cel")
    compiled = [s["compiled"]["run_us"] for s in d["selectors"]]
    interpreted = [s["interpreted"]["run_us"] for s in d["selectors"]]
    return (
        f"[CEL](bench/results/cel.md): {len(d['selectors'])} selectors over {d['devices']:,} devices",
        f"the bare CEL runner (no HTTP, no allocator), CPU time per evaluation, {_cores(d)}",
        f"{min(compiled):g}-{max(compiled):g} µs per compiled evaluation (celpy's interpreter: "
        f"{min(interpreted):.0f}-{max(interpreted):.0f} µs)",
    )


def cel_hostile() -> tuple[str, str, str]:
    d = _load("cel-hostile")
    cases = {r["case"] for r in d["rows"]}
    worst = max(r["worst_ms"] for r in d["rows"] if r["backend"] == "compiled")
    return (
        f"[hostile CEL](bench/results/cel-hostile.md): {len(cases)} selectors built to burn CPU",
        f"the bare CEL runner, worst wall time of {d['repeats']} runs per device evaluation, {_cores(d)}",
        f"at most {worst} ms per device evaluation before the cost limit stops them; goal 50 ms",
    )


def volume_filter() -> tuple[str, str, str]:
    d = _load("volume-filter")
    p50 = [r["cpu_p50_ms"] for r in d["results"]]
    p99 = [r["cpu_p99_ms"] for r in d["results"]]
    nodes = d["results"][0]["nodes"]
    return (
        f"[volume filter](bench/results/volume-filter.md): /filter over {nodes} nodes for pods without resource claims, "
        f"{d['volumes']:,} PVC/PV pairs, {d['tainted_volumes']} tainted",
        f"CPU time per /filter call in-process (no HTTP), {d['calls']:,} calls per case",
        f"p99 {min(p99):.1f}-{max(p99):.1f} ms (p50 {min(p50):.2f}-{max(p50):.2f} ms); goal {d['limit_ms']:g} ms",
    )


def kube_scheduler_model() -> tuple[str, str, str]:
    """Pods at once from the ceiling run (the extender against both references, same run); pods at a rate from the default run."""
    d, top = _load("kube-scheduler-model"), _load("kube-scheduler-model-ceiling")
    runs = {r["label"]: r for r in d["runs"]}
    ceiling_runs = {r["label"]: r for r in top["runs"]}
    burst = [n for n in dict.fromkeys(r["workload"]["name"] for r in top["runs"]) if f"{n}/nodra" in ceiling_runs]
    paced = [
        n for n in dict.fromkeys(r["workload"]["name"] for r in d["runs"]) if runs.get(f"{n}/extender", {}).get("workload", {}).get("rate")
    ]
    parts = []
    for n in burst:
        ext, noop, nodra = (ceiling_runs[f"{n}/{m}"] for m in ("extender", "noop", "nodra"))
        w = ext["workload"]
        parts.append(
            f"{n} ({w['nodes']} nodes x {w['devices_per_node']} devices, {w['pods']:,} pods at once): "
            f"{ext['pods_per_second']} pods/s; {ext['pods_per_second'] / noop['pods_per_second']:.2f}x a no-op extender "
            f"({noop['pods_per_second']}) and {ext['pods_per_second'] / nodra['pods_per_second']:.2f}x no DRA at all, the ceiling "
            f"({nodra['pods_per_second']}); extender CPU {ext['cpu']['extender_cpu_ms_per_pod']} ms per pod"
        )
    for n in paced:
        ext = runs[f"{n}/extender"]
        w = ext["workload"]
        bound = sorted(ext["samples_ms"]["pod_created_to_bound"])
        p99 = bound[min(len(bound) - 1, int(0.99 * len(bound)))] / 1000
        parts.append(f"{n} ({w['pods']:,} pods created at {w['rate']}/s): created -> bound p99 {p99:.2f} s")
    every = [*top["runs"], *(runs[f"{n}/extender"] for n in paced)]
    failed = sum(r["failed_binds"] for r in every)
    twice = sum((r.get("readback") or {}).get("devices_allocated_twice") or 0 for r in every)
    parts.append(f"{failed} failed binds and {twice} devices allocated twice over these runs")
    loads = [top["machine"]["loadavg_1_5_15"][0], top["loadavg_end"][0]]
    return (
        "[kube-scheduler model](bench/results/kube-scheduler-model-ceiling.md): a model of kube-scheduler 1.36 (asynchronous binds, "
        "backoff, requeue events, a claim-controller stand-in) + `dra-extender serve --kubeconfig` against the fake API server, "
        "beside a no-op extender and beside no DRA at all (no extender, the pods without claims) in the same run; "
        "workload `NxM` = N nodes x M devices each, `-20ps` = pods created at 20/s ([paced runs](bench/results/kube-scheduler-model.md))",
        f"wall time from the first pod created to the last bound, everything on the same {_cores(top)} "
        f"(load average {min(loads):g}-{max(loads):g})",
        "; ".join(parts),
    )


def workloads() -> tuple[str, str, str]:
    d = _load("workloads")
    t = d["workloads"]["SchedulingWithResourceClaimTemplate"]
    w = t["workload"]
    src, clu, noop = t["source"], t["cluster"], t["noop_pods_per_s"]
    f = src["latency_ms"]["filter"]
    return (
        "[DRA workloads](bench/results/workloads.md) (scheduler_perf names: "
        + ", ".join(d["workloads"])
        + "), the extender alone beside a no-op, `--source` and cluster mode",
        f"wall time per HTTP call from a driver that waits for each bind, {_cores(d)}; the other workloads' figures and "
        "the targets still missed are in the results",
        f"SchedulingWithResourceClaimTemplate ({w['nodes']} nodes x {w['devices_per_node']} devices, "
        f"{w['measured_pods']:,} pods): filter p50 {f['p50']} ms / p99 {f['p99']} ms; {src['pods_per_s']} pods/s "
        f"({src['pods_per_s'] / noop:.2f}x the no-op) from a directory, {clu['pods_per_s']} ({clu['pods_per_s'] / noop:.2f}x) in cluster mode",
    )


def partitions_http() -> tuple[str, str, str]:
    """The Partitions workloads over HTTP (bench/workloads/partitions.py) at 500 and 5,000 nodes: every final run, in order."""
    runs = [*(_load(f"partitions-http-{i}") for i in range(3)), _load("partitions-http-idle"), _load("partitions-http-merged")]
    parts = []
    for name in ("Partitions", "Partitions5k"):
        per_run = []
        for d in runs:
            w = d["workloads"][name]
            p = w["partitioned"]["cluster"]
            f, warm = p["latency_ms"]["filter"], p["filter_ms_warm"]
            per_run.append(f"{f['p99']:g} ({warm['p99']:g}), p50 {f['p50']:g}, {p['pods_per_s']:g} pods/s")
        nodes = runs[0]["workloads"][name]["workload"]["nodes"]
        parts.append(f"{nodes:,} nodes: /filter p99 every pod (after the first pass) " + "; ".join(per_run))
    w = runs[0]["workloads"]["Partitions"]["workload"]
    loads = [x for d in runs for x in (d["loadavg_before"][0], d["loadavg_after"][0])]
    steal = [w2["cpu_steal_s"] for d in runs for w2 in d["workloads"].values() if "cpu_steal_s" in w2]
    return (
        f"[partitions over HTTP](bench/results/issue-31-partitions.md): N nodes x {w['gpus_per_node']} GPUs x "
        f"{w['partitions_per_gpu']} partitions on shared counters, {w['measured_pods']:,} one-partition pods, cluster mode, "
        f"{len(runs)} runs",
        f"wall time per /filter (ms) from a driver that waits for each bind; the driver and the fake API server on the same "
        f"{_cores(runs[0])}, the last two runs (the second on the tree of issue 42's last cuts) with the extender pinned on one core "
        f"and them on the other (`--extender-cpus 0`) (load average {min(loads):g}-{max(loads):g}; CPU taken by other guests "
        f"{min(steal):g}-{max(steal):g} s per workload where recorded)",
        "; ".join(parts) + "; target p99 10 ms",
    )


def memory_5k() -> tuple[str, str, str]:
    """The extender's peak RSS at 5000x8 in the kube-scheduler model, each after-run beside the before-run paired with it."""
    pairs, loads = [], []
    for before, after in (("before-b", "after"), ("before-c", "after-c"), ("before-d", "after-d")):
        b, a = (_load(f"kube-scheduler-model-mem-{n}") for n in (before, after))
        rb, ra = (next(r for r in d["runs"] if r["extender"] != "noop") for d in (b, a))
        pairs.append(f"{ra['extender_memory_mib']['peak_rss']} (before {rb['extender_memory_mib']['peak_rss']})")
        loads += [d["machine"]["loadavg_1_5_15"][0] for d in (b, a)]
    w = ra["workload"]
    final = _load("kube-scheduler-model-5000x8-final")
    rf = next(r for r in final["runs"] if r["extender"] != "noop")
    merged = f"; {rf['extender_memory_mib']['peak_rss']} MiB on the merged tree (quiet machine, load average {final['machine']['loadavg_1_5_15'][0]:g})"
    return (
        f"[extender memory](bench/results/issue-31-memory.md): kube-scheduler model, {w['nodes']:,} nodes x "
        f"{w['devices_per_node']} devices (objects as a real API server returns them), {w['pods']:,} pods bound",
        f"peak RSS (VmHWM) of the extender process, MiB; before/after run back to back on the same {_cores(a)} (load average {min(loads):g}-{max(loads):g})",
        f"peak {', '.join(pairs)} MiB in {len(pairs)} pairs{merged}; target 256 MiB",
    )


def real_control_plane() -> tuple[str, str, str]:
    """Issue 42's modes on a real kube-scheduler, kube-apiserver and kube-controller-manager 1.36 (bench/real_plane_modes.py)."""
    parts, loads = [], []
    for name in ("5000x8", "500x10", "100x10"):
        d = _load(f"real-plane-main-loop-{name}")
        by = {r["mode"]: r for r in d["results"]}
        ext = by["extender"]
        loads += [x for r in d["results"] for x in (r["machine_at_start"]["loadavg_1_5_15"][0], r["machine_at_end"]["loadavg_1_5_15"][0])]

        def x(ref: str, ext: dict[str, Any] = ext, by: dict[str, Any] = by) -> str:
            return f"{ext['pods_per_s'] / by[ref]['pods_per_s']:.2f}x" if ref in by else "not run"

        sampled = f"; {x('no-dra-sampled')} no DRA with default sampling" if "no-dra-sampled" in by else ""
        no_op = f", {x('no-op')} a no-op extender" if "no-op" in by else ""
        parts.append(
            f"{name} ({ext['pods']:,} pods): {ext['bound']:,} bound at {ext['pods_per_s']:g} pods/s, {x('in-tree')} in-tree "
            f"({by['in-tree']['pods_per_s']:g}){no_op}, {x('no-dra')} no DRA at the same node scoring "
            f"({by['no-dra']['pods_per_s']:g}{sampled}); "
            f"extender CPU {ext['extender_cpu_ms_per_pod']:g} ms per pod, peak RSS {ext['extender_peak_rss_mib']:g} MiB"
        )
    first = _load("real-plane-main-loop-5000x8")
    return (
        "[real control plane](bench/results/real-plane-main-loop-5000x8.md): kube-apiserver, kube-controller-manager and kube-scheduler "
        f"{first['kubernetes'].removeprefix('Kubernetes ')} on loopback; in-tree DynamicResources, dra-extender "
        "(`percentageOfNodesToScore: 100`), a no-op extender and no DRA at all, back to back on the same objects, "
        "the pods with their claims created before kube-scheduler starts",
        f"wall time from the first bind to the last (each timed from a pod watch), CPU time and peak RSS of each process; "
        f"the control plane, the extender and the watch on the same "
        f"{_cores({'machine': first['results'][0]['machine_at_start']})} (load average {min(loads):g}-{max(loads):g})",
        "; ".join(parts) + "; targets: 0.8x no DRA at 5000x8, 2x in-tree at 500x10 and 100x10, 5 ms (3 ms at 500 nodes), 256 MiB",
    )


ROWS: list[Callable[[], tuple[str, str, str]]] = [
    scheduling,
    reflector,
    cel,
    kube_scheduler_model,
    memory_5k,
    real_control_plane,
    workloads,
    partitions_http,
    volume_filter,
    cel_hostile,
]


def table() -> str:
    lines = ["| benchmark | conditions | result |", "| --- | --- | --- |"]
    lines += ["| " + " | ".join(row()) + " |" for row in ROWS]
    return "\n".join(lines) + "\n"


def readme_block(text: str) -> str:
    found = re.findall(rf"{re.escape(BEGIN)}\n(.*?){re.escape(END)}", text, re.S)
    if len(found) != 1:
        raise SystemExit(f"README.md needs exactly one {BEGIN} ... {END} block")
    return str(found[0])


def main(argv: list[str]) -> int:
    generated = table()
    if "--write" not in argv:
        print(generated, end="")
        return 0
    text = README.read_text()
    old = readme_block(text)
    README.write_text(text.replace(f"{BEGIN}\n{old}{END}", f"{BEGIN}\n{generated}{END}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
