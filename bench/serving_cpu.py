"""The extender's CPU per pod with one pod at a time: the serving path without the scheduler model's concurrency.

`dra-extender serve --source` over 5,000 nodes x 8 devices (bench/bench_scheduling.py's cluster),
`--probe-listen` as the Helm chart runs it; each pod gets /filter with all 5,000 names, /prioritize
with the feasible ones and /bind to the best, and the next pod starts when the bind has answered.
The extender's utime + stime (/proc/PID/stat) over the pods after the first `--warm` (the claim
shape's first pass), per pod. No API server: binds are written to the manifest overlay, so what is
measured is the HTTP edge, the decision and the state, not the API writes or watch events.
For comparing two trees of the extender at the same moment (issue 31, bench/results/issue-31-cpu.md):

    .venv/bin/python -m bench.serving_cpu --tree /tmp/before --name serving-cpu-before-a

`--tree` is put first on the extender's PYTHONPATH and used as its working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.bench_scheduling import pod_body, write_cluster
from bench.common import RESULTS
from kubesim.processes import free_port

NODES, DEVICES, CLAIMS, TAINTED_POOLS = 5000, 8, 2000, 50
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of the main thread (the main loop) and of the other threads together (the HTTP thread's loop, mostly)."""
    out = {"main": 0.0, "other threads": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out["main" if task.name == str(pid) else "other threads"] += (int(fields[11]) + int(fields[12])) / TICK
    return out


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run(tree: Path | None, cluster: Path, pods: int, warm: int, log: Path, cpus: set[int] | None = None) -> dict[str, object]:
    """`cpus`: the extender on those CPUs, this client on the others (each its own core)."""
    port, probe = free_port(), free_port()
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-m", "dra_extender.cli", "serve", "--source", str(cluster)]
    cmd += ["--listen", f"127.0.0.1:{port}", "--probe-listen", f"127.0.0.1:{probe}"]
    own = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)  # inherited by the extender at fork
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=tree or Path.cwd(), stdout=out, stderr=subprocess.STDOUT)
    if cpus:
        os.sched_setaffinity(0, (own - cpus) or own)
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        while True:
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the extender exited with {proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        time.sleep(3)  # the CEL warm-up after readiness
        names = [f"node-{i:05d}" for i in range(NODES)]
        load_start, cpu0, t0 = load(), 0.0, 0.0
        for p in range(pods):
            if p == warm:
                cpu0, t0, threads0 = cpu_seconds(proc.pid), time.perf_counter(), thread_cpu_seconds(proc.pid)
            body = pod_body(p, names)
            feasible = client.post("/filter", content=json.dumps(body)).json()["NodeNames"] or []
            if not feasible:
                raise RuntimeError(f"pod-{p}: no feasible node")
            body["NodeNames"] = feasible
            scores = client.post("/prioritize", content=json.dumps(body)).json()
            best = max(scores, key=lambda s: s["Score"])["Host"]
            bind = {"PodName": f"pod-{p}", "PodNamespace": "default", "PodUID": f"uid-{p}", "Node": best}
            error = client.post("/bind", json=bind).json()["Error"]
            if error:
                raise RuntimeError(f"pod-{p}: {error}")
        cpu1, t1, threads1 = cpu_seconds(proc.pid), time.perf_counter(), thread_cpu_seconds(proc.pid)
        measured = pods - warm
        return {
            "extender_cpu_ms_per_pod": round(1e3 * (cpu1 - cpu0) / measured, 3),
            "thread_cpu_ms_per_pod": {k: round(1e3 * (v - threads0.get(k, 0.0)) / measured, 3) for k, v in sorted(threads1.items())},
            "extender_cpus": sorted(cpus) if cpus else None,
            "wall_ms_per_pod": round(1e3 * (t1 - t0) / measured, 3),
            "pods_measured": measured,
            "load_average_start": load_start,
            "load_average_end": load(),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, default=None, help="the extender's source tree (default: this one)")
    p.add_argument("--name", required=True, help="results file name under --out")
    p.add_argument("--pods", type=int, default=700)
    p.add_argument("--warm", type=int, default=100, help="pods not measured (the claim shape's first pass)")
    p.add_argument("--cluster", type=Path, default=Path(tempfile.gettempdir()) / "dra-serving-cpu-cluster", help="written once, reused")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--extender-cpus", default="", help="e.g. 0: the extender on these CPUs, this client on the others")
    a = p.parse_args()
    if a.pods > CLAIMS:
        p.error(f"--pods: at most {CLAIMS}")
    if not (a.cluster / "cluster.yaml").exists():
        a.cluster.mkdir(parents=True, exist_ok=True)
        write_cluster(a.cluster, NODES, DEVICES, CLAIMS, TAINTED_POOLS)
    result = {
        "name": a.name,
        "tree": str(a.tree or "this tree"),
        **run(
            a.tree,
            a.cluster,
            a.pods,
            a.warm,
            Path(tempfile.gettempdir()) / f"{a.name}.extender.log",
            {int(c) for c in a.extender_cpus.split(",")} if a.extender_cpus else None,
        ),
    }
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
