"""The kube-scheduler model (kubesim.scheduler) as a benchmark: its runs, the two references beside each, and the report.

The references, run right after each extender run on the same cluster: the no-op extender (passes every
node, binds only: what an extender's HTTP round trips cost kube-scheduler) and no DRA at all (no extender,
the same pods without resource claims, the model binding them itself: the ceiling). Every extender run is
shown against both (`ratio_to_noop`, `ratio_to_ceiling`).

    .venv/bin/python -m bench.kube_scheduler_model [--workloads small,100x10,...]
        [--extender-cmd 'dra-extender serve --kubeconfig {kubeconfig} --standalone --listen {listen}']
        [--no-reference] [--no-ceiling] [--http-timeout 5] [--percentage-of-nodes-to-score N]
        [--claim-delay 0.5] [--claim-qps 500] [--claim-burst 1000] [--name NAME] [--out DIR]
    .venv/bin/python -m bench.kube_scheduler_model noop-extender --kubeconfig K --listen HOST:PORT
    .venv/bin/python -m bench.kube_scheduler_model render NAME   # the markdown again from NAME.json

Results: bench/results/<name>.json and .md (default name kube-scheduler-model).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from kubesim.measure import machine
from kubesim.scheduler import (
    DEFAULT_WORKLOADS,
    WORKLOADS,
    ClaimControllerConfig,
    SchedulerConfig,
    Workload,
    default_extender_cmd,
    run_workload,
)
from kubesim.scheduler.noop import noop_extender


def dump_json(report: dict[str, Any]) -> str:
    """Indented JSON with lists of numbers on one line (the samples stay readable and small)."""
    text = json.dumps(report, indent=1)
    return (
        re.sub(r"\[\s*(-?[\d.]+(?:,\s*-?[\d.]+)*)\s*\]", lambda m: "[" + ",".join(x.strip() for x in m.group(1).split(",")) + "]", text)
        + "\n"
    )


def targets(r: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """The model's targets for one extender run (docs/kube-scheduler.md#asynchronous-binding-and-a-single-writer): (target, met, measured)."""
    w = r["workload"]
    rb = r["readback"]
    expected = r["pods_created"] if "taint_removal" in r else r["expected_bound"]  # after the removal every pod fits
    # Steady state: as many pods stay bound at the end as were prefilled (one deleted per pod created).
    on_api = (r.get("steady_state") or {}).get("prefilled_pods", expected) if w.get("steady_fill") else expected
    out = [
        (
            "every pod that fits bound",
            r["pods_bound"] == expected and rb["pods_bound"] == on_api,
            f"{r['pods_bound']} of {expected} (API: {rb['pods_bound']} bound at the end)",
        ),
        ("0 failed binds", r["failed_binds"] == 0, f"{r['failed_binds']} ({r['bind_timeouts']} timeouts)"),
        ("0 rejections of pods that fit", r["rejections_of_pods_that_fit"] == 0, str(r["rejections_of_pods_that_fit"])),
        ("no device allocated twice", rb["devices_allocated_twice"] == 0, str(rb["devices_allocated_twice"])),
        ("no bind longer than httpTimeout", r["bind_timeouts"] == 0, f"max {r['latency_ms']['bind']['max']} ms"),
    ]
    if r.get("ratio_to_noop") is not None and not w.get("rate"):
        out.append(("pods/s >= 0.8x no-op", r["ratio_to_noop"] >= 0.8, f"{r['ratio_to_noop']:.2f}x"))
    if w.get("rate"):
        p99 = r["latency_ms"]["pod_created_to_bound"]["p99"] / 1000
        limit = 1.0 if w.get("steady_fill") else 2.0  # SteadyState: created -> bound p99 <= 1 s at 5,000 x 8
        out.append((f"created -> bound p99 <= {limit:g} s", p99 <= limit, f"{p99:.2f} s"))
    if w.get("steady_fill"):
        st = r.get("steady_state") or {}
        out.append(
            (
                "steady state: a pod deleted per pod created, its claim deallocated",
                st.get("pods_deleted") == r["pods_created"] + st.get("warm_up_pods", 0),
                f"{st.get('pods_deleted')} deleted, {st.get('claims_released_by_controller')} claims released, "
                f"{st.get('prefilled_pods')} prefilled",
            )
        )
    if (
        not w.get("steady_fill")
        and w["pods"] > w["nodes"] * w["devices_per_node"] - w.get("tainted_nodes", 0) * w["devices_per_node"]
        and not w.get("taint_removal")
    ):
        wrong = {k: v for k, v in r["unbound_last_rejections"].items() if "allocated" not in k}
        out.append(
            (
                "the rest rejected because every device is allocated",
                not wrong and not r.get("unbound_not_rejected_with_claims"),
                f"{r['unbound_pods']} unbound; other last reasons: {wrong or 'none'}",
            )
        )
    if "taint_removal" in r:
        t = r["taint_removal"]["rule_deleted_to_bound_s"]
        out.append(
            (
                "taint removed -> pending pod bound <= 5 s",
                t is not None and t <= 5,
                f"{t} s" if t is not None else f"not within {r['taint_removal']['waited_s']} s",
            )
        )
    return out


RUN_NAMES = {"noop": "no-op", "nodra": "no DRA"}  # the references' `extender` field -> their name in the table


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# kube-scheduler model (`python -m bench.kube_scheduler_model`): {report['title']}",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; load average at start {m['loadavg_1_5_15']}, "
        f"at end {report.get('loadavg_end')}. {report.get('note', '')}",
        f"Extender: `{report['extender_cmd']}`; references: the no-op extender (FastAPI + uvicorn, binds only) and no DRA "
        "(no extender, the same pods without claims, the model binds them: the ceiling). "
        f"httpTimeout {report['config']['scheduler']['http_timeout']} s, percentageOfNodesToScore "
        f"{report['config']['scheduler']['percentage_of_nodes_to_score'] or 'adaptive'}, claim controller delay "
        f"{report['config']['claim_controller']['delay']} s at {report['config']['claim_controller']['qps']} qps "
        f"(burst {report['config']['claim_controller']['burst']}).",
        "",
        "pods/s: first pod created to last pod bound. Failed binds: /bind answered an error or timed out (httpTimeout); "
        "a pod whose abandoned /bind completed later is bound all the same. Rejections: /filter rejected every sampled node; "
        '"of pods that fit": the cluster had free, untainted devices for the pod beyond those of pods being bound '
        "(a claim not created yet counts). Devices allocated twice: every claim read back from the API server after the run.",
        "",
        "| workload | run | bound / expected | pods/s | vs no-op | vs no DRA | failed binds (timeouts) | rejections (of pods that fit) "
        "| filter p50/p99 ms | prioritize p50/p99 ms | bind p50/p99 ms | created→bound p50/p99 s | devices allocated twice "
        "| process CPU ms per pod bound (after the first fifth; start-up CPU s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["runs"]:
        lat = r["latency_ms"]
        ratio, ceiling = r.get("ratio_to_noop"), r.get("ratio_to_ceiling")
        lines.append(
            f"| {r['workload']['name']} | {RUN_NAMES.get(r['extender'], 'extender')} | {r['pods_bound']} / {r['expected_bound']}"
            f"{' (timed out)' if r['timed_out'] else ''} | {r['pods_per_second']} | {f'{ratio:.2f}×' if ratio is not None else '–'} "
            f"| {f'{ceiling:.2f}×' if ceiling is not None else '–'} "
            f"| {r['failed_binds']} ({r['bind_timeouts']}) | {r['extender_rejections']} ({r['rejections_of_pods_that_fit']}) "
            f"| {lat['filter']['p50']} / {lat['filter']['p99']} | {lat['prioritize']['p50']} / {lat['prioritize']['p99']} "
            f"| {lat['bind']['p50']} / {lat['bind']['p99']} "
            f"| {lat['pod_created_to_bound']['p50'] / 1000:.2f} / {lat['pod_created_to_bound']['p99'] / 1000:.2f} "
            f"| {r['readback']['devices_allocated_twice']} | {_cpu_per_pod(r)} |"
        )
    lines += ["", "## Issue 8's targets", "", "| workload | target | met | measured |", "| --- | --- | --- | --- |"]
    for r in report["runs"]:
        if r["extender"] not in RUN_NAMES:
            lines += [f"| {r['workload']['name']} | {t} | {'yes' if ok else '**no**'} | {v} |" for t, ok, v in targets(r)]
    lines.append("")
    for r in report["runs"]:
        if r["extender"] in RUN_NAMES:
            continue
        lines.append(f"## {r['workload']['name']} (extender)")
        lines.append("")
        lines.append(f"- bind errors: {r['bind_errors'] or 'none'}")
        lines.append(f"- rejection reasons: {r['rejection_reasons'] or 'none'}")
        lines.append(f"- rejections of pods that fit, by reason: {r['fit_rejection_reasons'] or 'none'}")
        lines.append(f"- scheduling errors: {r['scheduling_errors'] or 'none'}")
        lines.append(f"- unbound pods: {r['unbound_pods']}, their last rejection: {r['unbound_last_rejections'] or 'none'}")
        lines.append(f"- read back: {r['readback']}")
        lines.append(f"- CPU: {r['cpu']}")
        if r.get("extender_memory_mib"):
            lines.append(f"- extender memory (MiB, 2^20 bytes; VmHWM is peak_rss): {r['extender_memory_mib']}")
        elif r.get("extender_memory_mb"):  # results written before the key named its unit: the same figures, MiB
            lines.append(f"- extender memory (MiB): {r['extender_memory_mb']}")
        if "taint_removal" in r:
            lines.append(f"- taint removal: {r['taint_removal']}")
        lines.append("")
    return "\n".join(lines)


def _cpu_per_pod(r: dict[str, Any]) -> str:
    """The process's CPU over the scheduling phase per pod bound (utime + stime), the same once a fifth were bound, and its start-up CPU."""
    cpu = r.get("cpu") or {}
    per_pod = cpu.get("extender_cpu_ms_per_pod")
    if per_pod is None and r.get("pods_bound") and "extender_cpu_s" in cpu:  # results written before the field existed
        per_pod = round(1000 * cpu["extender_cpu_s"] / r["pods_bound"], 2)
    steady = cpu.get("extender_cpu_ms_per_pod_after_first_fifth")
    startup = cpu.get("extender_startup_cpu_s")
    return f"{per_pod if per_pod is not None else '–'} ({steady if steady is not None else '–'}; {startup if startup is not None else '–'})"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "noop-extender":
        return _noop_extender(argv[1:])
    if argv and argv[0] == "render":  # re-render the markdown of a results file: render NAME [--out DIR]
        return _render(argv[1:])
    if argv and argv[0] == "run":
        argv = argv[1:]
    p = _parser()
    a = p.parse_args(argv)
    names = [n.strip() for n in a.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; known: {list(WORKLOADS)}")
    report = _run(a, names)
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(dump_json(report))
    md = markdown(report)
    (a.out / f"{a.name}.md").write_text(md + "\n")
    print(md)
    return 0


def _noop_extender(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kube_scheduler_model noop-extender")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--listen", default="127.0.0.1:8888")
    a = p.parse_args(argv)
    noop_extender(a.kubeconfig, a.listen)
    return 0


def _render(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kube_scheduler_model render")
    p.add_argument("name")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    md = markdown(json.loads((a.out / f"{a.name}.json").read_text()))
    (a.out / f"{a.name}.md").write_text(md + "\n")
    print(md)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.kube_scheduler_model", description="kube-scheduler 1.36 model against an extender and the fake API server"
    )
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument(
        "--extender-cmd",
        default=None,
        help="the extender to measure; placeholders {kubeconfig} {listen} {port} {api} (default: dra-extender serve --kubeconfig {kubeconfig} --standalone --listen {listen})",
    )
    p.add_argument("--no-reference", action="store_true", help="skip both references (the no-op extender, no DRA)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the no-DRA reference (the ceiling) only")
    p.add_argument("--http-timeout", type=float, default=5.0)
    p.add_argument("--weight", type=int, default=1)
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=None)
    p.add_argument("--claim-delay", type=float, default=ClaimControllerConfig.delay)
    p.add_argument("--claim-qps", type=float, default=ClaimControllerConfig.qps)
    p.add_argument("--claim-burst", type=int, default=ClaimControllerConfig.burst)
    p.add_argument("--timeout", type=float, default=None, help="override every workload's timeout (s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines (0: none)")
    p.add_argument("--name", default="kube-scheduler-model", help="results file name under --out")
    p.add_argument("--title", default="", help="a heading for the markdown")
    p.add_argument("--note", default="", help="a sentence for the markdown (e.g. the machine's load)")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def _run(a: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Each workload with the extender, then (unless --no-reference, or over-committed) the no-op extender and no DRA."""
    cfg = SchedulerConfig(
        http_timeout=a.http_timeout, weight=a.weight, percentage_of_nodes_to_score=a.percentage_of_nodes_to_score, seed=a.seed
    )
    claims = ClaimControllerConfig(delay=a.claim_delay, qps=a.claim_qps, burst=a.claim_burst)
    ext_cmd = shlex.split(a.extender_cmd) if a.extender_cmd else default_extender_cmd()
    report: dict[str, Any] = {
        "title": a.title or ", ".join(names),
        "note": a.note,
        "machine": machine(),
        "extender_cmd": " ".join(ext_cmd),
        "config": {"scheduler": asdict(cfg), "claim_controller": asdict(claims)},
        "runs": [],
    }
    for n in names:
        w = WORKLOADS[n]
        if a.timeout:
            w = Workload(**{**asdict(w), "timeout": a.timeout})
        r = run_workload(w, ext_cmd, cfg=cfg, claims=claims, progress=a.progress)
        runs = [r]
        if not a.no_reference and not w.taint_removal and w.pods <= w.capacity:
            ref = run_workload(w, cfg=cfg, claims=claims, progress=a.progress, noop=True)
            r["ratio_to_noop"] = _ratio(r, ref)
            runs.append(ref)
            if not a.no_ceiling:
                top = run_workload(w, cfg=cfg, claims=claims, progress=a.progress, nodra=True)
                r["ratio_to_ceiling"], ref["ratio_to_ceiling"] = _ratio(r, top), _ratio(ref, top)
                runs.append(top)
        report["runs"] += runs
        for x in runs:
            brief = {
                k: x[k]
                for k in (
                    "label",
                    "pods_bound",
                    "expected_bound",
                    "pods_per_second",
                    "failed_binds",
                    "bind_timeouts",
                    "extender_rejections",
                    "rejections_of_pods_that_fit",
                    "timed_out",
                )
            }
            ratios = {k: x.get(k) for k in ("ratio_to_noop", "ratio_to_ceiling")}
            print(json.dumps({"result": brief, **ratios, "readback": x["readback"]}), flush=True)
    return report


def _ratio(run: dict[str, Any], reference: dict[str, Any]) -> float | None:
    """pods/s of `run` over the reference's, None when the reference bound nothing."""
    return round(run["pods_per_second"] / reference["pods_per_second"], 3) if reference["pods_per_second"] else None


if __name__ == "__main__":
    sys.exit(main())
