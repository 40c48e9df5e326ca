"""Alert deliveries to the health controller, and what they do to /filter.

The fake API server runs as its own process (as the API server would),
loaded with N nodes of 8 GPUs each and one DeviceHealthPolicy; this process
runs the tracker (ApiSource reflectors), the health controller and the
receiver's app, called in process (the HTTP transport is not counted).
Cases:

- one POST of 1,000 firing alerts, each for a different GPU: the answer (the
  delivery is applied in memory), then the time until the 1,000 rules are
  written in the background, and /filter meanwhile;
- the same POST again (Alertmanager's repeat_interval: all repeats);
- 10,000 alerts per minute sustained: deliveries of 20 alerts, ~8 per second,
  mostly repeats, with a few new firings and resolutions each;
- /filter (a pod without claims over every node, as bench_volume_filter
  measures it) on the same event loop, idle (the reference) and while the
  sustained deliveries run.

    .venv/bin/python -m bench.bench_health [--nodes N] [--seconds S]

Writes bench/results/health.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from controllers.health.controller import HealthController
from controllers.health.receiver import Receiver
from extender import wire
from extender.service import Service, build_service
from kubesim.measure import pct
from kubesim.null_source import NullSource
from kubesim.objects import node, uuid_slice
from serving.http_thread import Limits
from serving.metrics import Metrics
from tests.health.harness import asgi_post
from tracker.apiserver.source import ApiSource
from tracker.state import ClusterState
from tracker.timestamps import rfc3339

RESULTS = Path(__file__).resolve().parent / "results"
DRIVER = "gpu.example.com"
TOKEN = "bench-token"
LIMIT_MS = 100.0


def objects(nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"node-{n:04d}"
        out += [node(name), uuid_slice(name, DRIVER, 8)]
    out.append(
        {
            "apiVersion": "resource.dra-extender.io/v1alpha1",
            "kind": "DeviceHealthPolicy",
            "metadata": {"name": "gpu-health"},
            "spec": {
                "rules": [
                    {
                        "name": "xid-79",
                        "signal": {"alert": {"matchLabels": {"alertname": "GPUXid"}}},
                        "match": {"nodeLabel": "Hostname", "attribute": "uuid", "attributeLabel": "UUID"},
                        "devices": {"driver": DRIVER},
                        "taint": {"key": "health.example.com/xid"},
                        "steps": [{"effect": "NoSchedule"}, {"effect": "NoExecute", "after": "5m"}],
                        "guard": {"maxNoExecutePercent": 2},
                    }
                ]
            },
        }
    )
    return out


def alert(node: int, gpu: int, status: str = "firing") -> dict[str, Any]:
    name = f"node-{node:04d}"
    return {
        "status": status,
        "labels": {"alertname": "GPUXid", "Hostname": name, "UUID": f"GPU-{name}-{gpu}"},
        "annotations": {},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": f"{name}-{gpu}",
    }


def body(alerts: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"version": "4", "status": "firing", "receiver": "dra-extender", "alerts": alerts})


HEADERS = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {TOKEN}".encode())]


async def post(receiver: Receiver, data: bytes) -> tuple[int, float]:
    start = time.perf_counter()
    status, _ = await asgi_post(receiver.app, "/alerts", [*HEADERS, (b"content-length", str(len(data)).encode())], data)
    return status, (time.perf_counter() - start) * 1000


async def filter_latencies(service: Service, raw: bytes, seconds: float) -> list[float]:
    """/filter calls back to back (yielding between them) for `seconds`: ms per call."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        args = wire.parse_extender_args(raw)
        passed, failed = await service.filter(args)
        wire.filter_result(args, passed, unresolvable=failed)
        out.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.005)
    return out


async def run(nodes: int, seconds: float) -> dict[str, Any]:
    load_before = list(os.getloadavg())
    tmp = Path(tempfile.mkdtemp())
    (tmp / "objects.yaml").write_text(yaml.safe_dump_all(objects(nodes)))
    (tmp / "token").write_text(TOKEN)
    api = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim.fakeapi",
            "--port",
            "0",
            "--kubeconfig-out",
            str(tmp / "kubeconfig"),
            "--load",
            str(tmp / "objects.yaml"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert api.stdout is not None
        api.stdout.readline()  # {"url": ...}: ready
        state = ClusterState(CelEnvironment())
        source = ApiSource(kubeconfig=str(tmp / "kubeconfig"))
        metrics = Metrics()
        health = HealthController(state, source, metrics=metrics)
        receiver = Receiver(health, tmp / "token", Limits(), metrics=metrics)
        tasks = [asyncio.create_task(source.run(state)), asyncio.create_task(health.run())]
        while not health.ready:
            await asyncio.sleep(0.05)
        service = build_service(state, NullSource(), Allocator(state.cel), Metrics(), placement_wait=0, claim_wait=0)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        filter_body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"node-{n:04d}" for n in range(nodes)]})
        gc.collect()
        gc.freeze()
        results: list[dict[str, Any]] = []
        reference = await filter_latencies(service, filter_body, 3.0)

        everyone = [alert(n, g) for n in range(nodes) for g in range(8)][:1000]
        drain_filter = asyncio.create_task(filter_latencies(service, filter_body, 4.0))
        await asyncio.sleep(0.2)
        start = time.perf_counter()
        status, ms = await post(receiver, body(everyone))
        results.append(
            {"case": f"one POST of {len(everyone)} new firing alerts (answered; rules written after)", "status": status, "ms": round(ms, 1)}
        )
        while len(health.written) < len(everyone) or health.dirty or health.lock.locked():
            await asyncio.sleep(0.01)
        results.append(
            {
                "case": f"... until its {len(everyone)} DeviceTaintRules are written (in the background)",
                "ms": round((time.perf_counter() - start) * 1000, 1),
            }
        )
        during_drain = await drain_filter
        results.append(
            {
                "case": "/filter while those rules are written",
                "calls": len(during_drain),
                "p50_ms": round(pct(during_drain, 0.5), 3),
                "p99_ms": round(pct(during_drain, 0.99), 3),
            }
        )
        status, ms = await post(receiver, body(everyone))
        results.append({"case": f"the same {len(everyone)} again (repeats)", "status": status, "ms": round(ms, 1)})

        # Sustained: 10,000 alerts/min in deliveries of 20 (8.33 per second); each delivery repeats
        # 18 firing alerts and flips two others (one resolves, one fires anew).
        rng = random.Random(1)
        per_second = 10_000 / 60 / 20
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        firing = set(range(1000))

        async def sustained() -> None:
            start = time.perf_counter()
            i = 0
            while time.perf_counter() - start < seconds:
                batch = [alert(k // 8, k % 8) for k in rng.sample(sorted(firing), 18)]
                off = rng.choice(sorted(firing))
                on = rng.choice([k for k in range(nodes * 8) if k not in firing] or [off])
                firing.discard(off)
                firing.add(on)
                batch += [alert(off // 8, off % 8, "resolved"), alert(on // 8, on % 8)]
                st, took = await post(receiver, body(batch))
                statuses[st] = statuses.get(st, 0) + 1
                latencies.append(took)
                i += 1
                delay = start + i / per_second - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)

        during_task = asyncio.create_task(filter_latencies(service, filter_body, seconds))
        await sustained()
        during = await during_task
        results.append(
            {
                "case": f"10,000 alerts/min for {seconds:g} s (deliveries of 20)",
                "deliveries": len(latencies),
                "statuses": statuses,
                "p50_ms": round(pct(latencies, 0.5), 2),
                "p99_ms": round(pct(latencies, 0.99), 2),
                "max_ms": round(max(latencies), 2),
            }
        )
        results.append(
            {
                "case": "/filter, health idle (reference)",
                "calls": len(reference),
                "p50_ms": round(pct(reference, 0.5), 3),
                "p99_ms": round(pct(reference, 0.99), 3),
            }
        )
        results.append(
            {
                "case": "/filter during the sustained deliveries",
                "calls": len(during),
                "p50_ms": round(pct(during, 0.5), 3),
                "p99_ms": round(pct(during, 0.99), 3),
            }
        )
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        api.terminate()
        api.wait()
    return {
        "when": rfc3339(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "nodes": nodes,
        "devices": nodes * 8,
        "limit_ms": LIMIT_MS,
        "load_average_before": load_before,
        "load_average": list(os.getloadavg()),
        "results": results,
    }


def write(report: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "health.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Health controller: alert deliveries, and /filter beside them",
        "",
        f"{report['when']}, Python {report['python']} on {report['machine']}, {report['devices']} GPUs on {report['nodes']} nodes, "
        f"load average {', '.join(f'{x:.2f}' for x in report['load_average'])} after ({', '.join(f'{x:.2f}' for x in report.get('load_average_before', []))} before). Target: p99 <= {report['limit_ms']:g} ms per delivery.",
        "",
        "| case | result |",
        "|---|---|",
    ]
    for r in report["results"]:
        rest = ", ".join(f"{k} {v}" for k, v in r.items() if k != "case")
        lines.append(f"| {r['case']} | {rest} |")
    (RESULTS / "health.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench.bench_health")
    p.add_argument("--nodes", type=int, default=250)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args(argv)
    report = asyncio.run(run(args.nodes, args.seconds))
    write(report)
    print((RESULTS / "health.md").read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
