"""Placement quality: how much whole capacity each node-placement policy leaves, against an ideal packer.

    .venv/bin/python -m bench placement
    .venv/bin/python -m bench.bench_placement [--nodes 16] [--policy binpack --policy spread] [--name placement]

The kube-scheduler model (kubesim/scheduler: one scheduling loop, /filter,
/prioritize with random choice among the top scores x weight x 10,
asynchronous /bind) drives `dra-extender serve --kubeconfig` against the
in-repo fake API server, once per policy (`--node-placement`), on the same
cluster: nodes of 8 partitionable 40Gi GPUs (7 partitions each on the GPU's
shared counters, kubesim.objects.partitioned_slices) and one 40Gi device
of another driver that claims share (allowMultipleAllocations, 10Gi per
claim). The pods, in phases:

1. `fill`: one-partition pods (10Gi, first fit), whole-GPU pods (the 40Gi
   partition) and 10Gi shares of the shared devices arrive together;
2. `churn`: half of the one-partition and share pods leave (pod deleted,
   claim released and deleted), as many new ones arrive;
3. `big`: 8-GPU whole-node pods arrive with a few more one-partition pods.

After each phase: whole nodes free (no device of the node allocated), whole
GPUs free (nothing of the GPU allocated), pods left unplaced although the
cluster had room for them in total (free GPU memory >= the pod's need),
and pods/s (the phase's first pod created to its last bind; creating the
pods one by one is part of it). The ideal
packer's figures are exact minima for the pods alive after the phase,
packed from scratch: GPUs = whole-GPU pods + 8 x node pods + ceil(partition
pods / 4), shared devices = ceil(share pods / 4), nodes = node pods +
max(ceil((the other GPUs) / 8), shared devices). No online policy
can do better (the ideal may move pods; a scheduler never does).

Beside the runs, `extender CPU per pod`: the extender's own CPU time per
pod in-process (one Service over the same kind of cluster from a manifest,
/filter, /prioritize as the HTTP thread answers it, and each /bind after
the next pod's /filter, as kube-scheduler's asynchronous binds), which a
shared machine's load does not blur as it does pods/s.

Results: bench/results/placement.json and .md, with the load average before
and after each run (the machine is shared: pods/s is indicative).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common import RESULTS
from kubesim.measure import loadavg, machine, pct
from kubesim.objects import GPU_GI, PARTITIONS_GI, device_class, node_slice, partitioned_slices
from kubesim.processes import free_port, start_fake_api, start_server, stop_process
from kubesim.processes import seed as seed_objects
from kubesim.scheduler.api import Api
from kubesim.scheduler.config import DRIVER, NAMESPACE, SCHEDULER_NAME, SchedulerConfig, now
from kubesim.scheduler.cycle import KubeSchedulerModel
from tracker.apiserver.requests import MERGE_PATCH

GPUS = 8
PART_GI = PARTITIONS_GI[0]  # a one-partition pod's need (first fit takes a 10Gi partition)
PER_GPU = GPU_GI // PART_GI  # one-partition pods per GPU
CLASS_ANY, CLASS_WHOLE, CLASS_SHARE = "gpu-partition", "gpu-whole", "shared-device"
SHARE_DRIVER = "share.example.com"  # a node's shared device: another driver, so its pool does not mix with the GPUs'
NEED_GI = {"partition": PART_GI, "gpu": GPU_GI, "node": GPU_GI * GPUS, "share": PART_GI}
LEAVING = ("partition", "share")  # the kinds `churn` sends away


def _phases(nodes: int) -> list[dict[str, Any]]:
    """Arrivals and departures per phase, scaled to the cluster (16 nodes: 64 + 8 + 16 shares, -40 + 40, 3 nodes + 16)."""
    return [
        {"name": "fill", "arrive": {"partition": 4 * nodes, "gpu": nodes // 2, "share": nodes}, "depart_share": 0.0},
        {"name": "churn", "arrive": {"partition": 2 * nodes, "share": nodes // 2}, "depart_share": 0.5},
        {"name": "big", "arrive": {"node": max(1, nodes // 5), "partition": nodes}, "depart_share": 0.0},
    ]


def _cluster(nodes: int) -> list[dict[str, Any]]:
    whole = device_class(CLASS_WHOLE, DRIVER)
    whole["spec"]["selectors"].append({"cel": {"expression": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{GPU_GI}Gi")) == 0'}})
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        device_class(CLASS_ANY, DRIVER),
        whole,
        device_class(CLASS_SHARE, SHARE_DRIVER),
    ]
    for i in range(nodes):
        node = f"perf-node-{i}"
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
            }
        )
        objs += partitioned_slices(node, DRIVER, GPUS)
        objs.append(
            node_slice(
                node,
                SHARE_DRIVER,
                [{"name": "shared-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": f"{GPU_GI}Gi"}}}],
            )
        )
    return objs


def _pod_and_claim(name: str, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request: dict[str, Any] = (
        {"deviceClassName": CLASS_ANY} if kind == "partition" else {"deviceClassName": CLASS_WHOLE, "count": 1 if kind == "gpu" else GPUS}
    )
    if kind == "share":
        request = {"deviceClassName": CLASS_SHARE, "capacity": {"requests": {"memory": f"{PART_GI}Gi"}}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kind": kind}},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kind": kind}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "dev", "resourceClaimName": name}],
        },
    }
    return pod, claim


async def _figures(api: Api, nodes: int, alive: dict[str, str], model: KubeSchedulerModel) -> dict[str, Any]:
    """Whole nodes / GPUs free, unplaced pods although there was room, and the ideal packer's figures, from the API server."""
    listed = await api.list("/apis/resource.k8s.io/v1/resourceclaims")
    claims = listed[0] if listed else []
    used_gi: Counter[tuple[str, str]] = Counter()  # (node, gpu) -> Gi allocated
    shared_gi: Counter[str] = Counter()  # node -> Gi of its shared device taken by shares
    for c in claims:
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            if r["driver"] == SHARE_DRIVER:
                shared_gi[r["pool"]] += PART_GI
                continue
            gpu, _, part = r["device"].rpartition("-part-")
            used_gi[(r["pool"], gpu)] += PARTITIONS_GI[int(part)]
    names = [f"perf-node-{i}" for i in range(nodes)]
    touched_nodes = {n for n, _ in used_gi} | set(shared_gi)
    free_gi = nodes * GPUS * GPU_GI - sum(used_gi.values())
    free_shared_gi = nodes * GPU_GI - sum(shared_gi.values())
    unplaced = [k for k in alive if f"{NAMESPACE}/{k}" not in model.bound_node]
    with_room = [k for k in unplaced if NEED_GI[alive[k]] <= (free_shared_gi if alive[k] == "share" else free_gi)]
    kinds = Counter(alive.values())
    ideal_gpus_other = kinds["gpu"] + math.ceil(kinds["partition"] / PER_GPU)
    ideal_gpus = ideal_gpus_other + GPUS * kinds["node"]
    ideal_shared = math.ceil(kinds["share"] / PER_GPU)
    ideal_nodes = kinds["node"] + max(math.ceil(ideal_gpus_other / GPUS), ideal_shared)
    fits = ideal_nodes <= nodes
    return {
        "pods_alive": dict(kinds),
        "pods_unplaced": len(unplaced),
        "unplaced_with_room": len(with_room),
        "unplaced_with_room_by_kind": dict(Counter(alive[k] for k in with_room)),
        "whole_nodes_free": len([n for n in names if n not in touched_nodes]),
        "whole_gpus_free": nodes * GPUS - len(used_gi),
        "whole_shared_devices_free": nodes - len(shared_gi),
        "gpus_touched": len(used_gi),
        "nodes_touched": len(touched_nodes),
        "ideal": {
            "whole_nodes_free": nodes - ideal_nodes if fits else 0,
            "whole_gpus_free": nodes * GPUS - ideal_gpus if fits else 0,
            "whole_shared_devices_free": nodes - ideal_shared if fits else 0,
            "unplaced_with_room": 0 if fits else None,
        },
    }


async def _extender_counters(ext_url: str) -> dict[str, float]:
    """The extender's placement-gate counters so far (waits for earlier pods' binds, nodes withheld meanwhile)."""
    wanted = (
        "dra_extender_placement_wait_seconds_count",
        "dra_extender_placement_wait_seconds_sum",
        "dra_extender_placement_nodes_withheld_total",
    )
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(f"{ext_url}/metrics")).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name.removeprefix("dra_extender_")] = round(float(value), 3)
    return out


async def _release(api: Api, name: str) -> None:
    """A pod leaves: the pod deleted, its claim's finalizer dropped and the claim deleted (as the claim controller does)."""
    await api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{name}"
    await api.request("PATCH", path, {"metadata": {"finalizers": None}}, MERGE_PATCH)
    await api.request("DELETE", path)


async def _drive(api_url: str, ext_url: str, nodes: int, seed: int, settle: float) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    async with Api(api_url) as api:
        model = KubeSchedulerModel(api, ext_url, SchedulerConfig(seed=seed))
        await model.start()
        alive: dict[str, str] = {}  # pod name -> kind
        serial = 0
        try:
            for phase in _phases(nodes):
                t0 = now()
                small = [k for k, kind in alive.items() if kind in LEAVING and f"{NAMESPACE}/{k}" in model.bound_node]
                leaving = rng.sample(small, int(len(small) * phase["depart_share"]))
                for name in leaving:
                    await _release(api, name)
                    del alive[name]
                t_create = now()
                marks = (len(model.stats.filter_ms), len(model.stats.prioritize_ms), len(model.stats.bind_ms))
                arrivals = [kind for kind, count in phase["arrive"].items() for _ in range(count)]
                rng.shuffle(arrivals)
                created = []
                for kind in arrivals:
                    name = f"{kind}-{serial}"
                    serial += 1
                    pod, claim = _pod_and_claim(name, kind)
                    await api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", claim)
                    await api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
                    alive[name] = kind
                    created.append(name)
                # Until every pod of the phase is bound or was rejected, and nothing moved for `settle` seconds.
                last_change, seen = now(), -1
                while now() - last_change < settle and now() - t0 < 300:
                    await asyncio.sleep(0.1)
                    state = (len(model.bound_node), len(model.rejected_pods), model.stats.binds)
                    if hash(state) != seen:
                        seen, last_change = hash(state), now()
                    if not all(f"{NAMESPACE}/{n}" in model.bound_node or f"{NAMESPACE}/{n}" in model.rejected_pods for n in created):
                        last_change = max(last_change, now() - settle + 0.5)
                bound_times = [model.bound_at[f"{NAMESPACE}/{n}"] for n in created if f"{NAMESPACE}/{n}" in model.bound_at]
                span = (max(bound_times) - t_create) if bound_times else None
                figures = await _figures(api, nodes, alive, model)
                figures.update(
                    {
                        "phase": phase["name"],
                        "arrived": dict(Counter(arrivals)),
                        "departed": len(leaving),
                        "bound_of_arrived": len(bound_times),
                        "pods_per_s": round(len(bound_times) / span, 1) if span else None,
                        "failed_binds": model.stats.failed_binds,
                        "latency_ms_p50_p99": {
                            verb: [round(pct(samples[mark:], q), 1) for q in (0.5, 0.99)]
                            for verb, samples, mark in zip(
                                ("filter", "prioritize", "bind"),
                                (model.stats.filter_ms, model.stats.prioritize_ms, model.stats.bind_ms),
                                marks,
                                strict=True,
                            )
                        },
                        "extender": await _extender_counters(ext_url),
                        "rejections": model.stats.rejections,
                    }
                )
                out.append(figures)
                print(json.dumps(figures), flush=True)
        finally:
            await model.stop()
    return out


def run_policy(policy: str, nodes: int, seed: int, settle: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-placement-"))
    api_proc, api_url, kubeconfig = start_fake_api(tmp)
    ext_proc = None
    try:
        with httpx.Client(base_url=api_url, timeout=300) as http:
            seed_objects(http, _cluster(nodes))
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "dra_extender.cli",
            "serve",
            "--kubeconfig",
            str(kubeconfig),
            "--standalone",
            "--listen",
            f"127.0.0.1:{port}",
        ]
        ext_proc, client = start_server([*cmd, "--node-placement", policy], port, tmp / "extender.log", timeout=300)
        client.close()
        load_before = loadavg()
        phases = asyncio.run(_drive(api_url, f"http://127.0.0.1:{port}", nodes, seed, settle))
        return {"policy": policy, "phases": phases, "loadavg_before": load_before, "loadavg_after": loadavg()}
    finally:
        if ext_proc is not None:
            stop_process(ext_proc)
        stop_process(api_proc)
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_per_pod(policy: str, nodes: int, pods: int) -> float:
    """The extender's CPU milliseconds per one-partition pod, in-process (see the module docstring)."""
    from allocator.allocation import Allocator
    from allocator.cel import CelEnvironment
    from extender.service import build_service
    from extender.wire import BindingArgs, parse_extender_args
    from serving.metrics import Metrics
    from tracker.manifest.source import ManifestSource
    from tracker.state import ClusterState

    names = [f"perf-node-{i}" for i in range(nodes)]
    objs = _cluster(nodes)
    for i in range(pods):
        pod, claim = _pod_and_claim(f"partition-{i}", "partition")
        pod["metadata"]["uid"] = f"uid-{i}"
        objs += [claim, pod]

    def args(i: int, offered: list[str]) -> Any:
        pod: dict[str, Any] = {
            "metadata": {"name": f"partition-{i}", "namespace": NAMESPACE, "uid": f"uid-{i}"},
            "spec": {"resourceClaims": [{"name": "dev", "resourceClaimName": f"partition-{i}"}]},
        }
        return parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": offered}))

    async def run(directory: Path) -> float:
        cel = CelEnvironment()
        state = ClusterState(cel)
        source = ManifestSource(directory, watch=False)
        service = build_service(state, source, Allocator(cel), Metrics(), node_placement=policy)
        task = asyncio.create_task(source.run(state))
        while not state.ready:
            await asyncio.sleep(0.01)
        started = time.process_time()
        pending = None
        for i in range(pods):
            passed, failed = await service.filter(args(i, names))
            assert passed, failed
            if len(passed) > 1:
                scored = service.prioritize_without_state(args(i, passed)) or service.prioritize(args(i, passed))
                host = max(scored, key=lambda e: e[1])[0]
            else:
                host = passed[0]
            if pending is not None:
                assert await service.bind(pending) is None
            pending = BindingArgs(f"partition-{i}", NAMESPACE, f"uid-{i}", host)
        if pending is not None:
            assert await service.bind(pending) is None
        spent = time.process_time() - started
        task.cancel()
        return round(spent * 1000 / pods, 2)

    import yaml

    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-placement-cpu-"))
    try:
        (tmp / "cluster.yaml").write_text(yaml.safe_dump_all(objs))
        return asyncio.run(run(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Placement quality (`python -m bench placement`)",
        "",
        f"{report['nodes']} nodes x {GPUS} partitionable {GPU_GI}Gi GPUs (7 partitions each on the GPU's counters) + 1 shared "
        f"{GPU_GI}Gi device (10Gi shares); the kube-scheduler "
        f"model against `dra-extender serve --kubeconfig` and the fake API server, once per `--node-placement`. {m['cores']} cores "
        f"({m['cpu']}), Python {m['python']}; started {report['started']}.",
        "",
        "Ideal: the exact minimum for the pods alive after the phase, packed from scratch (a bound no online policy can beat). "
        "Unplaced with room: pods left unbound although the cluster's free GPU (or shared-device) memory in total was enough for them.",
        "",
        "| policy | phase | pods alive | whole nodes free (ideal) | whole GPUs free (ideal) | whole shared devices free (ideal) "
        "| unplaced with room | pods/s | failed binds | load before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        for p in run["phases"]:
            alive = ", ".join(f"{v} {k}" for k, v in sorted(p["pods_alive"].items()))
            lines.append(
                f"| {run['policy']} | {p['phase']} | {alive} | {p['whole_nodes_free']} ({p['ideal']['whole_nodes_free']}) | "
                f"{p['whole_gpus_free']} ({p['ideal']['whole_gpus_free']}) | "
                f"{p['whole_shared_devices_free']} ({p['ideal']['whole_shared_devices_free']}) | {p['unplaced_with_room']} "
                f"{p['unplaced_with_room_by_kind'] or ''} | {p['pods_per_s']} | {p['failed_binds']} | "
                f"{run['loadavg_before']} -> {run['loadavg_after']} |"
            )
    cpu = report.get("cpu_ms_per_pod")
    if cpu:
        lines += [
            "",
            f"Extender CPU per one-partition pod, in-process ({report['cpu_pods']} pods, /bind after the next /filter): "
            + ", ".join(f"{policy} {ms} ms" for policy, ms in cpu.items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="placement quality of --node-placement binpack and spread against an ideal packer")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--policy", action="append", choices=("binpack", "spread"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds without a bind or rejection that end a phase")
    parser.add_argument("--cpu-pods", type=int, default=300, help="pods of the in-process CPU measurement")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="placement")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "machine": machine(),
        "nodes": args.nodes,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "runs": [run_policy(p, args.nodes, args.seed, args.settle) for p in args.policy or ("binpack", "spread")],
        "cpu_pods": args.cpu_pods,
        "cpu_ms_per_pod": {p: cpu_per_pod(p, args.nodes, args.cpu_pods) for p in args.policy or ("binpack", "spread")},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
