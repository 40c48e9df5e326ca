"""workloads.md from the results: the tables, the targets, the notes."""

from __future__ import annotations

from typing import Any


def _lat(r: dict[str, Any], verb: str) -> str:
    v = r["latency_ms"][verb]
    return f"{v['p50']} / {v['p99']}" if v.get("n") else "-"


def markdown(result: dict[str, Any]) -> str:
    w = result["workloads"]
    rows = [*_header(result), *_targets(w), *_throughput(w)]
    rows += [*_steady_state(w), *_scale5k(w), *_taint_churn(w), *_slice_events(w)]
    if result.get("profiles"):
        rows += ["", "## Profiles of the misses", ""]
        rows += result["profiles"]
    if result.get("notes"):
        rows += ["", "## Notes", "", *result["notes"]]
    rows.append("")
    return "\n".join(rows)


def _header(result: dict[str, Any]) -> list[str]:
    m = result["machine"]
    return [
        "# DRA workloads (`python -m bench workloads`)",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; load average {result['loadavg_before']} before, "
        f"{result['loadavg_after']} after (the machine is shared: figures are upper bounds on latency); "
        f"{'--quick' if result['quick'] else 'full'} run, {result['seconds']:.0f} s, started {result['started']}.",
        "",
        *(
            [
                "Re-run since, replacing their figures: "
                + "; ".join(
                    f"{', '.join(r['workloads'])} at {r['started']} (load {r['loadavg_before']} -> {r['loadavg_after']})"
                    for r in result["reruns"]
                ),
                "",
            ]
            if result.get("reruns")
            else []
        ),
        'Sequential driver ("extender alone"): /filter with the node names -> /prioritize with the feasible ones -> '
        "/bind to the best, one pod at a time, over HTTP (Go field names, nodeCacheCapable). `--source` mode binds in "
        "memory; cluster mode writes claim status and the Binding to the fake API server. The no-op extender "
        "(`bench/noop_extender.py`, same FastAPI + uvicorn stack) runs the same pods in the same run.",
        "",
    ]


def _targets(w: dict[str, Any]) -> list[str]:
    rows = [
        "## Targets",
        "",
        "| workload | target | mode | measured | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in w.items():
        for t in r.get("targets", []):
            verdict = "PASS" if t["pass"] is True else "FAIL" if t["pass"] is False else "(reported)"
            rows.append(f"| {name} | {t['target']} | {t['mode']} | {t['value']} {t['unit']} | **{verdict}** |")
    return rows


def _row(name: str, mode: str, r: dict[str, Any], ratio: Any = "", env: dict[str, Any] | None = None) -> str:
    """One line of the throughput table."""
    env = env or r.get("env") or {}
    return f"| {name} | {mode} | {r['pods']} | {r['pods_per_s']} | {ratio} | {_lat(r, 'filter')} | {_lat(r, 'prioritize')} | {_lat(r, 'bind')} | {r['bound']} | {env.get('ready_s', '')} | {env.get('peak_rss_mb', '')} |"


def _throughput(w: dict[str, Any]) -> list[str]:
    rows = [
        "",
        "## Throughput and latency",
        "",
        "| workload | mode | pods | pods/s | x no-op | filter p50 / p99 ms | prioritize p50 / p99 ms | bind p50 / p99 ms | bound | ready s | peak RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("SchedulingWithResourceClaimTemplate", "Toleration", "FirstAvailable"):
        r = w.get(name)
        if not r:
            continue
        rows.append(_row(name, "no-op (before)", r["noop_before"]))
        for mode in ("source", "cluster"):
            if mode in r:
                rows.append(_row(name, mode, r[mode], r[mode]["ratio_to_noop"]))
        rows.append(_row(name, "no-op (after)", r["noop_after"]))
    for name in ("Partitions", "Partitions5k"):
        r = w.get(name)
        if not r:
            continue
        for variant in ("plain", "partitioned"):
            for mode in ("source", "cluster"):
                if mode in r.get(variant, {}):
                    ratio = r[variant][mode].get("ratio_to_plain", "")
                    rows.append(_row(f"{name}, {variant}", mode, r[variant][mode], f"{ratio} (x plain)" if ratio else ""))
    r = w.get("SteadyState")
    if r:
        for mode in ("source", "cluster"):
            if mode in r:
                rows.append(_row(f"SteadyState ({r['workload']['rate_per_s']:g}/s)", mode, r[mode]))
    rows += _scale5k_rows(w.get("Scale5k"))
    r = w.get("TaintChurn")
    if r:
        for label, s in r["sizes"].items():
            if "cluster" in s:
                rows.append(_row(f"TaintChurn {label} devices", "cluster", s["cluster"]))
    return rows


def _scale5k_rows(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return []
    rows = [_row("Scale5k, 500 names", "no-op", r["noop_500"]), _row("Scale5k, 5,000 names", "no-op", r["noop_5000"])]
    for mode in ("source", "cluster"):
        if mode in r:
            for names, key, noop in (("500", "names_500", "noop_500"), ("5,000", "names_5000", "noop_5000")):
                ratio = round(r[mode][key]["pods_per_s"] / r[noop]["pods_per_s"], 3)
                rows.append(_row(f"Scale5k, {names} names", mode, r[mode][key], ratio, r[mode]["env"]))
    return rows


def _steady_state(w: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    if "SteadyState" in w:
        r = w["SteadyState"]
        rows += [
            "",
            "## SteadyState",
            "",
            "| mode | created | bound | created -> bound p50 / p99 ms | filter p99 ms |",
            "| --- | --- | --- | --- | --- |",
        ]
        for mode in ("source", "cluster"):
            if mode in r:
                c = r[mode]["created_to_bound_ms"]
                rows.append(
                    f"| {mode} | {r[mode]['created']} | {r[mode]['bound']} | {c.get('p50')} / {c.get('p99')} | {r[mode]['latency_ms']['filter'].get('p99')} |"
                )
    return rows


def _scale5k(w: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    if "Scale5k" in w:
        r = w["Scale5k"]
        rows += [
            "",
            "## Scale5k",
            "",
            "| mode | never-seen shapes, /filter over 5,000 nodes (ms) | 500 names: first pass over the nodes p50 / max ms | 500 names after it: p50 / p99 ms | RSS after ready / peak | after the pods | after the watch burst (peak) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for mode in ("source", "cluster"):
            if mode in r:
                x = r[mode]
                b = x.get("watch_burst") or {}
                rows.append(
                    f"| {mode} | {x['never_seen_shape_filter_ms']} | {x['names_500']['filter_ms_first_pass'].get('p50')} / {x['names_500']['filter_ms_first_pass'].get('max')} | "
                    f"{x['names_500']['filter_ms_warm'].get('p50')} / {x['names_500']['filter_ms_warm'].get('p99')} | {x['env_after_ready']['rss_mb']} / {x['env_after_ready']['peak_rss_mb']} MB | "
                    f"{x['env_after_pods']['rss_mb']} / {x['env_after_pods']['peak_rss_mb']} MB | "
                    + (f"{b['rss_mb_after']} / {b['peak_rss_mb']} MB ({b['writes']} writes applied in {b['applied_s']} s)" if b else "-")
                    + " |"
                )
    return rows


def _taint_churn(w: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    if "TaintChurn" in w:
        r = w["TaintChurn"]
        rows += [
            "",
            "## TaintChurn",
            "",
            f"Rules over one pool (8 devices) added and removed at {r['rule_rate_per_s']}/s for {r['duration_s']} s while the driver "
            "schedules; visibility = from the write request to the first /filter answer that shows the change (resolution: the filter period).",
            "",
            "| devices | rule writes | visible p50 / p99 / max ms | not seen | filter period p50 ms | filter p50 / p99 ms | extender CPU | in-process add / delete µs (p50) | next /filter after a change µs (p50; names sent) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for _label, s in r["sizes"].items():
            c, ip = s.get("cluster"), s["in_process"]
            if c:
                v = c["visible_ms"]
                rows.append(
                    f"| {c['devices']} | {c['rule_writes']} | {v.get('p50')} / {v.get('p99')} / {v.get('max')} | {c['not_seen_before_the_end']} | "
                    f"{c['filter_period_ms'].get('p50')} | {_lat(c, 'filter')} | {c['extender_cpu_share']:.0%} | {ip['add_us']['p50']} / {ip['delete_us']['p50']} | {ip['filter_after_change_us']['p50']} ({ip['filter_names']} names) |"
                )
    return rows


def _slice_events(w: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    if "SliceEvents" in w:
        r = w["SliceEvents"]
        rows += [
            "",
            "## Slice events in-process",
            "",
            f"{r['slices']} slices x {r['devices_per_slice']} devices, {r['events']} MODIFIED events each, parsed from JSON and applied to `ClusterState` "
            "(GC on, initial state frozen); best of the rounds.",
            "",
            "| what changed | events/s | µs/event |",
            "| --- | --- | --- |",
        ]
        for what in ("taint", "generation", "full"):
            rows.append(f"| {what} | {r[what]['events_per_s']} | {r[what]['us_per_event']} |")
    return rows
