"""Isolation of the scheduler's path: /filter and kube-scheduler's pods/s while the controllers work, per process layout.

The fake API server runs as its own process (the frozen-heap variant, as
bench_health_storm uses) with N nodes of 8 GPUs that carry the `uuid`
attribute health alerts name (bench_health's cluster and DeviceHealthPolicy),
a DeviceClass and ResourceClaimTemplate over them, and 500 running pods in
namespace `evict`, each holding one device of a second driver through an
allocated, reserved claim. The extender runs in a layout (`processes()`, the
one place the commands are written):

- combined: the verbs, the eviction controller and the health controller
  with its alert receiver in one process (`dra-extender all`; `serve` before
  the controllers command existed), the layout before issue 40;
- split: `dra-extender serve` (the verbs) and `dra-extender controllers`
  (eviction, health and its receiver) as two processes, as the chart runs
  them.

This process plays kube-scheduler (the kubesim.scheduler model: /filter,
/prioritize, /bind over HTTP, its queue and its claim-controller stand-in),
kept busy: pods are created so that a backlog always waits, and past a
number of bound pods the oldest is deleted (its claim released), so the
cluster never fills. Phases, one after another in one run:

- quiet, twice: nothing else happens (the baseline; the difference between
  the two windows is the machine's noise in the same run);
- eviction: a NoExecute DeviceTaintRule (evictionsPerSecond --evict-rate)
  over the second driver's devices, until the 500 pods holding them are gone
  (first, so that the cluster is the baseline's);
- health: one delivery of 1,000 firing alerts naming 1,000 GPUs to the
  health receiver (the first GPUs of every node, so that every node keeps
  some free), until the 1,000 DeviceTaintRules are written;
- after: quiet again, with the 1,000 GPUs tainted (a different cluster from
  the baseline's: /filter skips the tainted GPUs).

Each phase reports /filter p50/p99/max (every /filter the model sent in the
window), the model's pods/s (feeder pods bound in the window per second) and
each process's CPU. The ceiling is the same model against the no-op extender
(kubesim.scheduler.noop) in a quiet window of the same length, in the same
invocation.

    .venv/bin/python -m bench.bench_isolation [--layouts combined,split] [--nodes 250] [--quiet 10] [--name isolation]
    .venv/bin/python -m bench.bench_isolation render NAME   # the markdown again from NAME.json

Writes bench/results/<name>.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.bench_health import DRIVER as GPU_DRIVER
from bench.bench_health import TOKEN, body, objects
from bench.bench_health_storm import RULES, alert, deliver, holds_between, wait_rules
from bench.common import RESULTS
from bench.kube_scheduler_model import dump_json
from kubesim.measure import cpu_seconds, machine, pct, steal_seconds
from kubesim.objects import claim, device_class, node_slice, pod
from kubesim.processes import free_port, seed, start_fake_api, start_server, stop_process
from kubesim.scheduler import ClaimControllerConfig, KubeSchedulerModel, SchedulerConfig, Workload
from kubesim.scheduler.api import Api
from kubesim.scheduler.config import CLASS, DELETE_PROTECTION, NAMESPACE, SCHEDULER_NAME
from kubesim.scheduler.run import noop_extender_cmd
from kubesim.scheduler.workloads import cluster_objects, pod_object
from tracker.timestamps import rfc3339

LAYOUTS = ("combined", "split")
HEALTH_RULES = 1_000
EVICTED_PODS = 500
EVICT_NAMESPACE = "evict"
EVICT_DRIVER = "evict.example.com"
EVICT_CLASS = "evict-devices"
# The resourceclaim-controller stand-in fast enough never to cap the run: each pod costs it two writes when
# created and two when deleted (the churn, the evictions), and the run deletes as many pods as it binds.
CLAIMS = ClaimControllerConfig(qps=1000.0, burst=1000)
CLI = [sys.executable, "-m", "dra_extender.cli"]


@dataclass(frozen=True, slots=True)
class Ports:
    verbs: int
    controllers: int
    alerts: int


@dataclass(frozen=True, slots=True)
class Process:
    """One process of a layout: its role, its command, and the port whose /readyz says it is up."""

    role: str
    cmd: list[str]
    ready_port: int


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (threads started before the call too: /proc/PID/task)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


def pin_pods(a: argparse.Namespace, started: list[tuple[Process, Any]], api_pid: int) -> dict[str, list[int]] | None:
    """--pin: the chart's pods on their own CPUs. The scheduler pod (kube-scheduler, here the model in this
    process, and the process answering the verbs) gets CPU 0; the API server and the controllers' pod CPU 1.
    Without it every process shares every CPU, and what the controllers spend is taken from /filter."""
    if not a.pin:
        return None
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin: needs two CPUs")
    sidecar, rest = {0}, {1}
    placed: dict[str, list[int]] = {"bench (kube-scheduler model)": sorted(sidecar), "fake API": sorted(rest)}
    pin(os.getpid(), sidecar)
    pin(api_pid, rest)
    for p, proc in started:
        cpus = rest if p.role == "controllers" else sidecar
        pin(proc.pid, cpus)
        placed[p.role] = sorted(cpus)
    return placed


def has_controllers_command() -> bool:
    """Whether this dra-extender has `controllers` (issue 40 item 1): the split layout needs it."""
    return importlib.util.find_spec("dra_extender.controllers") is not None


def processes(layout: str, kubeconfig: Path, token_file: Path, ports: Ports, holds: Path | None) -> list[Process]:
    """The processes of a layout (--standalone: the only replica, no Lease), the one place their commands are written.

    combined is `dra-extender all` (the verbs and the controllers in one process), or `serve` where the
    controllers command does not exist yet (serve ran the controllers until issue 40). With `holds`, the
    process answering the verbs runs under bench/loop_holds.py, which records every late wake-up of its loop.
    """
    common = ["--kubeconfig", str(kubeconfig), "--standalone", "--log-level", "warning"]
    alerts = ["--alerts-listen", f"127.0.0.1:{ports.alerts}", "--alerts-token-file", str(token_file)]
    verbs = ["--listen", f"127.0.0.1:{ports.verbs}"]
    split = has_controllers_command()

    def verbs_process(command: str, *args: str) -> Process:
        if holds is not None and command != "serve":
            raise SystemExit(f"--loop-holds: bench/loop_holds.py probes `serve` only, not `{command}`")
        cli = [*CLI, command] if holds is None else [sys.executable, "-m", "bench.loop_holds", "--out", str(holds), "--", command]
        return Process(command, [*cli, *common, *verbs, *args], ports.verbs)

    if layout == "combined":
        return [verbs_process("all" if split else "serve", *alerts)]
    if layout == "split":
        if not split:
            raise SystemExit("--layouts split: this dra-extender has no `controllers` command yet (issue 40 item 1)")
        controllers = [*CLI, "controllers", *common, "--listen", f"127.0.0.1:{ports.controllers}", *alerts]
        return [verbs_process("serve"), Process("controllers", controllers, ports.controllers)]
    raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")


def cluster(nodes: int) -> list[dict[str, Any]]:
    """bench_health's nodes, GPUs and policy; the model's namespace and template over those GPUs; the 500 pods to evict."""
    if nodes * 8 < HEALTH_RULES:
        raise ValueError(f"--nodes {nodes}: {HEALTH_RULES} health alerts need at least {math.ceil(HEALTH_RULES / 8)} nodes of 8 GPUs")
    base = [o for o in cluster_objects(Workload("isolation", 0, 8, 0)) if o["kind"] != "DeviceClass"]
    out = [*base, device_class(CLASS, GPU_DRIVER), device_class(EVICT_CLASS, EVICT_DRIVER), *objects(nodes)]
    out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EVICT_NAMESPACE}})
    per_node = math.ceil(EVICTED_PODS / nodes)
    for n in range(nodes):
        out.append(node_slice(f"node-{n:04d}", EVICT_DRIVER, [{"name": f"dev-{d}"} for d in range(per_node)]))
    for i in range(EVICTED_PODS):
        out += evicted_pod(i, f"node-{i % nodes:04d}", f"dev-{i // nodes}")
    return out


def evicted_pod(i: int, node: str, device: str) -> list[dict[str, Any]]:
    """A running pod of the scheduler's and its claim, allocated `device` of the second driver and reserved for the pod."""
    name, uid = f"held-{i}", f"held-uid-{i}"
    c = claim(f"{name}-dev", EVICT_NAMESPACE, device_class=EVICT_CLASS, request="dev", finalizers=[DELETE_PROTECTION])
    c["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True}]
    c["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "dev", "driver": EVICT_DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
    }
    # The claim is named in the pod's spec, not made from a template: the model's claim-controller stand-in (which
    # shares kube-scheduler's process in this bench) leaves it alone when the pod goes, as kcm's work is not measured.
    p = pod(name, EVICT_NAMESPACE, claims={"dev": c["metadata"]["name"]}, scheduler=SCHEDULER_NAME, node_name=node, meta={"uid": uid})
    p["status"] = {"phase": "Running"}
    return [c, p]


def noexecute_rule(rate: float) -> dict[str, Any]:
    return {
        "apiVersion": "resource.dra-extender.io/v1alpha1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "evict-held"},
        "spec": {
            "deviceSelector": {"driver": EVICT_DRIVER},
            "taint": {"key": "example.com/broken", "effect": "NoExecute", "evictionsPerSecond": rate},
        },
    }


@dataclass
class Feeder:
    """kube-scheduler's work: pods created so that `backlog` always wait, the oldest bound deleted past `keep` bound."""

    api: Api
    model: KubeSchedulerModel
    backlog: int
    keep: int
    created: dict[str, float] = field(default_factory=dict)
    live: list[str] = field(default_factory=list)  # created, not deleted, oldest first
    errors: dict[str, int] = field(default_factory=dict)
    next_index: int = 0

    async def run(self) -> None:
        while True:
            bound = [k for k in self.live if k in self.model.bound_at]
            for k in bound[: max(0, len(bound) - self.keep)]:
                self.live.remove(k)
                await self._call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{k.partition('/')[2]}", None)
            missing = self.backlog - (len(self.live) - len(bound))
            await asyncio.gather(*(self._create() for _ in range(max(0, missing))))
            await asyncio.sleep(0.02)

    async def _create(self) -> None:
        i = self.next_index
        self.next_index += 1
        key = f"{NAMESPACE}/pod-{i}"
        if await self._call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(i)):
            self.created[key] = time.monotonic()
            self.live.append(key)

    async def _call(self, method: str, path: str, obj: dict[str, Any] | None) -> bool:
        status, answer = await self.api.request(method, path, obj)
        if status >= 300:
            reason = f"{method} HTTP {status}: {str(answer)[:80]}"
            self.errors[reason] = self.errors.get(reason, 0) + 1
            return False
        return True

    def bound_between(self, start: float, end: float) -> int:
        return sum(1 for k, t in self.model.bound_at.items() if start <= t <= end and k in self.created)


async def pods_left(api: httpx.AsyncClient, namespace: str) -> int:
    r = await api.get(f"/api/v1/namespaces/{namespace}/pods", params={"limit": "1"})
    doc = r.json()
    return len(doc["items"]) + int(doc["metadata"].get("remainingItemCount") or 0)


async def wait_pods_gone(api: httpx.AsyncClient, namespace: str, timeout: float = 300) -> float:
    start = time.monotonic()
    while await pods_left(api, namespace):
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"pods of namespace {namespace} still there after {timeout} s")
        await asyncio.sleep(0.25)
    return time.monotonic()


@dataclass
class Phases:
    """The phase windows of one run over the model's samples: /filter latencies, pods/s, each process's CPU."""

    model: KubeSchedulerModel
    feeder: Feeder
    pids: dict[str, int]
    holds: Path | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    async def measure(self, name: str, what: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        s = self.model.stats
        first, errors, failed, rejections = len(s.filter_ms), s.filter_errors, s.failed_binds, s.rejections
        first_prio, first_bind, cycles, model_cpu = len(s.prioritize_ms), len(s.bind_ms), s.cycles, time.process_time()
        cpu = {role: cpu_seconds(pid) for role, pid in self.pids.items()}
        start = time.monotonic()
        extra = await what()
        end = time.monotonic()
        ms = s.filter_ms[first:]
        seconds = end - start
        row: dict[str, Any] = {
            "phase": name,
            "seconds": round(seconds, 2),
            "filter_calls": len(ms),
            "filter_p50_ms": round(pct(ms, 0.5), 2) if ms else None,
            "filter_p99_ms": round(pct(ms, 0.99), 2) if ms else None,
            "filter_max_ms": round(max(ms), 2) if ms else None,
            "filter_errors": s.filter_errors - errors,
            "failed_binds": s.failed_binds - failed,
            "pods_bound": self.feeder.bound_between(start, end),
            "pods_per_second": round(self.feeder.bound_between(start, end) / seconds, 1) if seconds else None,
            "cpu_s": {role: round(cpu_seconds(pid) - cpu[role], 2) for role, pid in self.pids.items()},
            "rejections": s.rejections - rejections,
            "cycles": s.cycles - cycles,
            "prioritize_p99_ms": round(pct(s.prioritize_ms[first_prio:], 0.99), 2) if s.prioritize_ms[first_prio:] else None,
            "bind_p50_ms": round(pct(s.bind_ms[first_bind:], 0.5), 2) if s.bind_ms[first_bind:] else None,
            "bind_p99_ms": round(pct(s.bind_ms[first_bind:], 0.99), 2) if s.bind_ms[first_bind:] else None,
            "model_cpu_s": round(time.process_time() - model_cpu, 2),
            "queue_at_end": self.model.queue.counts(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            **extra,
        }
        if self.holds is not None:
            row.update(holds_between(self.holds, start, end))
        self.rows.append(row)
        print(json.dumps(row), flush=True)


async def drive(
    api_url: str, verbs_url: str, alerts_url: str | None, pids: dict[str, int], a: argparse.Namespace, holds: Path | None
) -> dict[str, Any]:
    """The model kept busy through the phases (only the quiet window against the no-op extender: `alerts_url` None)."""
    async with Api(api_url) as api, httpx.AsyncClient(base_url=api_url, timeout=120) as http:
        model = KubeSchedulerModel(api, verbs_url, SchedulerConfig(), CLAIMS)
        await model.start()
        feeder = Feeder(api, model, backlog=a.backlog, keep=a.keep)
        feeding = asyncio.create_task(feeder.run(), name="feeder")
        phases = Phases(model, feeder, pids, holds)

        async def quiet() -> dict[str, Any]:
            await asyncio.sleep(a.quiet)
            return {}

        async def eviction() -> dict[str, Any]:
            r = await http.post(RULES, json=noexecute_rule(a.evict_rate))
            r.raise_for_status()
            await wait_pods_gone(http, EVICT_NAMESPACE)
            return {}

        try:
            await asyncio.sleep(a.warm_up)  # the claim shape's first verdicts, the feeder's first backlog
            await phases.measure("quiet", quiet)
            await phases.measure("quiet, second window (the noise)", quiet)
            if alerts_url is not None:
                await phases.measure(f"eviction: {EVICTED_PODS} pods evicted", eviction)
                async with httpx.AsyncClient(base_url=alerts_url, timeout=600) as receiver:

                    async def health() -> dict[str, Any]:
                        alerts = [alert(i % a.nodes, i // a.nodes, f"isolation-{i}") for i in range(HEALTH_RULES)]
                        status, delivery_ms, _ = await deliver(receiver, body(alerts))
                        await wait_rules(http, HEALTH_RULES + 1)  # and the eviction phase's rule
                        return {"delivery_status": status, "delivery_ms": round(delivery_ms, 1)}

                    await phases.measure(f"health: {HEALTH_RULES:,} rules written", health)
                await phases.measure(f"after: {HEALTH_RULES:,} devices tainted, nothing running", quiet)
        finally:
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)
            await model.stop()
        st = model.stats
        return {
            "phases": phases.rows,
            "feeder_errors": feeder.errors,
            "scheduling_errors": dict(st.scheduling_errors),
            "bind_errors": dict(st.bind_errors),
            "rejection_reasons": dict(st.rejection_reasons),
        }


def run_layout(layout: str, a: argparse.Namespace) -> dict[str, Any]:
    """One layout (or "no-op", the ceiling) against its own fake API server, seeded alike."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    steal_before = steal_seconds()
    tmp = Path(tempfile.mkdtemp(prefix=f"isolation-{layout}-"))
    token = tmp / "token"
    token.write_text(TOKEN)
    holds = tmp / "holds.jsonl" if a.loop_holds and layout != "no-op" else None
    api_proc, api_url, kubeconfig = start_fake_api(tmp, module="bench.fakeapi_frozen")
    started: list[tuple[Process, Any]] = []
    try:
        with httpx.Client(base_url=api_url, timeout=300) as http:
            seed(http, cluster(a.nodes))
        api_proc.send_signal(signal.SIGUSR1)  # freeze the seeded heap (bench/fakeapi_frozen.py)
        ports = Ports(free_port(), free_port(), free_port())
        if layout == "no-op":
            fmt = {"kubeconfig": str(kubeconfig), "listen": f"127.0.0.1:{ports.verbs}"}
            procs = [Process("no-op", [part.format(**fmt) for part in noop_extender_cmd()], ports.verbs)]
        else:
            procs = processes(layout, kubeconfig, token, ports, holds)
        for p in procs:
            proc, client = start_server(p.cmd, p.ready_port, tmp / f"{p.role}.log", timeout=300)
            client.close()
            started.append((p, proc))
        alerts_url = None if layout == "no-op" else f"http://127.0.0.1:{ports.alerts}"
        if alerts_url is not None:
            with httpx.Client(base_url=alerts_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as receiver:
                while receiver.post("/alerts", content=body([]), headers={"Content-Type": "application/json"}).status_code != 200:
                    time.sleep(0.2)  # 503 while the health controller syncs
        pids = {p.role: proc.pid for p, proc in started}
        cpus = pin_pods(a, started, api_proc.pid)
        import uvloop

        result = uvloop.run(drive(api_url, f"http://127.0.0.1:{ports.verbs}", alerts_url, {**pids, "fake API": api_proc.pid}, a, holds))
        exited = {p.role: proc.returncode for p, proc in started if proc.poll() is not None}
    finally:
        if a.pin:
            pin(os.getpid(), set(range(os.cpu_count() or 1)))
        for _, proc in reversed(started):
            stop_process(proc)
        stop_process(api_proc)
        if os.environ.get("ISOLATION_KEEP_TMP"):
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    steal_after = steal_seconds()
    return {
        "layout": layout,
        "processes": [" ".join(p.cmd).replace(sys.executable, "python").replace(str(tmp), "$TMP") for p, _ in started],
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "steal_s": round(steal_after - steal_before, 2) if steal_before is not None and steal_after is not None else None,
        "exited": exited,
        "cpus": cpus,
        **result,
    }


def side_by_side(report: dict[str, Any]) -> list[str]:
    """Per phase, each layout's /filter p99 and pods/s (and pods/s over its own first quiet window): the comparison at a glance."""
    runs = [r for r in report["runs"] if r["layout"] != "no-op"]
    if not runs:
        return []
    head = "| phase | " + " | ".join(f"{r['layout']}: /filter p99 ms | {r['layout']}: pods/s (vs quiet)" for r in runs) + " |"
    lines = ["", "## The layouts side by side", "", head, "| --- |" + " --- | --- |" * len(runs)]
    for i, ph in enumerate(runs[0]["phases"]):
        cells = []
        for r in runs:
            row, base = r["phases"][i], r["phases"][0]["pods_per_second"]
            ratio = f" ({row['pods_per_second'] / base:.2f}×)" if base and row["pods_per_second"] is not None else ""
            cells.append(f"{row['filter_p99_ms']} | {row['pods_per_second']}{ratio}")
        lines.append(f"| {ph['phase']} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    ceiling = next((r for r in report["runs"] if r["layout"] == "no-op"), None)
    ceiling_pps = ceiling["phases"][0]["pods_per_second"] if ceiling else None
    lines = [
        f"# Isolation: /filter and kube-scheduler's pods/s while the controllers work ({report['when']})",
        "",
        f"`python -m bench.bench_isolation {' '.join(report['argv'])}`. {m['cores']} cores ({m['cpu']}, shared with other work), "
        f"Python {m['python']}; {report['nodes']} nodes x 8 GPUs, {EVICTED_PODS} running pods to evict. "
        "The kube-scheduler model (kubesim.scheduler) keeps a backlog of "
        f"{report['backlog']} pods waiting and deletes the oldest past {report['keep']} bound. {report.get('note', '')}",
        "",
        "pods/s: the model's pods bound in the window per second; /filter: every call the model sent in the window; "
        "CPU: each process's CPU seconds in the window. vs quiet: pods/s over the first quiet window's.",
        *side_by_side(report),
    ]
    for r in report["runs"]:
        lines += [
            "",
            f"## {r['layout']}",
            "",
            f"Load average {r['load_average_before']} before, {r['load_average_after']} after; CPU stolen by the hypervisor "
            f"{r['steal_s']} s. Processes: " + "; ".join(f"`{c}`" for c in r["processes"]) + ".",
            "",
            "| phase | window s | /filter calls | p50 ms | p99 ms | max ms | pods/s | vs quiet | vs no-op | "
            "filter errors / failed binds | CPU s | load average at end | longest verbs-loop hold ms |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        base = r["phases"][0]["pods_per_second"]
        for ph in r["phases"]:
            pps = ph["pods_per_second"]
            vs_quiet = f"{pps / base:.2f}×" if base and pps is not None else "–"
            vs_noop = f"{pps / ceiling_pps:.2f}×" if ceiling_pps and pps is not None else "–"
            cpu = ", ".join(f"{k} {v}" for k, v in ph["cpu_s"].items())
            lines.append(
                f"| {ph['phase']} | {ph['seconds']} | {ph['filter_calls']} | {ph['filter_p50_ms']} | {ph['filter_p99_ms']} | "
                f"{ph['filter_max_ms']} | {pps} | {vs_quiet} | {vs_noop} | {ph['filter_errors']} / {ph['failed_binds']} | {cpu} | "
                f"{ph.get('load_average_at_end', ['–'])[0]} | {ph.get('longest_loop_hold_ms', '–')} |"
            )
        lines += [
            "",
            f"Rejections by reason: {r.get('rejection_reasons') or 'none'}; failed binds by reason: {r.get('bind_errors') or 'none'}; "
            f"scheduling errors: {r['scheduling_errors'] or 'none'}; feeder errors: {r['feeder_errors'] or 'none'}; "
            f"processes that exited: {r['exited'] or 'none'}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:  # the markdown again from bench/results/NAME.json: render NAME
        md = markdown(json.loads((RESULTS / f"{argv[1]}.json").read_text()))
        (RESULTS / f"{argv[1]}.md").write_text(md)
        print(md)
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.bench_isolation", description=__doc__.splitlines()[0])
    p.add_argument(
        "--layouts",
        default=",".join(LAYOUTS if has_controllers_command() else LAYOUTS[:1]),
        help=f"comma-separated, of {', '.join(LAYOUTS)} (default %(default)s: split where the controllers command exists)",
    )
    p.add_argument("--nodes", type=int, default=250, help="nodes of 8 GPUs (at least 125; default %(default)s)")
    p.add_argument("--quiet", type=float, default=10.0, help="seconds of each quiet window (default %(default)s)")
    p.add_argument("--warm-up", type=float, default=5.0, help="seconds of scheduling before the first window (default %(default)s)")
    p.add_argument("--backlog", type=int, default=50, help="pods kept waiting for the scheduler (default %(default)s)")
    p.add_argument("--keep", type=int, default=400, help="bound pods kept; older ones are deleted (default %(default)s)")
    p.add_argument("--evict-rate", type=float, default=100.0, help="the NoExecute rule's evictionsPerSecond (default %(default)s)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the no-op extender's quiet window")
    p.add_argument("--loop-holds", action="store_true", help="run the verbs process under bench/loop_holds.py")
    p.add_argument(
        "--pin",
        action="store_true",
        help="the chart's pods on their own CPUs: the scheduler pod (model + verbs process) on CPU 0, the API server and the controllers on CPU 1",
    )
    p.add_argument("--note", default="", help="a sentence for the markdown")
    p.add_argument("--name", default="isolation", help="results file name under bench/results (default %(default)s)")
    a = p.parse_args(argv)
    layouts = [x.strip() for x in a.layouts.split(",") if x.strip()]
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        p.error(f"--layouts: unknown {unknown}; known: {', '.join(LAYOUTS)}")
    if a.nodes * 8 < HEALTH_RULES:
        p.error(f"--nodes {a.nodes}: {HEALTH_RULES} health alerts need at least {math.ceil(HEALTH_RULES / 8)} nodes")
    report: dict[str, Any] = {
        "when": rfc3339(),
        "argv": argv,
        "machine": machine(),
        "nodes": a.nodes,
        "backlog": a.backlog,
        "keep": a.keep,
        "evictions_per_second": a.evict_rate,
        "note": a.note,
        "pinned": a.pin,
        "runs": [],
    }
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops the processes it started
    for layout in [*layouts, *([] if a.no_ceiling else ["no-op"])]:
        report["runs"].append(run_layout(layout, a))
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{a.name}.json").write_text(dump_json(report))
    md = markdown(report)
    (RESULTS / f"{a.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
