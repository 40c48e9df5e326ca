"""scheduler_perf-style workload against `dra-extender serve --source` over HTTP: the "extender alone" figure.

N nodes x M GPUs, a maintenance DeviceTaintRule over some pools, P pending
pods each with its own one-GPU claim. Every pod is driven exactly as
kube-scheduler drives an extender: /filter with all node names, /prioritize
with the feasible ones, /bind to the best. Reports pods/s, p50/p99 per verb,
how long a new rule takes to show in /filter, and the extender's RSS.

This driver waits for each bind before the next /filter, so it measures the
extender alone; kube-scheduler does not wait (its binds are asynchronous):
bench/kube_scheduler_model.py measures the extender behind a model of it.

    .venv/bin/python -m bench.bench_scheduling [--nodes 1000] [--devices 8] [--pods 300]

Results: bench/results/scheduling.json and scheduling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import RESULTS
from kubesim.measure import pct, proc_status_mb
from kubesim.objects import node_slice
from kubesim.processes import free_port, start_extender, stop_process

DRIVER = "gpu.example.com"


def write_cluster(directory: Path, nodes: int, devices: int, pods: int, tainted_pools: int) -> None:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]
    for i in range(nodes):
        node = f"node-{i:05d}"
        docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"zone": f"z{i % 4}"}}})
        devs = []
        for j in range(devices):
            d: dict[str, Any] = {
                "name": f"gpu-{j}",
                "attributes": {"model": {"string": "a100" if j % 2 else "h100"}, "numa": {"int": j % 2}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            if j == 0 and i % 10 == 0:
                d["taints"] = [{"key": f"{DRIVER}/unmonitored", "effect": "None"}]
            devs.append(d)
        docs.append(node_slice(node, DRIVER, devs))
    for i in range(tainted_pools):
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"maintenance-{i}"},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": f"node-{i:05d}"},
                    "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
                },
            }
        )
    for p in range(pods):
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{p}", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": DRIVER,
                                    "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "a100"'}}],
                                },
                            }
                        ]
                    }
                },
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{p}", "namespace": "default", "uid": f"uid-{p}"},
                "spec": {
                    "schedulerName": "dra-scheduler",
                    "containers": [{"name": "c", "image": "pause"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{p}"}],
                },
            }
        )
    with (directory / "cluster.yaml").open("w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def pod_body(p: int, node_names: list[str]) -> dict[str, Any]:
    return {
        "Pod": {
            "metadata": {"name": f"pod-{p}", "namespace": "default", "uid": f"uid-{p}"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{p}"}], "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        },
        "Nodes": None,
        "NodeNames": node_names,
    }


def run(nodes: int, devices: int, pods: int, tainted_pools: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-"))
    try:
        print(f"writing cluster: {nodes} nodes x {devices} devices, {pods} pods", flush=True)
        write_cluster(tmp, nodes, devices, pods, tainted_pools)
        port = free_port()
        started = time.perf_counter()
        proc, client = start_extender(["--source", str(tmp)], port, tmp / "extender.log")
        ready_s = time.perf_counter() - started
        print(f"ready after {ready_s:.1f}s, RSS {proc_status_mb(proc.pid):.0f} MB", flush=True)
        names = [f"node-{i:05d}" for i in range(nodes)]
        lat: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}
        scheduled = 0
        t0 = time.perf_counter()
        for p in range(pods):
            body = pod_body(p, names)
            t = time.perf_counter()
            result = client.post("/filter", content=json.dumps(body)).json()
            lat["filter"].append(time.perf_counter() - t)
            feasible = result["NodeNames"] or []
            if not feasible:
                continue
            best = feasible[0]
            if len(feasible) > 1:
                body["NodeNames"] = feasible
                t = time.perf_counter()
                scores = client.post("/prioritize", content=json.dumps(body)).json()
                lat["prioritize"].append(time.perf_counter() - t)
                best = max(scores, key=lambda s: s["Score"])["Host"]
            t = time.perf_counter()
            error = client.post(
                "/bind", json={"PodName": f"pod-{p}", "PodNamespace": "default", "PodUID": f"uid-{p}", "Node": best}
            ).json()["Error"]
            lat["bind"].append(time.perf_counter() - t)
            scheduled += error == ""
            if (p + 1) % max(1, pods // 10) == 0:
                print(f"  {p + 1}/{pods} pods", flush=True)
        elapsed = time.perf_counter() - t0
        # Tracker update latency: a new rule over every pool, until /filter reflects it.
        rule = tmp / "late-rule.yaml"
        t = time.perf_counter()
        rule.write_text(
            "apiVersion: resource.dra-extender.io/v1alpha1\nkind: DeviceTaintRule\nmetadata: {name: all-broken}\n"
            f"spec:\n  deviceSelector: {{driver: {DRIVER}}}\n  taint: {{key: example.com/broken, effect: NoSchedule}}\n"
        )
        probe = pod_body(pods - 1, names[-5:])
        probe["Pod"]["metadata"]["uid"] = "probe"
        probe["Pod"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "claim-unbound"}]
        # a fresh claim that is not yet allocated
        (tmp / "probe-claim.yaml").write_text(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: claim-unbound, namespace: default}\n"
            f"spec: {{devices: {{requests: [{{name: gpu, exactly: {{deviceClassName: {DRIVER}}}}}]}}}}\n"
        )
        update_s = None
        while time.perf_counter() - t < 120:
            r = client.post("/filter", content=json.dumps(probe)).json()
            if any("example.com/broken" in v for v in r["FailedAndUnresolvableNodes"].values()):
                update_s = time.perf_counter() - t
                break
            time.sleep(0.05)
        result = {
            "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "workload": {"nodes": nodes, "devices_per_node": devices, "pods": pods, "tainted_pools": tainted_pools},
            "ready_seconds": round(ready_s, 2),
            "pods_scheduled": scheduled,
            "pods_per_second": round(pods / elapsed, 1),
            "latency_ms": {
                verb: {
                    "p50": round(pct(v, 0.5) * 1000, 2),
                    "p99": round(pct(v, 0.99) * 1000, 2),
                    "mean": round(statistics.fmean(v) * 1000, 2) if v else 0,
                    "n": len(v),
                }
                for verb, v in lat.items()
            },
            "rule_update_to_filter_seconds": round(update_s, 3) if update_s is not None else None,
            "rss_mb": round(proc_status_mb(proc.pid), 1),
            "samples_ms": {verb: [round(x * 1000, 3) for x in v] for verb, v in lat.items()},
        }
        stop_process(proc)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="scheduler_perf-style workload over HTTP")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--tainted-pools", type=int, default=50)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run(args.nodes, args.devices, args.pods, args.tainted_pools)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scheduling.json").write_text(json.dumps(result, indent=2) + "\n")
    lat = result["latency_ms"]
    md = [
        "# Scheduling benchmark, the extender alone (`python -m bench.bench_scheduling`)",
        "",
        "A driver that waits for each bind; behind kube-scheduler see kube-scheduler-model*.md.",
        "",
        f"{result['workload']['nodes']} nodes x {result['workload']['devices_per_node']} devices, "
        f"{result['workload']['pods']} pods, {result['workload']['tainted_pools']} pools under a NoSchedule rule; "
        f"{result['machine']['cores']} cores, Python {result['machine']['python']}.",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| ready after start (load + parse + CEL warm-up) | {result['ready_seconds']} s |",
        f"| pods/s (filter -> prioritize -> bind over HTTP) | {result['pods_per_second']} |",
        f"| pods scheduled | {result['pods_scheduled']} |",
        *(f"| {verb} p50 / p99 | {v['p50']} / {v['p99']} ms (n={v['n']}) |" for verb, v in lat.items()),
        f"| new rule over all devices -> visible in /filter | {result['rule_update_to_filter_seconds']} s |",
        f"| extender RSS | {result['rss_mb']} MB |",
        "",
    ]
    (args.out / "scheduling.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
