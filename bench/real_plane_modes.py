"""Issue 42's modes on one real control plane, back to back: in-tree, dra-extender, a no-op extender, no DRA.

    python -m bench.real_plane_modes --refk8s DIR --workload 5000x8 --out bench/results/NAME

`DIR` holds a Kubernetes control plane built outside this repository (its
`up.sh`, `down.sh`, `restart-scheduler.sh` and `bin/`, as docs/performance.md
describes). The plane is started fresh without a scheduler, with
kube-controller-manager's client at 500 qps (at its default 20 the
ResourceClaim controller caps a run near 10 pods/s); the workload's nodes,
slices and DaemonSet pods are created once (bench/real_control_plane.py),
and for each mode its pods with their claims are created before
kube-scheduler starts, then every pod is waited for. Modes:

- `in-tree`: the DynamicResources plugin, default node sampling;
- `extender`: DynamicResources off, dra-extender as filter, prioritize and
  bind, `percentageOfNodesToScore: 100` as docs/kube-scheduler.md
  recommends (`--offer-nodes` at its default, 100);
- `no-op`: DynamicResources off, an extender that passes every node and
  scores 0 (kube-scheduler binds): the protocol's own price;
- `no-dra`: DynamicResources off, no extender: the ceiling, the same pods
  scheduled with their claims ignored.

`no-op` and `no-dra` score every node as `extender` does, so the three
differ only in DRA; `extender-sampled` and `no-dra-sampled` are the same
two with kube-scheduler's default node sampling (what the recommendation
costs, and the ceiling of a cluster left at the default).

Per mode, from kube-scheduler's start to the last pod bound: pods/s, and the
CPU seconds of kube-scheduler, kube-apiserver, kube-controller-manager and
the extender (its start-up apart), the extender's peak RSS. Written to
NAME.json and NAME.md with the ratios the issue asks for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.real_control_plane import Cluster, reset, seed
from kubesim.measure import cpu_seconds, machine, proc_status_mb
from kubesim.processes import start_server
from kubesim.scheduler.config import NAMESPACE, SCHEDULER_NAME
from kubesim.scheduler.workloads import WORKLOADS, Workload

MODES = ("in-tree", "extender", "no-op", "no-dra", "extender-sampled", "no-dra-sampled")
SAMPLED = ("in-tree", "extender-sampled", "no-dra-sampled")  # kube-scheduler's default node sampling; the others score every node
EXTENDER_PORT = 18888
PLANE_ENV = {"KCM_QPS": "500", "KCM_BURST": "1000"}


def scheduler_config(mode: str, kubeconfig: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of a mode: one profile for the workload's schedulerName."""
    profile: dict[str, Any] = {"schedulerName": SCHEDULER_NAME}
    if mode != "in-tree":
        profile["plugins"] = {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    if mode not in SAMPLED:
        profile["percentageOfNodesToScore"] = 100
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": False},
        "profiles": [profile],
    }
    if mode in ("extender", "extender-sampled", "no-op"):
        extender: dict[str, Any] = {
            "urlPrefix": f"http://127.0.0.1:{EXTENDER_PORT}",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "weight": 1,
            "nodeCacheCapable": True,
            "httpTimeout": "5s",
            "ignorable": False,
        }
        if mode != "no-op":
            extender["bindVerb"] = "bind"
        config["extenders"] = [extender]
    return config


DEFAULT_EXTENDER_CMD = f"{sys.executable} -m dra_extender.cli serve --kubeconfig {{kubeconfig}} --standalone --listen {{listen}}"


def extender_command(mode: str, kubeconfig: str, template: str = DEFAULT_EXTENDER_CMD) -> list[str] | None:
    """The process a mode measures: `template` (placeholders {kubeconfig} {listen}) for dra-extender, the no-op, or none."""
    listen = f"127.0.0.1:{EXTENDER_PORT}"
    if mode in ("extender", "extender-sampled"):
        return shlex.split(template.format(kubeconfig=kubeconfig, listen=listen))
    if mode == "no-op":
        return [sys.executable, "-m", "kubesim.scheduler.noop", "--kubeconfig", kubeconfig, "--listen", listen]
    return None


class Plane:
    """The control plane's scripts and processes (their pids from run/NAME.pid)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kubeconfig = str(root / "kubeconfig")

    def script(self, name: str, **env: str) -> None:
        subprocess.run([str(self.root / name)], check=True, env={**os.environ, "REFK8S": str(self.root), **PLANE_ENV, **env})

    def pid(self, name: str) -> int:
        return int((self.root / "run" / f"{name}.pid").read_text())

    def cpu(self, name: str) -> float:
        return cpu_seconds(self.pid(name))

    def stop_scheduler(self) -> None:
        pid = self.pid("scheduler")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the extender's whole process group (a profiler wrapping it writes its recording), SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


async def follow_binds(api: Cluster, pods: int, timeout: float, started: asyncio.Event) -> dict[str, float]:
    """Each workload pod's bind time (time.monotonic()) as the pod watch brings its nodeName; returns at `pods` or `timeout`."""
    assert api.session is not None
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    status, listing = await api.request("GET", path)
    if status != 200:
        raise RuntimeError(f"list {path}: HTTP {status}")
    bound = {p["metadata"]["name"]: time.monotonic() for p in listing.get("items") or [] if (p.get("spec") or {}).get("nodeName")}
    version = listing["metadata"]["resourceVersion"]
    started.set()
    deadline = time.monotonic() + timeout
    while len(bound) < pods and (left := deadline - time.monotonic()) > 0:  # a watch the server ends is resumed where it stopped
        url = f"{api.url}{path}?watch=1&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds={max(1, int(left))}"
        async with api.session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=left)) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: HTTP {resp.status}")
            async for line in resp.content:
                event = orjson.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch {path}: {obj.get('message') or obj}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                name = (obj.get("metadata") or {}).get("name")
                if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName") and name not in bound:
                    bound[name] = time.monotonic()
                    if len(bound) >= pods:
                        break
    return bound


async def run_mode(plane: Plane, w: Workload, mode: str, out: Path, timeout: float, extender_cmd: str) -> dict[str, Any]:
    """One mode: the extender (if any) started and ready, kube-scheduler started, every pod's bind seen on the watch."""
    result: dict[str, Any] = {"mode": mode, "machine_at_start": machine()}
    ext: subprocess.Popen[bytes] | None = None
    command = extender_command(mode, plane.kubeconfig, extender_cmd)
    if command is not None:
        log = out.parent / f"{out.name}-{mode}-extender.log"
        proc, probe = await asyncio.to_thread(start_server, command, EXTENDER_PORT, log, timeout=300, new_session=True)
        probe.close()
        ext = proc
        result["extender_startup_cpu_s"] = round(cpu_seconds(proc.pid), 2)
        result["extender_rss_at_ready_mib"] = round(proc_status_mb(proc.pid, "VmRSS"), 1)
    config = out.parent / f"{out.name}-{mode}-scheduler.yaml"
    config.write_text(yaml.safe_dump(scheduler_config(mode, plane.kubeconfig), sort_keys=False))
    try:
        async with Cluster(plane.kubeconfig) as api:
            started = asyncio.Event()
            watch = asyncio.create_task(follow_binds(api, w.pods, timeout, started))
            await started.wait()
            api0, kcm0 = plane.cpu("apiserver"), plane.cpu("kcm")
            ext0 = cpu_seconds(ext.pid) if ext else 0.0
            t0 = time.monotonic()
            await asyncio.to_thread(plane.script, "restart-scheduler.sh", SCHED_CONFIG=str(config))
            sched_up = time.monotonic() - t0
            bound_at = await watch
            cpu = {
                "kube_scheduler_cpu_s": round(plane.cpu("scheduler"), 2),
                "kube_apiserver_cpu_s": round(plane.cpu("apiserver") - api0, 2),
                "kube_controller_manager_cpu_s": round(plane.cpu("kcm") - kcm0, 2),
            }
            ext_cpu = cpu_seconds(ext.pid) - ext0 if ext else 0.0
            left = await api.count(f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName%3D")
        times = sorted(t - t0 for t in bound_at.values())
        bound = w.pods - left
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        result |= {
            "bound": bound,
            "pods": w.pods,
            "scheduler_healthy_s": round(sched_up, 2),
            "first_bound_s": round(times[0], 2) if times else None,
            "last_bound_s": round(times[-1], 2) if times else None,
            "pods_per_s": round((len(times) - 1) / span, 1) if span else None,
            "pods_per_s_from_scheduler_start": round(len(times) / times[-1], 1) if times else None,
            **cpu,
        }
        if ext is not None:
            result |= {
                "extender_cpu_s": round(ext_cpu, 2),
                "extender_cpu_ms_per_pod": round(1000 * ext_cpu / max(1, bound), 2),
                "extender_peak_rss_mib": round(proc_status_mb(ext.pid, "VmHWM"), 1),
            }
    finally:
        plane.stop_scheduler()
        if ext is not None:
            stop_group(ext)
    result["machine_at_end"] = machine()
    return result


def markdown(w: Workload, results: list[dict[str, Any]], note: str, version: str) -> str:
    by = {r["mode"]: r for r in results}
    m = results[0]["machine_at_start"]

    def ratio(mode: str, ref: str) -> str:
        if mode not in by or ref not in by or mode == ref:
            return "–"
        return f"{by[mode]['pods_per_s'] / by[ref]['pods_per_s']:.2f}×"

    lines = [
        f"# Real control plane, {w.name}: {w.pods} pods, the four modes back to back (`python -m bench.real_plane_modes`)",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; {version}; kube-controller-manager at {PLANE_ENV['KCM_QPS']} qps "
        f"(burst {PLANE_ENV['KCM_BURST']}), kube-scheduler's client at 1000 qps. {note}".strip(),
        "",
        "| mode | bound | pods/s | vs in-tree | vs no-op | vs no DRA | kube-scheduler CPU s | kube-apiserver CPU s | "
        "kube-controller-manager CPU s | extender CPU s (ms per pod; start-up s) | extender peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        m = r["mode"]
        ext = f"{r['extender_cpu_s']} ({r['extender_cpu_ms_per_pod']}; {r['extender_startup_cpu_s']})" if "extender_cpu_s" in r else "–"
        lines.append(
            f"| {m} | {r['bound']} / {r['pods']} | {r['pods_per_s']} | {ratio(m, 'in-tree')} | {ratio(m, 'no-op')} | "
            f"{ratio(m, 'no-dra')} | {r['kube_scheduler_cpu_s']} | {r['kube_apiserver_cpu_s']} | "
            f"{r['kube_controller_manager_cpu_s']} | {ext} | {r.get('extender_peak_rss_mib', '–')} |"
        )
    lines += [
        "",
        "pods/s: from the first pod bound to the last, each bind timed as the pod watch brings it; "
        "from kube-scheduler's start (its informers' start-up included) in brackets below.",
        "",
    ]
    for r in results:
        lines.append(
            f"- {r['mode']}: {r['pods_per_s_from_scheduler_start']} pods/s from kube-scheduler's start (first bind at "
            f"{r['first_bound_s']} s, last at {r['last_bound_s']} s); load average "
            f"{r['machine_at_start']['loadavg_1_5_15']} → {r['machine_at_end']['loadavg_1_5_15']}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.real_plane_modes", description=__doc__.split("\n\n")[0])
    p.add_argument("--refk8s", required=True, help="the control plane's folder (up.sh, down.sh, restart-scheduler.sh, bin/)")
    p.add_argument("--workload", default="5000x8", choices=sorted(WORKLOADS))
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}, in the order to run")
    p.add_argument("--out", required=True, help="results path without extension: OUT.json and OUT.md")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per mode")
    p.add_argument("--note", default="", help="a sentence for the markdown")
    p.add_argument(
        "--extender-cmd",
        default=DEFAULT_EXTENDER_CMD,
        help="dra-extender's command, placeholders {kubeconfig} {listen} (another tree, a profiler)",
    )
    a = p.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"--modes: unknown {', '.join(unknown)}; known: {', '.join(MODES)}")
    root = Path(a.refk8s).resolve()
    for needed in ("up.sh", "down.sh", "restart-scheduler.sh", "bin/kube-apiserver"):
        if not (root / needed).exists():
            p.error(f"--refk8s {root}: no {needed}")
    w = WORKLOADS[a.workload]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([str(root / "bin" / "kube-apiserver"), "--version"], capture_output=True, text=True).stdout.strip()
    plane = Plane(root)
    plane.script("down.sh")
    plane.script("up.sh", FRESH="1", NO_SCHED="1")
    results: list[dict[str, Any]] = []
    try:
        for i, mode in enumerate(modes):
            if i:
                asyncio.run(reset(plane.kubeconfig))
            asyncio.run(seed(plane.kubeconfig, w, daemons=True, pods_only=i > 0))
            print(f"--- {mode}", file=sys.stderr, flush=True)
            results.append(asyncio.run(run_mode(plane, w, mode, out, a.timeout, a.extender_cmd)))
            print(json.dumps({k: v for k, v in results[-1].items() if k not in ("machine_at_start", "machine_at_end")}), flush=True)
            Path(f"{out}.json").write_text(json.dumps({"workload": w.name, "kubernetes": version, "results": results}, indent=1) + "\n")
    finally:
        plane.script("down.sh")
    note = a.note + ("" if a.extender_cmd == DEFAULT_EXTENDER_CMD else f" Extender: `{a.extender_cmd}`.")
    Path(f"{out}.md").write_text(markdown(w, results, note.strip(), version))
    return 0 if all(r["bound"] == r["pods"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
