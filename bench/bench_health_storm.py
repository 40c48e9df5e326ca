"""An alert storm at the health controller, and /filter beside it, over HTTP as kube-scheduler and Alertmanager call them.

The fake API server runs as its own process with N nodes of 8 GPUs and one
DeviceHealthPolicy; `dra-extender serve` runs as its own process (under
bench/loop_holds.py, which records every time its main event loop was held
more than 5 ms); this process plays kube-scheduler, calling /filter (a pod
without claims over every node) one call after another 10 ms apart, and
Alertmanager, POSTing deliveries to the receiver. Cases:

- one delivery of 5,000, 10,000 and 20,000 alerts with distinct fingerprints
  naming one device (issue 39, row 4: 0.75, 3.2 and 10.9 s before, /filter
  blocked for up to 10.8 s);
- the storm: the 20,000-fingerprint delivery and one of 1,000 alerts naming
  1,000 other devices at once, until those 1,001 DeviceTaintRules are written.

For each: the delivery's answer time, /filter p50/p99/max meanwhile, and the
longest hold of the extender's event loop. Targets: no hold over 50 ms,
every /filter within 100 ms.

    .venv/bin/python -m bench.bench_health_storm [--nodes N]

Writes bench/results/health-storm.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.bench_health import TOKEN, body, objects
from kubesim.measure import pct
from kubesim.processes import free_port, seed, start_fake_api, start_server, stop_process
from tracker.timestamps import rfc3339

RESULTS = Path(__file__).resolve().parent / "results"
HOLD_LIMIT_MS = 50.0
FILTER_LIMIT_MS = 100.0
SIZES = (5_000, 10_000, 20_000)
RULES = "/apis/resource.dra-extender.io/v1alpha1/devicetaintrules"


def alert(n: int, gpu: int, fingerprint: str) -> dict[str, Any]:
    name = f"node-{n:04d}"
    return {
        "status": "firing",
        "labels": {"alertname": "GPUXid", "Hostname": name, "UUID": f"GPU-{name}-{gpu}", "pid": fingerprint},
        "annotations": {"summary": f"XID on {name} GPU {gpu}"},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": fingerprint,
    }


def one_device(n: int, gpu: int, size: int) -> bytes:
    return body([alert(n, gpu, f"{gpu:02x}{i:014x}") for i in range(size)])


class Scheduler:
    """kube-scheduler's side: /filter one call after another, 10 ms apart, each timed (monotonic start, ms)."""

    def __init__(self, port: int, nodes: int) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        self.body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"node-{n:04d}" for n in range(nodes)]})
        self.client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
        self.calls: list[tuple[float, float]] = []
        self.errors = 0

    async def run(self) -> None:
        while True:
            start = time.monotonic()
            r = await self.client.post("/filter", content=self.body, headers={"Content-Type": "application/json"})
            self.calls.append((start, (time.monotonic() - start) * 1000))
            if r.status_code != 200:
                self.errors += 1
            await asyncio.sleep(0.01)

    def between(self, start: float, end: float) -> dict[str, Any]:
        ms = [m for t, m in self.calls if start <= t <= end]
        if not ms:
            return {"filter_calls": 0}
        return {
            "filter_calls": len(ms),
            "filter_p50_ms": round(pct(ms, 0.5), 2),
            "filter_p99_ms": round(pct(ms, 0.99), 2),
            "filter_max_ms": round(max(ms), 2),
            "filter_over_100ms": sum(1 for m in ms if m > FILTER_LIMIT_MS),
        }


def holds_between(path: Path, start: float, end: float) -> dict[str, Any]:
    """The extender's event-loop holds (over 5 ms) recorded in [start, end].

    Under uvloop (the production loop) each is a late wake-up of the probe: wall time, whatever held the loop
    (a callback, the HTTP thread's GIL, another process on the CPU). With --attribute each is one callback on
    asyncio's loop, with its CPU time and what it ran: the health controller's own work is told apart.
    """
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    rows = [r for r in rows if start <= r["at"] <= end]
    out: dict[str, Any] = {
        "loop_holds_over_5ms": len(rows),
        "longest_loop_hold_ms": max((r["ms"] for r in rows), default=0.0),
    }
    timed = [(float(r["callback"].split()[1]), r["ms"], r["callback"]) for r in rows if r.get("callback", "").startswith("cpu ")]
    if timed:
        health = [t for t in timed if "HealthController" in t[2]]
        out["longest_cpu_hold_ms"] = max(t[0] for t in timed)
        out["longest_health_hold_cpu_ms"] = max((t[0] for t in health), default=0.0)
        out["longest_health_hold_wall_ms"] = max((t[1] for t in health), default=0.0)
        out["top_cpu_holds"] = [f"{wall:.1f} ms wall, {what}"[:400] for _, wall, what in sorted(timed, reverse=True)[:5]]
    return out


async def rules_written(api: httpx.AsyncClient) -> int:
    """Every DeviceTaintRule here is the controller's; without a selector the server counts the rest of a page of 1."""
    r = await api.get(RULES, params={"limit": "1"})
    doc = r.json()
    return len(doc["items"]) + int(doc["metadata"].get("remainingItemCount") or 0)


async def deliver(alerts: httpx.AsyncClient, data: bytes) -> tuple[int, float, dict[str, Any]]:
    start = time.monotonic()
    r = await alerts.post("/alerts", content=data, headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    return r.status_code, (time.monotonic() - start) * 1000, r.json()


async def wait_rules(api: httpx.AsyncClient, want: int, timeout: float = 300) -> float:
    start = time.monotonic()
    while await rules_written(api) < want:
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{want} rules not written after {timeout} s")
        await asyncio.sleep(0.25)
    return time.monotonic()


async def run(nodes: int, sizes: tuple[int, ...] = SIZES, attribute: bool = False) -> dict[str, Any]:
    load_before = list(os.getloadavg())
    tmp = Path(tempfile.mkdtemp(prefix="health-storm-"))
    (tmp / "token").write_text(TOKEN)
    holds = tmp / "holds.jsonl"
    api_proc, url, kubeconfig = start_fake_api(tmp, module="bench.fakeapi_frozen")
    ext_proc = None
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            seed(http, objects(nodes))  # bench_health's cluster: N nodes of 8 GPUs, one policy with an alert rule
        api_proc.send_signal(signal.SIGUSR1)  # freeze the seeded heap (bench/fakeapi_frozen.py)
        port, alerts_port = free_port(), free_port()
        cmd = [sys.executable, "-m", "bench.loop_holds", "--out", str(holds), *(["--attribute"] if attribute else []), "--"]
        cmd += ["all", "--kubeconfig", str(kubeconfig)]  # the one-process layout: the delivery on /filter's loop
        cmd += ["--standalone", "--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
        cmd += ["--alerts-listen", f"127.0.0.1:{alerts_port}", "--alerts-token-file", str(tmp / "token")]
        ext_proc, _ = start_server(cmd, port, tmp / "extender.log")
        api = httpx.AsyncClient(base_url=url, timeout=120)
        receiver = httpx.AsyncClient(base_url=f"http://127.0.0.1:{alerts_port}", timeout=600)
        while (await deliver(receiver, body([])))[0] != 200:  # 503 while the controller syncs
            await asyncio.sleep(0.2)
        sched = Scheduler(port, nodes)
        filtering = asyncio.create_task(sched.run())
        await asyncio.sleep(3)
        ref = time.monotonic()
        await asyncio.sleep(3)
        results: list[dict[str, Any]] = [
            {"case": "/filter alone (reference)", **sched.between(ref, time.monotonic()), **holds_between(holds, ref, time.monotonic())}
        ]
        written = 0
        for gpu, size in enumerate(sizes):
            data = one_device(0, gpu, size)
            start = time.monotonic()
            status, ms, answer = await deliver(receiver, data)
            print(f"{size} alerts: {status} {answer} in {ms:.0f} ms", flush=True)
            written += 1
            end = await wait_rules(api, written)
            await asyncio.sleep(1)
            results.append(
                {
                    "case": f"one delivery of {size:,} fingerprints naming one device",
                    "status": status,
                    "answer": answer,
                    "delivery_ms": round(ms, 1),
                    "rule_written_after_ms": round((end - start) * 1000, 1),
                    **sched.between(start, end + 1),
                    **holds_between(holds, start, end + 1),
                }
            )
        storm = one_device(0, 7, 20_000)
        spread = body([alert(1 + i // 8, i % 8, f"spread-{i}") for i in range(1000)])
        start = time.monotonic()
        (s1, ms1, a1), (s2, ms2, a2) = await asyncio.gather(deliver(receiver, storm), deliver(receiver, spread))
        written += 1001
        end = await wait_rules(api, written)
        await asyncio.sleep(1)
        results.append(
            {
                "case": "the storm: 20,000 fingerprints on one device and 1,000 alerts on 1,000 devices at once, until their 1,001 rules are written",
                "status": [s1, s2],
                "answer": [a1, a2],
                "delivery_ms": [round(ms1, 1), round(ms2, 1)],
                "rules_written_after_ms": round((end - start) * 1000, 1),
                **sched.between(start, end + 1),
                **holds_between(holds, start, end + 1),
            }
        )
        filtering.cancel()
        await asyncio.gather(filtering, return_exceptions=True)
        for c in (api, receiver, sched.client):
            await c.aclose()
        filter_errors = sched.errors
    finally:
        if ext_proc is not None:
            stop_process(ext_proc)
        stop_process(api_proc)
    return {
        "loop": "asyncio, each callback timed (--attribute)" if attribute else "uvloop (production), late wake-ups of a 1 ms probe",
        "when": rfc3339(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "nodes": nodes,
        "devices": nodes * 8,
        "hold_limit_ms": HOLD_LIMIT_MS,
        "filter_limit_ms": FILTER_LIMIT_MS,
        "filter_errors": filter_errors,
        "load_average_before": load_before,
        "load_average": list(os.getloadavg()),
        "results": results,
    }


def table(report: dict[str, Any]) -> list[str]:
    attributed = "longest_health_hold_cpu_ms" in report["results"][-1]
    lines = [
        f"Event loop: {report['loop']}. {report['when']}, Python {report['python']} on {report['machine']} ({report['cpus']} CPUs, shared), "
        f"{report['devices']} GPUs on {report['nodes']} nodes, load average "
        f"{', '.join(f'{x:.2f}' for x in report['load_average_before'])} before and {', '.join(f'{x:.2f}' for x in report['load_average'])} after. "
        f"/filter errors: {report['filter_errors']}.",
        "",
        "| case | delivery ms | rules written after ms | /filter calls | p50 ms | p99 ms | max ms | over 100 ms | longest loop hold ms (wall) |"
        + (" longest health-controller hold ms (CPU / wall) |" if attributed else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if attributed else ""),
    ]
    for r in report["results"]:
        written = r.get("rule_written_after_ms", r.get("rules_written_after_ms", ""))
        line = (
            f"| {r['case']} | {r.get('delivery_ms', '')} | {written} | {r.get('filter_calls', '')} | {r.get('filter_p50_ms', '')} | "
            f"{r.get('filter_p99_ms', '')} | {r.get('filter_max_ms', '')} | {r.get('filter_over_100ms', '')} | {r['longest_loop_hold_ms']} |"
        )
        if attributed:
            line += f" {r.get('longest_health_hold_cpu_ms', '')} / {r.get('longest_health_hold_wall_ms', '')} |"
        lines.append(line)
    return lines


def write(reports: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "health-storm.json").write_text(json.dumps(reports, indent=2) + "\n")
    lines = [
        "# Health controller: an alert storm, and /filter beside it (over HTTP, separate processes)",
        "",
        f"Targets: no event-loop hold by the controller over {HOLD_LIMIT_MS:g} ms, every /filter within {FILTER_LIMIT_MS:g} ms. "
        "bench/bench_health_storm.py; the second run times each callback on asyncio's loop (bench/loop_holds.py --attribute).",
    ]
    for report in reports:
        lines += ["", *table(report)]
    last = reports[-1]["results"][-1]
    if "top_cpu_holds" in last:
        lines += ["", "Longest callbacks during the storm (attributed run), by CPU:", ""]
        lines += [f"- {h}" for h in last["top_cpu_holds"]]
    (RESULTS / "health-storm.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench.bench_health_storm")
    p.add_argument("--nodes", type=int, default=250)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="fingerprints per one-device delivery")
    args = p.parse_args(argv)
    write([asyncio.run(run(args.nodes, tuple(args.sizes), attribute)) for attribute in (False, True)])
    print((RESULTS / "health-storm.md").read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
