"""workloads-latency.png and workloads-throughput.png from the results."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def _style(label: str) -> str:
    return ":" if "no-op" in label else "--" if "cluster" in label else "-"


def plots(result: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots drawn", file=sys.stderr)
        return []
    series: list[tuple[str, dict[str, Any]]] = []
    w = result["workloads"]
    for name in ("SchedulingWithResourceClaimTemplate", "Toleration", "FirstAvailable"):
        if name in w:
            series.append((f"{name} no-op", w[name]["noop_before"]))
            for mode in ("source", "cluster"):
                if mode in w[name]:
                    series.append((f"{name} {mode}", w[name][mode]))
    if "Scale5k" in w:
        for mode in ("source", "cluster"):
            if mode in w["Scale5k"]:
                series.append((f"Scale5k {mode} 500 names", w["Scale5k"][mode]["names_500"]))
                series.append((f"Scale5k {mode} 5000 names", w["Scale5k"][mode]["names_5000"]))
    if "SteadyState" in w:
        for mode in ("source", "cluster"):
            if mode in w["SteadyState"]:
                series.append((f"SteadyState {mode}", w["SteadyState"][mode]))
    paths = []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, r in series:
        xs = sorted(r["samples"]["filter_ms"])
        if xs:
            ax.step(
                xs,
                [(i + 1) / len(xs) for i in range(len(xs))],
                where="post",
                linestyle=_style(label),
                label=f"{label} (p99 {r['latency_ms']['filter']['p99']} ms)",
            )
    ax.set(
        xscale="log",
        xlabel="/filter latency (ms, log scale)",
        ylabel="fraction of calls",
        title="/filter latency distribution per workload",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "workloads-latency.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, r in series:
        done = r["samples"]["done_s"]
        if not done:
            continue
        end = int(max(done)) + 1
        buckets = [0] * end
        for d in done:
            buckets[min(int(d), end - 1)] += 1
        ax.plot(range(end), buckets, label=label, linewidth=1, linestyle=_style(label))
    ax.set(xlabel="seconds since the workload's first pod", ylabel="pods per second", title="pods/s over time (sequential driver)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "workloads-throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
