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
  them;
- writes-only (the control): `serve` alone, and a bare client (`replay`
  below, its own process, where the controllers run) that sends the API
  writes the controllers sent in the last split run, each at the same
  offset into its phase: the same evictions, Events, rules and status
  patches, none of the controllers' informers, lists or CPU. Its figures
  are the floor any isolation reaches on this API server: what split loses
  beyond them is the controllers' own cost on the scheduler's path. The
  fake API server's --journal (kubesim/fakeapi/journal.py) records the
  writes, with their User-Agent, in every run.

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
- health: 1,000 firing alerts naming 1,000 GPUs (the first GPUs of every
  node, so that every node keeps some free) delivered to the health
  receiver in --health-deliveries deliveries --health-spacing seconds apart,
  so that the rules are written over a window long enough to count pods/s
  in, until the 1,000 DeviceTaintRules are written;
- after: quiet again, with the 1,000 GPUs tainted (a different cluster from
  the baseline's: /filter skips the tainted GPUs).

The eviction and health windows last at least --window seconds (from the
phase's first write until its work is done, then quiet to the window's
end), the same in every layout. The layouts run --rounds times, every
other round in the reverse order (writes-only always after a split run,
whose writes it replays), so the noise between runs of one layout is
measured too. Each phase reports /filter p50/p99/max (every /filter the
model sent in the window), the model's pods/s (feeder pods bound in the
window per second), each process's CPU and the API requests by component.
The ceiling is the same model against the no-op extender
(kubesim.scheduler.noop) in a quiet window of the same length, in the same
invocation. --pin places the chart's pods on CPUs of their own; --nice runs
the controllers (and the replay) below the API server on their shared CPU.
--profile records the verbs process with py-spy per phase.

    .venv/bin/python -m bench.bench_isolation [--layouts split,writes-only,combined] [--rounds 2] [--pin] [--nice 19] [--name isolation]
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
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

from bench.bench_health import DRIVER as GPU_DRIVER
from bench.bench_health import TOKEN, body, objects
from bench.bench_health_storm import RULES, alert, deliver, holds_between, wait_rules
from bench.common import RESULTS
from bench.kube_scheduler_model import dump_json
from bench.pyspy_summary import summarize
from kubesim.fakeapi import journal
from kubesim.measure import cpu_seconds, machine, pct, steal_seconds
from kubesim.objects import claim, device_class, node_slice, pod
from kubesim.processes import ROOT, free_port, seed, start_fake_api, start_server, stop_process
from kubesim.scheduler import ClaimControllerConfig, KubeSchedulerModel, SchedulerConfig, Workload
from kubesim.scheduler.api import Api
from kubesim.scheduler.config import CLASS, DELETE_PROTECTION, NAMESPACE, SCHEDULER_NAME
from kubesim.scheduler.run import noop_extender_cmd
from kubesim.scheduler.workloads import cluster_objects, pod_object
from tracker.timestamps import rfc3339

LAYOUTS = ("split", "writes-only", "combined")  # a round's order; every other round runs it reversed
HEALTH_RULES = 1_000
EVICTED_PODS = 500
EVICT_NAMESPACE = "evict"
EVICT_DRIVER = "evict.example.com"
EVICT_CLASS = "evict-devices"
# The resourceclaim-controller stand-in fast enough never to cap the run: each pod costs it two writes when
# created and two when deleted (the churn, the evictions), and the run deletes as many pods as it binds.
CLAIMS = ClaimControllerConfig(qps=1000.0, burst=1000)
CLI = [sys.executable, "-m", "dra_extender.cli"]
CONTROLLERS_AGENT = "dra-extender-controllers"  # the controllers command's User-Agent, before the version
REPLAY_AGENT = "isolation-replay"
# Who sent a request, by the User-Agent's program: the commands name themselves (tracker/apiserver/source.py).
AGENT_ROLES = {
    "dra-extender-serve": "serve",
    CONTROLLERS_AGENT: "controllers",
    "dra-extender-all": "all",
    REPLAY_AGENT: "replay",
    "Python": "kube-scheduler model",  # aiohttp's default: kubesim.scheduler.api, the model and its feeder
    "python-httpx": "bench",
}


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


# The roles that stand for the controllers' pod, on CPU 1 with the API server under --pin.
CONTROLLER_SIDE = frozenset({"controllers", "replay"})


def pin_pods(a: argparse.Namespace, started: dict[str, int], api_pid: int) -> dict[str, list[int]] | None:
    """--pin: the chart's pods on their own CPUs. The scheduler pod (kube-scheduler, here the model in this
    process, and the process answering the verbs) gets CPU 0; the API server and the controllers' pod (or the
    replay standing in for it) CPU 1. Without it every process shares every CPU, and what the controllers spend
    is taken from /filter."""
    if not a.pin:
        return None
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin: needs two CPUs")
    sidecar, rest = {0}, {1}
    placed: dict[str, list[int]] = {"bench (kube-scheduler model)": sorted(sidecar), "fake API": sorted(rest)}
    pin(os.getpid(), sidecar)
    pin(api_pid, rest)
    for role, pid in started.items():
        cpus = rest if role in CONTROLLER_SIDE else sidecar
        pin(pid, cpus)
        placed[role] = sorted(cpus)
    return placed


def niced(nice: int, cmd: list[str]) -> list[str]:
    """`cmd` at `nice` (0: as it is): below the API server that shares its CPU under --pin."""
    return ["nice", "-n", str(nice), *cmd] if nice else cmd


def has_controllers_command() -> bool:
    """Whether this dra-extender has `controllers` (issue 40 item 1): the split layout needs it."""
    return importlib.util.find_spec("dra_extender.controllers") is not None


def processes(layout: str, kubeconfig: Path, token_file: Path, ports: Ports, holds: Path | None, nice: int = 0) -> list[Process]:
    """The processes of a layout (--standalone: the only replica, no Lease), the one place their commands are written.

    combined is `dra-extender all` (the verbs and the controllers in one process), or `serve` where the
    controllers command does not exist yet (serve ran the controllers until issue 40); writes-only is `serve`
    alone (its replay is started apart, `Replay`). With `holds`, the process answering the verbs runs under
    bench/loop_holds.py, which records every late wake-up of its loop. `nice` applies to the controllers.
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
    if layout in ("split", "writes-only") and not split:
        raise SystemExit(f"--layouts {layout}: this dra-extender has no `controllers` command yet (issue 40 item 1)")
    if layout == "split":
        controllers = niced(nice, [*CLI, "controllers", *common, "--listen", f"127.0.0.1:{ports.controllers}", *alerts])
        return [verbs_process("serve"), Process("controllers", controllers, ports.controllers)]
    if layout == "writes-only":
        return [verbs_process("serve")]
    raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")


def rounds(layouts: list[str], count: int) -> list[str]:
    """The runs in order: `layouts`, then reversed, alternately, `count` times; writes-only needs a split run before it."""
    order = [x for r in range(count) for x in (layouts if r % 2 == 0 else layouts[::-1])]
    first_split = order.index("split") if "split" in order else len(order)
    if "writes-only" in order and order.index("writes-only") < first_split:
        raise ValueError("--layouts: writes-only replays the writes of a split run, so split must come before it")
    return order


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


# ---------------------------------------------------------------------- the journal: who asked the API server what, per phase


def role_of(agent: str) -> str:
    program = agent.split("/", 1)[0]
    return AGENT_ROLES.get(program, program or "unknown")


def in_phase(entries: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in entries if row["t0"] <= e["at"] < row["t1"]]


def requests_by_role(entries: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per component, its requests (watches not counted: one long request each) by `METHOD resource`, most first."""
    out: dict[str, Counter[str]] = {}
    for e in entries:
        if e["verb"] != "watch":
            out.setdefault(role_of(e["user_agent"]), Counter())[f"{e['method']} {e['resource']}"] += 1
    return {role: dict(c.most_common()) for role, c in sorted(out.items())}


Trace = dict[str, list[list[Any]]]  # phase -> [offset s, method, path, query, content type, body], by offset


def controller_writes(entries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[Trace, int]:
    """The controllers' writes of each phase at their offsets into it (what writes-only replays), and how many
    of their writes fell outside every phase (at start-up, between phases: not replayed)."""
    writes = [e for e in entries if e["method"] in journal.WRITE_METHODS and role_of(e["user_agent"]) == "controllers"]
    trace: Trace = {}
    placed = 0
    for row in rows:
        mine = in_phase(writes, row)
        placed += len(mine)
        trace[row["phase"]] = [[e["at"] - row["t0"], e["method"], e["path"], e["query"], e["content_type"], e["body"]] for e in mine]
    return trace, len(writes) - placed


class Replay:
    """The writes-only control's bare client: `python -m bench.bench_isolation replay URL TRACE`, its own process
    (where the controllers run, at their nice), told each phase's start on stdin; its tally on stdout at the end."""

    def __init__(self, api_url: str, trace: Trace, tmp: Path, nice: int) -> None:
        path = tmp / "trace.json"
        path.write_bytes(orjson.dumps(trace))
        self.cmd = niced(nice, [sys.executable, "-m", "bench.bench_isolation", "replay", api_url, str(path)])
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def phase(self, name: str, start: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{start}\t{name}\n")
        self.proc.stdin.flush()

    def finish(self) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=120)
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


async def phase_starts() -> AsyncIterator[tuple[str, float]]:
    """`Replay.phase`'s lines on stdin: (phase, its start on the monotonic clock), until stdin closes."""
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        start, name = line.decode().rstrip("\n").split("\t", 1)
        yield name, float(start)


async def replay(api_url: str, trace: Trace, starts: AsyncIterator[tuple[str, float]]) -> dict[str, Any]:
    """Each phase's writes at their offsets from its start; per phase, the answers and how late each was sent."""
    tally: dict[str, dict[str, Any]] = {}
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector, headers={"User-Agent": f"{REPLAY_AGENT}/1"}) as session:

        async def send(phase: dict[str, Any], method: str, path: str, query: dict[str, str], ctype: str, data: Any) -> None:
            body = orjson.dumps(data) if data is not None else None
            headers = {"Content-Type": ctype or "application/json"}
            async with session.request(method, api_url + path, params=query, data=body, headers=headers) as r:
                await r.read()
                phase["status"][str(r.status)] += 1

        async def run_phase(name: str, start: float) -> None:
            phase: dict[str, Any] = {"sent": 0, "status": Counter(), "late_ms": []}
            tally[name] = phase
            pending = []
            for offset, method, path, query, ctype, data in trace.get(name, []):
                await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
                phase["late_ms"].append((time.monotonic() - start - offset) * 1000)
                phase["sent"] += 1
                pending.append(asyncio.create_task(send(phase, method, path, query, ctype, data)))
            await asyncio.gather(*pending)

        phases = [asyncio.create_task(run_phase(name, start)) async for name, start in starts]
        await asyncio.gather(*phases)
    return {
        name: {
            "sent": t["sent"],
            "status": dict(t["status"]),
            "late_ms_p99": round(pct(t["late_ms"], 0.99), 1),
            "late_ms_max": round(max(t["late_ms"], default=0.0), 1),
        }
        for name, t in tally.items()
    }


# ---------------------------------------------------------------------- py-spy, per phase


class Profile:
    """--profile: py-spy records the verbs process from each phase's start to its end (--nonblocking: never paused)."""

    def __init__(self, pid: int, tmp: Path, rate: int = 50) -> None:
        self.pid, self.tmp, self.rate = pid, tmp, rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: Path | None = None
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            raise SystemExit("--profile: py-spy is not installed (.venv/bin/python -m pip install py-spy)")
        self.exe = exe

    def start(self, name: str, _start: float) -> None:
        self.out = self.tmp / f"pyspy-{len(list(self.tmp.glob('pyspy-*')))}.txt"
        cmd = [
            self.exe,
            "record",
            "--pid",
            str(self.pid),
            "--nonblocking",
            "--format",
            "raw",
            "--rate",
            str(self.rate),
            "-o",
            str(self.out),
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, Any]:
        if self.proc is None or self.out is None:
            return {}
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        self.proc = None
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return {"profile": {"by_part": by_part(lines), "top": summarize(lines, 12).splitlines()}}


# What the verbs process spends its CPU on, by the first matching part (py-spy names a repository frame
# `function (extender/...)`). A sample whose innermost Python frame is an event loop's own (uvloop's C code: its
# I/O and timers, or waiting, which --nonblocking cannot always tell apart) is counted as the loops'.
LOOPS = ("Runner.run (asyncio/runners.py)", "HttpServers._run (serving/http_thread.py)")
PARTS = (
    ("verbs (/filter, /prioritize, /bind)", ("(extender/",)),
    ("HTTP serving", ("(serving/", "(uvicorn/", "(h11/")),
    ("watch events (informers, tracker state)", ("(tracker/", "(kubernetes_asyncio/", "(aiohttp/")),
    ("the verbs' hand-off between the HTTP thread and the loop", ("_chain_future",)),  # run_coroutine_threadsafe
)


def by_part(lines: list[str]) -> dict[str, float]:
    """Share of the samples per part (LOOPS, PARTS, else "other": GC, logging, the rest)."""
    counts: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        if stack.rsplit(";", 1)[-1].rsplit(":", 1)[0] + ")" in LOOPS:  # the innermost frame, its line number dropped
            part = "event loops' own (uvloop's C code or waiting)"
        else:
            part = next((name for name, marks in PARTS if any(m in stack for m in marks)), "other")
        counts[part] += int(n)
    return {part: round(100 * c / total, 1) for part, c in counts.most_common()} | {"samples": total} if total else {}


# ---------------------------------------------------------------------- the scheduler's side


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
class Hooks:
    """What else a run does per phase: `on_start` hears each phase's name and start (the replay, py-spy), `on_end`
    adds to its row, `holds` is bench/loop_holds.py's file for --loop-holds."""

    holds: Path | None = None
    on_start: list[Callable[[str, float], None]] = field(default_factory=list)
    on_end: list[Callable[[], dict[str, Any]]] = field(default_factory=list)


@dataclass
class Phases:
    """The phase windows of one run over the model's samples: /filter latencies, pods/s, each process's CPU."""

    model: KubeSchedulerModel
    feeder: Feeder
    pids: dict[str, int]
    hooks: Hooks
    rows: list[dict[str, Any]] = field(default_factory=list)

    async def measure(self, name: str, what: Callable[[], Awaitable[dict[str, Any]]], window: float = 0.0) -> None:
        """The phase: `what` until its work is done, then quiet until `window` seconds have passed since its start."""
        s = self.model.stats
        first, errors, failed, rejections = len(s.filter_ms), s.filter_errors, s.failed_binds, s.rejections
        first_prio, first_bind, cycles, model_cpu = len(s.prioritize_ms), len(s.bind_ms), s.cycles, time.process_time()
        cpu = {role: cpu_seconds(pid) for role, pid in self.pids.items()}
        start = time.monotonic()
        for hook in self.hooks.on_start:
            hook(name, start)
        extra = await what()
        done = time.monotonic()
        await asyncio.sleep(max(0.0, start + window - done))
        end = time.monotonic()
        ms = s.filter_ms[first:]
        seconds = end - start
        cpu_s = {role: round(cpu_seconds(pid) - cpu[role], 2) for role, pid in self.pids.items()}
        row: dict[str, Any] = {
            "phase": name,
            "seconds": round(seconds, 2),
            "active_s": round(done - start, 2),
            "t0": start,
            "t1": end,
            "filter_calls": len(ms),
            "filter_p50_ms": round(pct(ms, 0.5), 2) if ms else None,
            "filter_p99_ms": round(pct(ms, 0.99), 2) if ms else None,
            "filter_max_ms": round(max(ms), 2) if ms else None,
            "filter_errors": s.filter_errors - errors,
            "failed_binds": s.failed_binds - failed,
            "pods_bound": self.feeder.bound_between(start, end),
            "pods_per_second": round(self.feeder.bound_between(start, end) / seconds, 1) if seconds else None,
            "cpu_s": cpu_s,
            "cpu_per_s": {role: round(c / seconds, 3) for role, c in cpu_s.items()} if seconds else {},
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
        for add in self.hooks.on_end:
            row.update(add())
        if self.hooks.holds is not None:
            row.update(holds_between(self.hooks.holds, start, end))
        self.rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)


EVICTION = f"eviction: {EVICTED_PODS} pods evicted"
HEALTH = f"health: {HEALTH_RULES:,} rules written"


async def drive(
    api_url: str, verbs_url: str, alerts_url: str | None, layout: str, pids: dict[str, int], a: argparse.Namespace, hooks: Hooks
) -> dict[str, Any]:
    """The model kept busy through the phases (only the quiet windows against the no-op extender)."""
    async with Api(api_url) as api, httpx.AsyncClient(base_url=api_url, timeout=120) as http:
        model = KubeSchedulerModel(api, verbs_url, SchedulerConfig(), CLAIMS)
        await model.start()
        feeder = Feeder(api, model, backlog=a.backlog, keep=a.keep)
        feeding = asyncio.create_task(feeder.run(), name="feeder")
        phases = Phases(model, feeder, pids, hooks)

        async def quiet() -> dict[str, Any]:
            await asyncio.sleep(a.quiet)
            return {}

        async def eviction() -> dict[str, Any]:
            r = await http.post(RULES, json=noexecute_rule(a.evict_rate))
            r.raise_for_status()
            await wait_pods_gone(http, EVICT_NAMESPACE, timeout=120)
            return {}

        async def health() -> dict[str, Any]:
            """The alerts in --health-deliveries deliveries --health-spacing s apart (writes-only: the replay writes the rules)."""
            deliveries: list[tuple[int, float]] = []
            if alerts_url is not None:
                alerts = [alert(i % a.nodes, i // a.nodes, f"isolation-{i}") for i in range(HEALTH_RULES)]
                size = math.ceil(HEALTH_RULES / a.health_deliveries)
                start = time.monotonic()
                async with httpx.AsyncClient(base_url=alerts_url, timeout=600) as receiver:
                    for k in range(a.health_deliveries):
                        await asyncio.sleep(max(0.0, start + k * a.health_spacing - time.monotonic()))
                        status, delivery_ms, _ = await deliver(receiver, body(alerts[k * size : (k + 1) * size]))
                        deliveries.append((status, delivery_ms))
            await wait_rules(http, HEALTH_RULES + 1, timeout=180)  # and the eviction phase's rule
            return {
                "delivery_status": sorted({st for st, _ in deliveries}),
                "delivery_ms_max": round(max((ms for _, ms in deliveries), default=0.0), 1),
            }

        try:
            await asyncio.sleep(a.warm_up)  # the claim shape's first verdicts, the feeder's first backlog
            await phases.measure("quiet", quiet)
            await phases.measure("quiet, second window (the noise)", quiet)
            if layout != "no-op":
                await phases.measure(EVICTION, eviction, a.window)
                await phases.measure(HEALTH, health, a.window)
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


def run_layout(layout: str, a: argparse.Namespace, trace: Trace | None) -> tuple[dict[str, Any], Trace | None]:
    """One layout (or "no-op", the ceiling) against its own fake API server, seeded alike; with the controllers'
    writes of a split run (what the next writes-only replays)."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    steal_before = steal_seconds()
    tmp = Path(tempfile.mkdtemp(prefix=f"isolation-{layout}-"))
    token = tmp / "token"
    token.write_text(TOKEN)
    holds = tmp / "holds.jsonl" if a.loop_holds and layout != "no-op" else None
    journal_path = tmp / "journal.jsonl"
    api_proc, api_url, kubeconfig = start_fake_api(tmp, "--journal", str(journal_path), module="bench.fakeapi_frozen")
    started: list[tuple[Process, Any]] = []
    replayer: Replay | None = None
    profile: Profile | None = None
    try:
        with httpx.Client(base_url=api_url, timeout=300) as http:
            seed(http, cluster(a.nodes))
        api_proc.send_signal(signal.SIGUSR1)  # freeze the seeded heap (bench/fakeapi_frozen.py)
        ports = Ports(free_port(), free_port(), free_port())
        if layout == "no-op":
            fmt = {"kubeconfig": str(kubeconfig), "listen": f"127.0.0.1:{ports.verbs}"}
            procs = [Process("no-op", [part.format(**fmt) for part in noop_extender_cmd()], ports.verbs)]
        else:
            procs = processes(layout, kubeconfig, token, ports, holds, a.nice)
        for p in procs:
            proc, client = start_server(p.cmd, p.ready_port, tmp / f"{p.role}.log", timeout=300)
            client.close()
            started.append((p, proc))
        alerts_url = f"http://127.0.0.1:{ports.alerts}" if layout in ("combined", "split") else None
        if alerts_url is not None:
            with httpx.Client(base_url=alerts_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as receiver:
                while receiver.post("/alerts", content=body([]), headers={"Content-Type": "application/json"}).status_code != 200:
                    time.sleep(0.2)  # 503 while the health controller syncs
        pids = {p.role: proc.pid for p, proc in started}
        hooks = Hooks(holds)
        if layout == "writes-only":
            if trace is None:
                raise SystemExit("writes-only: no split run before it to replay")
            replayer = Replay(api_url, trace, tmp, a.nice)
            pids["replay"] = replayer.proc.pid
            hooks.on_start.append(replayer.phase)
        if a.profile and layout != "no-op":
            profile = Profile(pids[procs[0].role], tmp)
            hooks.on_start.append(profile.start)
            hooks.on_end.append(profile.stop)
        cpus = pin_pods(a, pids, api_proc.pid)
        import uvloop

        result = uvloop.run(
            drive(api_url, f"http://127.0.0.1:{ports.verbs}", alerts_url, layout, {**pids, "fake API": api_proc.pid}, a, hooks)
        )
        if replayer is not None:
            result["replay"] = replayer.finish()
        exited = {p.role: proc.returncode for p, proc in started if proc.poll() is not None}
    finally:
        if a.pin:
            pin(os.getpid(), set(range(os.cpu_count() or 1)))
        if replayer is not None and replayer.proc.poll() is None:
            replayer.proc.kill()
        for _, proc in reversed(started):
            stop_process(proc)
        stop_process(api_proc)  # it writes the journal as it stops
        entries = journal.read(journal_path) if journal_path.exists() else []
        if os.environ.get("ISOLATION_KEEP_TMP"):
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for row in result["phases"]:
        row["api_requests"] = requests_by_role(in_phase(entries, row))
    next_trace, unplaced = controller_writes(entries, result["phases"]) if layout == "split" else (trace, 0)
    steal_after = steal_seconds()
    commands = [p.cmd for p, _ in started] + ([replayer.cmd] if replayer is not None else [])
    return {
        "layout": layout,
        "processes": [" ".join(c).replace(sys.executable, "python").replace(str(tmp), "$TMP") for c in commands],
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "steal_s": round(steal_after - steal_before, 2) if steal_before is not None and steal_after is not None else None,
        "exited": exited,
        "cpus": cpus,
        **({"controller_writes_outside_phases": unplaced} if layout == "split" else {}),
        **result,
    }, next_trace


# ---------------------------------------------------------------------- the report


def ratio(row: dict[str, Any], base: dict[str, Any]) -> str:
    pps, b = row["pods_per_second"], base["pods_per_second"]
    return f"{pps / b:.2f}×" if b and pps is not None else "–"


def verbs_cpu(row: dict[str, Any]) -> str:
    per_s = row.get("cpu_per_s", {})
    return f"{per_s.get('serve', per_s.get('all', '–'))} / {per_s.get('fake API', '–')}"


CELLS: tuple[tuple[str, Callable[[dict[str, Any], dict[str, Any]], str]], ...] = (
    ("pods/s (× the run's first quiet window)", lambda row, base: f"{row['pods_per_second']} ({ratio(row, base)})"),
    ("/filter p99 ms", lambda row, base: f"{row['filter_p99_ms']}"),
    ("CPU s per s: the verbs process / the fake API server", lambda row, base: verbs_cpu(row)),
)


def side_by_side(report: dict[str, Any]) -> list[str]:
    """Per phase and run, pods/s over the run's first quiet window, /filter p99 and the CPU per second: at a glance."""
    runs = [r for r in report["runs"] if r["layout"] != "no-op"]
    if not runs:
        return []
    names = [f"{r['layout']} #{r.get('round', 1)}" for r in runs]
    lines = ["", "## The runs side by side", ""]
    for title, cell in CELLS:
        lines += [f"**{title}**", "", "| phase | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(runs)]
        for i, ph in enumerate(runs[0]["phases"]):
            lines.append(f"| {ph['phase']} | " + " | ".join(cell(r["phases"][i], r["phases"][0]) for r in runs) + " |")
        lines.append("")
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
        "CPU: each process's CPU seconds in the window. vs quiet: pods/s over the run's first quiet window's. "
        f"Load average at the start {report.get('load_average_start', '–')}, at the end {report.get('load_average_end', '–')}.",
        *side_by_side(report),
    ]
    for r in report["runs"]:
        lines += [
            "",
            f"## {r['layout']} #{r.get('round', 1)}",
            "",
            f"Load average {r['load_average_before']} before, {r['load_average_after']} after; CPU stolen by the hypervisor "
            f"{r['steal_s']} s; CPUs {r.get('cpus') or 'all'}. Processes: " + "; ".join(f"`{c}`" for c in r["processes"]) + ".",
            "",
            "| phase | window s (active) | /filter calls | p50 ms | p99 ms | max ms | pods/s | vs quiet | vs no-op | "
            "filter errors / failed binds | CPU s | load average at end | longest verbs-loop hold ms |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        base = r["phases"][0]
        for ph in r["phases"]:
            pps = ph["pods_per_second"]
            vs_noop = f"{pps / ceiling_pps:.2f}×" if ceiling_pps and pps is not None else "–"
            cpu = ", ".join(f"{k} {v}" for k, v in ph["cpu_s"].items())
            lines.append(
                f"| {ph['phase']} | {ph['seconds']} ({ph.get('active_s', '–')}) | {ph['filter_calls']} | {ph['filter_p50_ms']} | "
                f"{ph['filter_p99_ms']} | {ph['filter_max_ms']} | {pps} | {ratio(ph, base)} | {vs_noop} | "
                f"{ph['filter_errors']} / {ph['failed_binds']} | {cpu} | "
                f"{ph.get('load_average_at_end', ['–'])[0]} | {ph.get('longest_loop_hold_ms', '–')} |"
            )
        writers = {
            ph["phase"]: {
                role: sum(n for k, n in reqs.items() if not k.startswith("GET")) for role, reqs in ph.get("api_requests", {}).items()
            }
            for ph in r["phases"]
        }
        lines += [
            "",
            "API writes by component per phase: " + "; ".join(f"{p}: {json.dumps(w)}" for p, w in writers.items()) + ".",
            "",
            f"Rejections by reason: {r.get('rejection_reasons') or 'none'}; failed binds by reason: {r.get('bind_errors') or 'none'}; "
            f"scheduling errors: {r['scheduling_errors'] or 'none'}; feeder errors: {r['feeder_errors'] or 'none'}; "
            f"processes that exited: {r['exited'] or 'none'}.",
        ]
        if "replay" in r:
            lines += ["", f"Replayed (answers, lateness against the split run's times): {json.dumps(r['replay'])}."]
        if "controller_writes_outside_phases" in r:
            lines += ["", f"Controllers' writes outside the phases (not replayed): {r['controller_writes_outside_phases']}."]
        profiled = [(ph["phase"], ph["profile"]) for ph in r["phases"] if ph.get("profile")]
        if profiled:
            lines += ["", "py-spy, the verbs process, share of samples by part: "]
            lines += [f"- {name}: {json.dumps(prof['by_part'])}" for name, prof in profiled]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:  # the markdown again from bench/results/NAME.json: render NAME
        md = markdown(json.loads((RESULTS / f"{argv[1]}.json").read_text()))
        (RESULTS / f"{argv[1]}.md").write_text(md)
        print(md)
        return 0
    if argv[:1] == ["replay"]:  # the writes-only control's client: replay URL TRACE (see Replay)
        import uvloop

        recorded: Trace = orjson.loads(Path(argv[2]).read_bytes())
        print(json.dumps(uvloop.run(replay(argv[1], recorded, phase_starts()))), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.bench_isolation", description=__doc__.splitlines()[0])
    p.add_argument(
        "--layouts",
        default=",".join(LAYOUTS if has_controllers_command() else ("combined",)),
        help=f"comma-separated, of {', '.join(LAYOUTS)}, in a round's order (default %(default)s: all where the controllers command exists)",
    )
    p.add_argument("--rounds", type=int, default=2, help="runs of every layout, every other round reversed (default %(default)s)")
    p.add_argument("--nodes", type=int, default=250, help="nodes of 8 GPUs (at least 125; default %(default)s)")
    p.add_argument("--quiet", type=float, default=10.0, help="seconds of each quiet window (default %(default)s)")
    p.add_argument("--window", type=float, default=10.0, help="the least seconds of the eviction and health windows (default %(default)s)")
    p.add_argument("--warm-up", type=float, default=5.0, help="seconds of scheduling before the first window (default %(default)s)")
    p.add_argument("--backlog", type=int, default=50, help="pods kept waiting for the scheduler (default %(default)s)")
    p.add_argument("--keep", type=int, default=400, help="bound pods kept; older ones are deleted (default %(default)s)")
    p.add_argument("--evict-rate", type=float, default=100.0, help="the NoExecute rule's evictionsPerSecond (default %(default)s)")
    p.add_argument("--health-deliveries", type=int, default=10, help="deliveries the 1,000 alerts are split into (default %(default)s)")
    p.add_argument("--health-spacing", type=float, default=1.0, help="seconds between two deliveries (default %(default)s)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the no-op extender's quiet windows")
    p.add_argument("--loop-holds", action="store_true", help="run the verbs process under bench/loop_holds.py")
    p.add_argument("--profile", action="store_true", help="py-spy records the verbs process per phase (perturbs the run: not for figures)")
    p.add_argument(
        "--pin",
        action="store_true",
        help="the chart's pods on their own CPUs: the scheduler pod (model + verbs process) on CPU 0, the API server and the controllers on CPU 1",
    )
    p.add_argument("--nice", type=int, default=0, help="niceness of the controllers (and the replay) (default %(default)s)")
    p.add_argument("--note", default="", help="a sentence for the markdown")
    p.add_argument("--name", default="isolation", help="results file name under bench/results (default %(default)s)")
    a = p.parse_args(argv)
    layouts = [x.strip() for x in a.layouts.split(",") if x.strip()]
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        p.error(f"--layouts: unknown {unknown}; known: {', '.join(LAYOUTS)}")
    if a.nodes * 8 < HEALTH_RULES:
        p.error(f"--nodes {a.nodes}: {HEALTH_RULES} health alerts need at least {math.ceil(HEALTH_RULES / 8)} nodes")
    if a.rounds < 1 or a.health_deliveries < 1 or not 0 <= a.nice <= 19:
        p.error("--rounds and --health-deliveries: at least 1; --nice: 0 to 19")
    try:
        order = rounds(layouts, a.rounds)
    except ValueError as e:
        p.error(str(e))
    report: dict[str, Any] = {
        "when": rfc3339(),
        "argv": argv,
        "machine": machine(),
        "nodes": a.nodes,
        "backlog": a.backlog,
        "keep": a.keep,
        "evictions_per_second": a.evict_rate,
        "health_deliveries": a.health_deliveries,
        "health_spacing_s": a.health_spacing,
        "window_s": a.window,
        "nice": a.nice,
        "note": a.note,
        "pinned": a.pin,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "runs": [],
    }
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops the processes it started
    trace: Trace | None = None
    seen: Counter[str] = Counter()
    for layout in [*order, *([] if a.no_ceiling else ["no-op"])]:
        seen[layout] += 1
        run, trace = run_layout(layout, a, trace)
        report["runs"].append({"round": seen[layout], **run})
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{a.name}.json").write_text(dump_json(report))
    md = markdown(report)
    (RESULTS / f"{a.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
