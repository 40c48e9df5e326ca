"""What /filter costs a pod without resource claims, with and without PVC volumes (volume taints).

Every pod reaches the extender; most have no resource claims. Their fast
path must stay cheap now that pods with PVC volumes are checked for volume
taints. This measures the server's side of one /filter call over 500 nodes
(nodeCacheCapable: names only): parsing the body, the decision and
encoding the answer, exactly what the HTTP route runs on the event loop,
in process (the HTTP transport is the same for every case and not counted).
The tracker holds 2,000 PVC/PV pairs, 100 of them tainted.

    .venv/bin/python -m bench.bench_volume_filter [--nodes N] [--calls N]

Writes bench/results/volume-filter.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import orjson

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.pod_volumes import TOLERATIONS_ANNOTATION
from extender import wire
from extender.service import Service, build_service
from kubesim import objects
from kubesim.measure import pct
from kubesim.null_source import NullSource
from serving.metrics import Metrics
from tracker import events as ev
from tracker.state import ClusterState
from tracker.timestamps import rfc3339
from tracker.volumes import TAINTS_ANNOTATION

RESULTS = Path(__file__).resolve().parent / "results"
LIMIT_MS = 1.0
VOLUMES = 2000
TAINTED = 100


def build_state(nodes: int) -> ClusterState:
    state = ClusterState(CelEnvironment())
    for kind, group in state.required:
        state.mark_synced(kind, group)
    for i in range(nodes):
        name = f"node-{i:04d}"
        state.apply(
            ev.ObjectEvent(
                "ADDED", ev.NODE, ev.GROUP_CORE, name, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}}
            )
        )
    taint = json.dumps([{"key": "example.com/data-not-ready", "value": "true", "effect": "NoAttachOrMount"}])
    for i in range(VOLUMES):
        pv: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{i}", "uid": f"pv-{i}"}, "spec": {}}
        if i < TAINTED:
            pv["metadata"]["annotations"] = {TAINTS_ANNOTATION: taint}
        state.apply(ev.ObjectEvent("ADDED", ev.PERSISTENT_VOLUME, ev.GROUP_CORE, f"pv-{i}", pv))
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{i}", "namespace": "default", "uid": f"pvc-{i}"},
            "spec": {"volumeName": f"pv-{i}"},
        }
        state.apply(ev.ObjectEvent("ADDED", ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE, f"default/data-{i}", pvc))
    return state


def pod(name: str, volume: int | None, *, tolerate: bool = False) -> dict[str, Any]:
    """A realistic pod body without resource claims (a scheduler sends the whole object)."""
    meta: dict[str, Any] = {"uid": f"uid-{name}"}
    if tolerate:
        meta["annotations"] = {TOLERATIONS_ANNOTATION: json.dumps([{"key": "example.com/data-not-ready", "operator": "Exists"}])}
    volumes: list[dict[str, Any]] = [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    if volume is not None:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": f"data-{volume}"}})
    out = objects.pod(name, scheduler="dra-scheduler", labels={"app": "web"}, meta=meta, phase="Pending", volumes=volumes)
    out["spec"]["containers"] = [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}]
    return out


CASES: dict[str, dict[str, Any]] = {
    "no claims, no PVC volumes": pod("plain", None),
    "no claims, untainted PVC": pod("untainted", 1500),
    "no claims, tainted PVC, not tolerated (rejected)": pod("rejected", 7),
    "no claims, tainted PVC, tolerated": pod("populator", 7, tolerate=True),
}


async def measure(service: Service, body: bytes, calls: int) -> tuple[list[float], list[float]]:
    """Server time per call, wall clock and this thread's CPU, of what the HTTP route's `answer` runs.

    CPU time is the criterion: on a shared machine the wall clock's tail is
    the OS scheduler's (another process holding the core), not the extender's.
    """
    wall, cpu = [], []
    for _ in range(calls):
        start, start_cpu = time.perf_counter(), time.thread_time()
        args = wire.parse_extender_args(body)
        passed, failed = await service.filter(args)
        wire.filter_result(args, passed, unresolvable=failed)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return wall, cpu


async def run(nodes: int, calls: int) -> dict[str, Any]:
    state = build_state(nodes)
    service = build_service(state, NullSource(), Allocator(state.cel), Metrics(), placement_wait=0, claim_wait=0)
    names = [f"node-{i:04d}" for i in range(nodes)]
    results = []
    gc.collect()
    gc.freeze()  # as the extender does once its initial lists are in (tracker/apiserver/reflector.py)
    for case, raw_pod in CASES.items():
        body = orjson.dumps({"Pod": raw_pod, "Nodes": None, "NodeNames": names})
        await measure(service, body, 50)  # warm up
        samples, cpu = await measure(service, body, calls)
        args = wire.parse_extender_args(body)
        passed, failed = await service.filter(args)
        results.append(
            {
                "case": case,
                "nodes": nodes,
                "passed": len(passed),
                "rejected": len(failed),
                "p50_ms": round(pct(samples, 0.5), 4),
                "p99_ms": round(pct(samples, 0.99), 4),
                "max_ms": round(max(samples), 4),
                "cpu_p50_ms": round(pct(cpu, 0.5), 4),
                "cpu_p99_ms": round(pct(cpu, 0.99), 4),
                "body_bytes": len(body),
            }
        )
    return {
        "when": rfc3339(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "calls": calls,
        "volumes": VOLUMES,
        "tainted_volumes": TAINTED,
        "limit_ms": LIMIT_MS,
        "load_average": list(os.getloadavg()),
        "results": results,
    }


def write(report: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "volume-filter.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# /filter for pods without resource claims (volume taints)",
        "",
        f"Server time of one /filter call (parse + decide + encode, in process) over {report['results'][0]['nodes']} nodes, "
        f"nodeCacheCapable (node names); {report['calls']} calls per case after 50 warm-up calls; the tracker holds "
        f"{report['volumes']} PVC/PV pairs, {report['tainted_volumes']} tainted. Python {report['python']} on {report['machine']}, "
        f"{report['when']}, 2 CPU cores shared with other work (load average {report['load_average'][0]:.1f}). "
        f"Limit: CPU-time p99 ≤ {report['limit_ms']:g} ms (the wall clock's tail is the OS scheduler's on a busy machine).",
        "",
        "| case | passed | rejected | CPU p50 ms | CPU p99 ms | wall p50 ms | wall p99 ms | wall max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['case']} | {r['passed']} | {r['rejected']} | {r['cpu_p50_ms']:.3f} | {r['cpu_p99_ms']:.3f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['max_ms']:.3f} |"
        )
    lines += [
        "",
        "A pod without resource claims and without PVC volumes is answered by the fast path (no state is read). "
        "One with PVC volumes looks up its PVCs and their PVs only when some volume in the cluster is tainted; "
        "a rejection fills one reason per node.",
        "",
    ]
    (RESULTS / "volume-filter.md").write_text("\n".join(lines))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.nodes, args.calls))
    write(report)
    for r in report["results"]:
        print(
            f"{r['case']:<50} cpu p50 {r['cpu_p50_ms']:.3f} p99 {r['cpu_p99_ms']:.3f} ms; wall p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} ms"
        )
    worst = max(r["cpu_p99_ms"] for r in report["results"])
    print(f"worst p99 {worst:.3f} ms (limit {LIMIT_MS:g} ms): {'ok' if worst <= LIMIT_MS else 'OVER'}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
