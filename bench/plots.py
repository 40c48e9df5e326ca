"""Plots of the benchmark results (`bench/results/*.json` -> `*.png`).

matplotlib is an optional dependency (`pip install -e '.[bench]'`); without
it the plots are skipped with a message and the JSON/markdown stay the record.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# Lines told apart without colour (print, colour-blind readers): a style per series.
STYLES = ("-", "--", ":", "-.")


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def scheduling(plt: Any, data: dict[str, Any]) -> Path | None:
    samples = data.get("samples_ms")
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (verb, values) in enumerate(samples.items()):
        if not values:
            continue
        xs = sorted(values)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", linestyle=STYLES[i % len(STYLES)], label=f"{verb} (p99 {data['latency_ms'][verb]['p99']:.0f} ms)")
    w = data["workload"]
    ax.set(
        xscale="log",
        xlabel="latency (ms, log scale)",
        ylabel="fraction of requests",
        title=f"{w['nodes']} nodes x {w['devices_per_node']} devices, {w['pods']} pods: wall time per HTTP call",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(plt, fig, "scheduling-latency.png")


def cel(plt: Any, data: dict[str, Any]) -> Path | None:
    selectors = data.get("selectors") or []
    if not selectors:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [s["name"] for s in selectors]
    xs = range(len(names))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], [s["interpreted"]["run_us"] for s in selectors], width, label="celpy interpreter", hatch="//")
    ax.bar([x + width / 2 for x in xs], [s["compiled"]["run_us"] for s in selectors], width, label="compiled (celpy transpiler)")
    ax.set_xticks(list(xs), names, rotation=15, ha="right", fontsize=8)
    ax.set(
        yscale="log",
        ylabel="µs per evaluation (log scale)",
        title=f"CEL selector cost, bare runner, CPU time ({data['devices']:,} devices)",
    )
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend()
    return _save(plt, fig, "cel-cost.png")


def kube_scheduler_model(plt: Any, data: dict[str, Any], name: str) -> Path | None:
    """Pod created -> bound, one CDF per run (extender and no-op reference), one panel per workload."""
    runs = [r for r in data.get("runs") or [] if (r.get("samples_ms") or {}).get("pod_created_to_bound")]
    workloads = list(dict.fromkeys(r["workload"]["name"] for r in runs))
    if not workloads:
        return None
    cols = min(4, len(workloads))
    rows = -(-len(workloads) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    fig.suptitle(data.get("title") or name, fontsize=9)
    for ax in axes.flat[len(workloads) :]:
        ax.set_visible(False)
    for ax, w in zip(axes.flat, workloads, strict=False):
        for i, r in enumerate(r for r in runs if r["workload"]["name"] == w):
            xs = sorted(x / 1000 for x in r["samples_ms"]["pod_created_to_bound"])
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            who = "no-op" if r["extender"] == "noop" else "extender"
            ax.step(
                xs,
                ys,
                where="post",
                linestyle=STYLES[i % len(STYLES)],
                label=f"{who}: {r['pods_per_second']} pods/s, {r['failed_binds']} failed binds",
            )
        spec = runs[[r["workload"]["name"] for r in runs].index(w)]["workload"]
        rate = f", created at {spec['rate']}/s" if spec.get("rate") else ", all at once"
        ax.set(
            xlabel="pod created -> bound (s, wall time)",
            ylabel="fraction of pods",
            title=f"{w}: {spec['nodes']} nodes x {spec['devices_per_node']} devices,\n{spec['pods']} pods{rate}",
        )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(plt, fig, f"{name}-created-to-bound.png")


def _save(plt: Any, fig: Any, name: str) -> Path:
    path = RESULTS / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots drawn", file=sys.stderr)
        return 0
    for name, draw in (("scheduling", scheduling), ("cel", cel)):
        data = _load(name)
        path = draw(plt, data) if data else None
        if path is not None:
            print(f"plot: {path.relative_to(RESULTS.parent.parent)}")
    for name in ("kube-scheduler-model", "kube-scheduler-model-baseline"):
        data = _load(name)
        path = kube_scheduler_model(plt, data, name) if data else None
        if path is not None:
            print(f"plot: {path.relative_to(RESULTS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
