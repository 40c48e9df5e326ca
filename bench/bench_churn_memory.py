"""The extender's memory under steady churn: does its resident set level off, and what grows?

A steady state as upstream's SteadyStateClusterResourceClaimTemplate (the
kube-scheduler model of kubesim.scheduler against `dra-extender serve` on the
fake API server): the cluster is `--fill` full of bound pods with allocated
claims; at `--rate` pods/s the oldest bound pod is deleted (the claim
controller stand-in deallocates and deletes its claim) and a new pod of the
ResourceClaimTemplate is created, scheduled and bound; for `--duration`
seconds. The extender runs under bench/traced_extender.py, which samples its
RSS every 5 s; a second run (`--traced-duration`, 0: none) has tracemalloc on
and writes a summary of the traced heap every `--snapshot-every` seconds.

The report: RSS slope (least squares, MB/min) in the first and the second half
of the churn (after `--skip` seconds of warm-up), whether it levels off (the
second half's slope at most a quarter of the first's, or under 0.5 MB/min),
and the allocation sites and object types that grew between the traced run's
snapshots.

    .venv/bin/python -m bench.bench_churn_memory [--duration 600] [--traced-duration 300] [--rate 20]
        [--nodes 100] [--devices 10] [--fill 0.995] [--snapshot-every 60] [--skip 60] [--note TEXT]

Results: bench/results/churn-memory.json and .md (`--name` for another name).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from kubesim.measure import machine
from kubesim.processes import ROOT
from kubesim.scheduler import ClaimControllerConfig, SchedulerConfig, Workload, run_workload

NAME = "churn-memory"
SITES_KEPT = 3000  # allocation sites kept per snapshot, by size
GROWERS_TRACED = 15  # the sites that grew most: their tracebacks
LEVEL_RATIO = 0.25  # levels off: the second half grows at most this share of the first half's slope...
LEVEL_FLOOR = {"rss_mb": 0.5, "traced_mb": 0.5, "blocks_k": 5.0}  # ...or under this much per minute (MB, thousands of blocks)


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute; None for fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if not var:
        return None
    return round(60 * sum((t - mt) * (v - mv) for t, v in points) / var, 3)


def halves(rows: list[dict[str, Any]], start: float, end: float, key: str) -> dict[str, Any]:
    """The slope of `key` in [start, mid] and [mid, end], the values at those points, and the verdict."""
    mid = (start + end) / 2
    pts = [(r["t"], r[key]) for r in rows if key in r and start <= r["t"] <= end]
    first = slope_per_min([p for p in pts if p[0] <= mid])
    second = slope_per_min([p for p in pts if p[0] >= mid])

    def at(t: float) -> float | None:
        near = min(pts, key=lambda p: abs(p[0] - t), default=None)
        return near[1] if near else None

    levels = None
    if first is not None and second is not None:
        levels = second <= LEVEL_FLOOR[key] or (first > 0 and second <= LEVEL_RATIO * first)
    return {
        "window_s": [round(start, 1), round(mid, 1), round(end, 1)],
        "at_start_mid_end": [at(start), at(mid), at(end)],
        "slope_per_min_first_half": first,
        "slope_per_min_second_half": second,
        "levels_off": levels,
    }


def _extender_cmd(out: Path, snapshot_every: float, snapshot_after: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.traced_extender",
        "--out",
        str(out),
        "--every",
        "5",
        "--snapshot-every",
        str(snapshot_every),
        "--snapshot-after",
        str(snapshot_after),
        "--",
        "serve",
        "--kubeconfig",
        "{kubeconfig}",
        "--standalone",
        "--listen",
        "{listen}",
    ]


def one_run(a: argparse.Namespace, duration: float, rate: float, snapshot_every: float, label: str) -> dict[str, Any]:
    """One steady churn of `duration` s at `rate` pods/s with the extender under the recorder; its readings."""
    pods = int(rate * duration)
    w = Workload(
        f"churn-{a.nodes}x{a.devices}",
        a.nodes,
        a.devices,
        pods,
        rate=rate,
        steady_fill=a.fill,
        warm_up=a.warm_up,
        timeout=duration + 300,
        settle=3.0,
    )
    out = Path(tempfile.mkdtemp(prefix=f"dra-churnmem-{label}-"))
    load_start = [round(x, 2) for x in os.getloadavg()]
    wall0 = time.time()
    r = run_workload(
        w,
        _extender_cmd(out, snapshot_every, a.skip),
        cfg=SchedulerConfig(seed=1),
        claims=ClaimControllerConfig(qps=a.claim_qps, burst=a.claim_qps * 2),
        progress=a.progress,
        label=label,
    )
    rows = [json.loads(line) for line in (out / "rss.jsonl").read_text().splitlines() if line.strip()]
    snaps = read_snapshots(out)
    # The churn ran from when the extender was ready to the run's end (the read-back of the claims is after it).
    ready_t = next((x["t"] for x in rows if x.get("ready")), r["extender_ready_s"])
    churn_end = ready_t + r["cpu"]["wall_s"]
    start = ready_t + a.skip
    readings: dict[str, Any] = {
        "label": label,
        "when": datetime.fromtimestamp(wall0, UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_start": load_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "workload": {"nodes": a.nodes, "devices_per_node": a.devices, "fill": a.fill, "rate": rate, "duration_s": duration},
        "pods_created": r["pods_created"],
        "pods_bound": r["pods_bound"],
        "steady_state": r.get("steady_state"),
        "failed_binds": r["failed_binds"],
        "extender_rejections": r["extender_rejections"],
        "devices_allocated_twice": r["readback"]["devices_allocated_twice"],
        "timed_out": r["timed_out"],
        "cpu": r["cpu"],
        "extender_ready_s": ready_t,
        "churn_window_s": [round(start, 1), round(churn_end, 1)],
        "rss": halves(rows, start, churn_end, "rss_mb"),
        "rss_samples": [[x["t"], x["rss_mb"]] for x in rows],
        "tracemalloc_every_s": snapshot_every,
    }
    if any("blocks_k" in x for x in rows):
        readings["blocks"] = halves(rows, start, churn_end, "blocks_k")
        readings["blocks_samples"] = [[x["t"], x["blocks_k"]] for x in rows if "blocks_k" in x]
    if any("traced_mb" in x for x in rows):
        readings["traced"] = halves(rows, start, churn_end, "traced_mb")
        readings["traced_samples"] = [[x["t"], x["traced_mb"]] for x in rows if "traced_mb" in x]
    if snaps:
        readings["snapshots"] = growth(snaps, start, churn_end)
    readings["kept"] = str(out)
    return readings


def _site(frame: tracemalloc.Frame) -> str:
    """file:line, relative to the repository or to site-packages / the standard library."""
    name = frame.filename
    root = str(ROOT) + "/"
    if name.startswith(root):
        name = name[len(root) :]
    elif "/site-packages/" in name:
        name = name.split("/site-packages/", 1)[1]
    elif "/lib/python" in name:
        name = "stdlib/" + name.split("/lib/python", 1)[1].partition("/")[2]
    return f"{name}:{frame.lineno}"


def read_snapshots(out: Path) -> list[dict[str, Any]]:
    """Each snapshot the extender dumped, as its traced bytes by file:line; the last one also with the
    tracebacks of the sites that grew most since the first. The pickles are removed once read."""
    summaries = sorted((json.loads(p.read_text()) for p in out.glob("snapshot-*.json")), key=lambda s: s["t"])
    first: dict[tuple[str, int], int] = {}
    for i, s in enumerate(summaries):
        path = out / s["snapshot"]
        snap = tracemalloc.Snapshot.load(str(path))
        by_line = snap.statistics("lineno")
        sizes = {(x.traceback[0].filename, x.traceback[0].lineno): x.size for x in by_line}
        s["sites"] = [[_site(x.traceback[0]), x.size, x.count] for x in by_line[:SITES_KEPT]]
        s["traced_sites_mb"] = round(sum(x.size for x in by_line) / 2**20, 2)
        s["tracebacks"] = []
        if i == 0:
            first = sizes
        elif i == len(summaries) - 1:
            growers = sorted(sizes, key=lambda k: first.get(k, 0) - sizes[k])[:GROWERS_TRACED]
            picked = snap.filter_traces([tracemalloc.Filter(True, f, n, all_frames=False) for f, n in growers])
            s["tracebacks"] = [
                {"size": x.size, "count": x.count, "frames": [_site(f) for f in reversed(x.traceback)]}
                for x in picked.statistics("traceback")[:80]
            ]
        del snap, by_line
        path.unlink()
    return summaries


def _diff(a: dict[str, Any], b: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """The sites that grew most from snapshot a to b (bytes and blocks)."""
    old = {s: (size, count) for s, size, count in a["sites"]}
    grown = []
    for s, size, count in b["sites"]:
        o = old.get(s, (0, 0))
        if size - o[0] > 0:
            grown.append({"site": s, "kb": round((size - o[0]) / 1024, 1), "blocks": count - o[1], "kb_now": round(size / 1024, 1)})
    grown.sort(key=lambda g: -g["kb"])
    return grown[:limit]


def _types_diff(a: dict[str, Any], b: dict[str, Any], limit: int) -> list[list[Any]]:
    old = dict(a["gc_objects_by_type"])
    d = [[t, n - old.get(t, 0), n] for t, n in b["gc_objects_by_type"]]
    return sorted((x for x in d if x[1] > 0), key=lambda x: -x[1])[:limit]


def growth(snaps: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """What grew between the first snapshot of the window, its middle one and its last."""
    inside = [s for s in snaps if start <= s["t"] <= end] or snaps
    first, last = inside[0], inside[-1]
    mid = min(inside, key=lambda s: abs(s["t"] - (first["t"] + last["t"]) / 2))
    top = _diff(first, last, 25)
    for g in top:  # the biggest traceback ending at the site (the traced run keeps 3 frames)
        g["traceback"] = next((tb["frames"] for tb in last["tracebacks"] if tb["frames"][0] == g["site"]), [])
    return {
        "taken_at_s": [s["t"] for s in snaps],
        "traced_mb": [s["traced_mb"] for s in snaps],
        "rss_mb": [s["rss_mb"] for s in snaps],
        "gc_objects": [s["gc_objects"] for s in snaps],
        "pod_objects": [dict(s["gc_objects_by_type"]).get("Pod", 0) for s in snaps],
        "snapshot_s": [s["snapshot_s"] for s in snaps],
        "compared_s": [first["t"], mid["t"], last["t"]],
        "grew_first_to_last": top,
        "shrank_first_to_last": _diff(last, first, 10),  # freed: e.g. the initial lists' objects as their pods go
        "grew_first_half": _diff(first, mid, 15),
        "grew_second_half": _diff(mid, last, 15),
        "types_grew_first_half": _types_diff(first, mid, 15),
        "types_grew_second_half": _types_diff(mid, last, 15),
    }


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:g}"


def _slopes(h: dict[str, Any] | None) -> str:
    return f"{_fmt(h['slope_per_min_first_half'])} / {_fmt(h['slope_per_min_second_half'])}" if h else "–"


def _values(h: dict[str, Any] | None) -> str:
    return " / ".join(_fmt(x) for x in h["at_start_mid_end"]) if h else "–"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# The extender's memory under steady churn (`python -m bench.bench_churn_memory`)",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}. {report.get('note', '')}",
        "",
        "Steady state as upstream's SteadyStateClusterResourceClaimTemplate: the kube-scheduler model (kubesim.scheduler) against "
        "`dra-extender serve` on the fake API server; the cluster is kept full of bound pods with allocated claims, and at the rate "
        "below the oldest bound pod is deleted (its claim deallocated and deleted by the claim controller stand-in) and a new pod "
        "of the ResourceClaimTemplate created, scheduled and bound. RSS sampled every 5 s inside the extender's process; the slope is "
        f"a least-squares fit over each half of the churn after the warm-up (the first {report['args']['skip']:g} s). Python blocks: "
        "`sys.getallocatedblocks()`, the objects alive (the RSS stays flat while new objects fill the arenas the initial lists "
        "freed, and never shrinks). Levels off: in the second half the slope is at most "
        f"{LEVEL_RATIO:g}x the first half's, or under {LEVEL_FLOOR['rss_mb']:g} MB/min ({LEVEL_FLOOR['blocks_k']:g}k blocks/min), for the "
        "RSS and the blocks alike (the traced MB in the traced run). The traced run has tracemalloc on: its RSS includes tracemalloc's "
        "own bookkeeping and the snapshots' pickling, and the extender runs several times slower, hence its lower rate.",
        "",
        "| run | when | load avg start -> end | nodes x devices, fill | pods/s | pods created / bound | failed binds | devices allocated twice "
        "| RSS MB start / mid / end | RSS slope MB/min 1st / 2nd half | Python blocks (k) start / mid / end | blocks slope k/min 1st / 2nd half "
        "| traced MB start / mid / end | traced slope MB/min 1st / 2nd half | levels off |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["runs"]:
        w, rss, bl, tr = r["workload"], r["rss"], r.get("blocks"), r.get("traced")
        verdicts = [h["levels_off"] for h in ([tr] if tr else [rss, bl]) if h]
        levels = None if None in verdicts or not verdicts else all(verdicts)
        lines.append(
            f"| {r['label']} ({w['duration_s']:g} s) | {r['when']} | {r['loadavg_start']} -> {r['loadavg_end']} "
            f"| {w['nodes']} x {w['devices_per_node']}, {w['fill']:g} | {w['rate']:g} | {r['pods_created']} / {r['pods_bound']} "
            f"| {r['failed_binds']} | {r['devices_allocated_twice']} | {_values(rss)} | {_slopes(rss)} | {_values(bl)} | {_slopes(bl)} "
            f"| {_values(tr)} | {_slopes(tr)} | {'yes' if levels else '**no**' if levels is not None else '–'} |"
        )
    for r in report["runs"]:
        s = r.get("snapshots")
        if not s:
            continue
        lines += [
            "",
            f"## {r['label']}: what the traced heap gained",
            "",
            f"Snapshots at {s['taken_at_s']} s after the extender started (traced MB {s['traced_mb']}; gc-tracked objects "
            f"{s['gc_objects']}, of them parsed Pods {s['pod_objects']}: objects made since the reflector's last gc.freeze(), "
            f"which the initial lists end with; each snapshot took {s['snapshot_s']} s); compared at {s['compared_s']} s.",
            "",
            "Top allocation sites, first to last compared snapshot:",
            "",
            "| site | KB gained | blocks gained | KB now | traceback (newest first) |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{g['site']}` | {g['kb']} | {g['blocks']} | {g['kb_now']} | {'<br>'.join(f'`{f}`' for f in g['traceback'][1:]) or '–'} |"
            for g in s["grew_first_to_last"]
        ]
        lines += [
            "",
            "Sites that shrank most, first to last compared snapshot (what the new objects replaced):",
            "",
            "| site | KB freed | blocks freed |",
            "| --- | --- | --- |",
        ]
        lines += [f"| `{g['site']}` | {g['kb']} | {g['blocks']} |" for g in s.get("shrank_first_to_last", [])]
        for half in ("first", "second"):
            lines += ["", f"Sites that grew in the {half} half:", "", "| site | KB gained | blocks gained |", "| --- | --- | --- |"]
            lines += [f"| `{g['site']}` | {g['kb']} | {g['blocks']} |" for g in s[f"grew_{half}_half"]]
        for half in ("first", "second"):
            lines.append("")
            lines.append(
                f"gc-tracked objects gained in the {half} half, by type: "
                + (", ".join(f"{t} +{d}" for t, d, _ in s[f"types_grew_{half}_half"]) or "none")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_churn_memory", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of churn of the untraced run (0: none)")
    p.add_argument("--traced-duration", type=float, default=300.0, help="seconds of churn with tracemalloc on (0: none)")
    p.add_argument("--snapshot-every", type=float, default=60.0, help="seconds between tracemalloc snapshots in the traced run")
    p.add_argument("--rate", type=float, default=20.0, help="pods created (and deleted) per second")
    p.add_argument(
        "--traced-rate",
        type=float,
        default=0.0,
        help="pods/s of the traced run (default: half --rate; tracing halves the extender's speed)",
    )
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--devices", type=int, default=10)
    p.add_argument("--fill", type=float, default=0.995, help="share of the devices held by bound pods")
    p.add_argument("--warm-up", type=int, default=100, help="pods churned before the measured ones")
    p.add_argument("--skip", type=float, default=60.0, help="seconds of churn left out of the slopes (warm-up)")
    p.add_argument("--claim-qps", type=float, default=200.0, help="the claim controller stand-in's write rate")
    p.add_argument("--progress", type=float, default=30.0)
    p.add_argument("--note", default="", help="a sentence for the markdown (e.g. what else ran on the machine)")
    p.add_argument("--name", default=NAME, help="results file name under --out")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    report: dict[str, Any] = {
        "machine": machine(),
        "note": a.note,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
    }
    report["runs"] = []
    if a.duration:
        report["runs"].append(one_run(a, a.duration, a.rate, 0.0, "untraced"))
    if a.traced_duration:
        report["runs"].append(one_run(a, a.traced_duration, a.traced_rate or a.rate / 2, a.snapshot_every, "tracemalloc"))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    md = markdown(report)
    (a.out / f"{a.name}.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
