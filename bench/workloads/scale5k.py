"""Scale5k: 5,000 nodes x 8 devices: /filter over the sampled window and over all nodes, a new claim shape, a watch burst."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from bench.workloads.cluster import NS, PodClaim, base_objects, new_shape_claim, node_name, resource_slice
from bench.workloads.driver import Driver, env_info, noop_runs, run_pods, summary
from bench.workloads.env import Env, api_path
from bench.workloads.runs import Config, target, window
from kubesim.measure import proc_status_mb


def scale5k(cfg: Config, tmp: Path) -> dict[str, Any]:
    nodes, devices = 5000, 8
    p500 = cfg.n(500, 100)
    p5000 = cfg.n(100, 20)
    shapes = 3
    objs, burst_claims, pcs, probes = _cluster(nodes, devices, p500 + p5000, shapes)
    names = [node_name(i) for i in range(nodes)]
    pods = [pc.pod() for pc in pcs]
    out: dict[str, Any] = {
        "workload": {
            "nodes": nodes,
            "devices_per_node": devices,
            "devices": nodes * devices,
            "other_pods": 10_000,
            "pods_500_names": p500,
            "pods_5000_names": p5000,
            "never_seen_shapes": shapes,
        }
    }
    print(f"  Scale5k: {nodes} x {devices}, {p500} pods with 500 names, {p5000} with 5,000, {shapes} never-seen shapes", flush=True)
    out["noop_500"] = noop_runs(tmp, "Scale5k 500 names", pods[:p500], window(names, 500))
    out["noop_5000"] = noop_runs(tmp, "Scale5k 5000 names", pods[p500:], lambda _k: names)
    for mode in cfg.modes:
        env = Env(mode, tmp, objs if mode == cfg.modes[-1] else list(objs), label="Scale5k")
        try:
            env.start()
            out[mode] = _run_mode(env, mode, probes, pods, p500, names, burst_claims, devices)
        finally:
            env.stop()
    out["targets"] = []
    for mode in cfg.modes:
        out["targets"] += _targets(out[mode], mode)
    return out


def _cluster(
    nodes: int, devices: int, n_pods: int, shapes: int
) -> tuple[list[dict[str, Any]], list[PodClaim], list[PodClaim], list[PodClaim]]:
    """The objects; the pending claims the watch burst writes; the measured pods' claims; a claim of each never-seen shape."""
    objs = base_objects(nodes, devices)
    # Like the reflector bench: 10,000 more pods, half without claims, half bound with a claim each.
    for p in range(5000):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{p:05d}", "namespace": NS, "uid": f"web-uid-{p:05d}"},
                "spec": {"nodeName": node_name(p), "containers": [{"name": "c", "image": "nginx"}]},
            }
        )
    bound = [PodClaim(100_000 + p, "template") for p in range(5000)]
    for p, pc in enumerate(bound):
        objs += pc.objects((node_name(p), f"instance-{devices - 1}"))
    burst_claims = [PodClaim(200_000 + c, "template") for c in range(5000)]
    for pc in burst_claims:
        objs.append(pc.claim_object())  # pending claims whose status the burst writes
    pcs = [PodClaim(k, "template") for k in range(n_pods)]
    for pc in pcs:
        objs += pc.objects()
    probes = []
    for s in range(shapes):
        pc = PodClaim(300_000 + s, "template")
        objs += [new_shape_claim(pc, s), pc.pod()]
        probes.append(pc)
    return objs, burst_claims, pcs, probes


def _run_mode(
    env: Env,
    mode: str,
    probes: list[PodClaim],
    pods: list[dict[str, Any]],
    p500: int,
    names: list[str],
    burst_claims: list[PodClaim],
    devices: int,
) -> dict[str, Any]:
    """The never-seen shapes, then the pods with 500 names and with all 5,000, then (cluster mode) the watch burst."""
    nodes = len(names)
    res: dict[str, Any] = {"env_after_ready": env_info(env)}
    print(
        f"    {mode}: seeded in {env.seed_s:.1f} s, ready in {env.ready_s:.1f} s, RSS {res['env_after_ready']['rss_mb']} MB (peak {res['env_after_ready']['peak_rss_mb']})",
        flush=True,
    )
    driver = Driver(env.url)
    first = []
    for pc in probes:
        # Bound like any pod: a pod that passes /filter and never gets its /bind would make the
        # next /filter wait for it (the placement gate, up to --placement-wait).
        a = driver.schedule(pc.pod(), names)
        first.append(round(a.filter_ms, 1))
        print(f"    first pod of a never-seen shape, 5,000 names: /filter {a.filter_ms:.0f} ms, {a.feasible} feasible", flush=True)
    res["never_seen_shape_filter_ms"] = first
    res["names_500"] = run_pods(driver, f"Scale5k {mode} 500 names", pods[:p500], window(names, 500))
    # The first nodes // 500 pods meet nodes with no verdict for this shape yet (cold); after that,
    # every node has one and only binds invalidate (warm: what a running workload sees).
    cold = nodes // 500
    fms = res["names_500"]["samples"]["filter_ms"]
    res["names_500"]["filter_ms_first_pass"] = summary(fms[:cold])
    res["names_500"]["filter_ms_warm"] = summary(fms[cold:])
    res["names_5000"] = run_pods(driver, f"Scale5k {mode} 5000 names", pods[p500:], lambda _k: names)
    used: set[str] = set()
    res["env_after_pods"] = env_info(env)
    if mode == "cluster":
        res["watch_burst"] = watch_burst(env, devices, burst_claims, slices=nodes, used=used)
    res["env"] = env_info(env)
    driver.close()
    return res


def _targets(r: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    p99 = r["names_500"]["latency_ms"]["filter"]["p99"]
    targets.append(
        target(
            "filter p99 <= 15 ms with 500 names (every pod, incl. the first pass over the nodes)",
            p99,
            15,
            p99 <= 15 if mode == "source" else None,
            "ms",
            mode,
        )
    )
    p99 = r["names_500"]["filter_ms_warm"].get("p99")
    targets.append(
        target(
            "filter p99 <= 15 ms with 500 names (after the first pass: every node has a verdict for the shape)",
            p99,
            15,
            (p99 is not None and p99 <= 15) if mode == "source" else None,
            "ms",
            mode,
        )
    )
    first = r["names_500"]["filter_ms_first_pass"]
    targets.append(
        target("filter with 500 names, first pass over the nodes (a shape's first pods), max", first.get("max"), None, None, "ms", mode)
    )
    p99 = r["names_5000"]["latency_ms"]["filter"]["p99"]
    targets.append(target("filter p99 <= 60 ms with 5,000 names", p99, 60, p99 <= 60 if mode == "source" else None, "ms", mode))
    worst = max(r["never_seen_shape_filter_ms"])
    targets.append(target("first pod of a never-seen shape over 40k devices <= 1 s", worst, 1000, worst <= 1000, "ms", mode))
    peak = r["env"]["peak_rss_mb"]
    with_burst = mode == "cluster"
    targets.append(
        target(
            "peak RSS <= 512 MiB" + (" including a watch burst" if with_burst else " (no watch burst in source mode)"),
            peak,
            512 * 1.048576,
            peak <= 512 * 1.048576 if with_burst else None,
            "MB",
            mode,
        )
    )
    return targets


def watch_burst(env: Env, devices: int, claims: list[PodClaim], *, slices: int, used: set[str]) -> dict[str, Any]:
    """5,000 slice updates (one attribute of every device) and 5,000 claim status updates, 32 writes in flight."""
    import aiohttp

    jobs: list[tuple[str, bytes]] = []
    for i in range(slices):
        s = resource_slice(i, devices, revision=1)
        jobs.append((api_path(s, item=True), orjson.dumps(s)))
        if i < len(claims):
            pc = claims[i]
            c = pc.claim_object((node_name(i), f"instance-{devices - 2}"))
            c["status"]["reservedFor"] = []
            got = env.api.get(api_path(c, item=True)).json()  # type: ignore[union-attr]
            got["status"] = {"allocation": c["status"]["allocation"]}
            jobs.append((api_path(c, item=True) + "/status", orjson.dumps(got)))
    before = tracker_events(env)
    t0 = time.perf_counter()

    async def push() -> None:
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)
        async with aiohttp.ClientSession(env.api_url, headers={"Content-Type": "application/json"}) as session:

            async def worker() -> None:
                while not queue.empty():
                    path, body = queue.get_nowait()
                    async with session.put(path, data=body) as r:
                        await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"PUT {path}: {r.status}")

            await asyncio.gather(*(worker() for _ in range(32)))

    assert env.proc is not None, "the extender runs"
    pid = env.proc.pid
    asyncio.run(push())
    pushed = time.perf_counter() - t0
    want = before + len(jobs)
    peak_during = 0.0
    while time.perf_counter() - t0 < 600:
        peak_during = max(peak_during, proc_status_mb(pid, "VmRSS"))
        if tracker_events(env) >= want:
            break
        time.sleep(0.2)
    applied = time.perf_counter() - t0
    print(
        f"    watch burst: {len(jobs)} writes in {pushed:.1f} s, applied after {applied:.1f} s; peak RSS {proc_status_mb(pid, 'VmHWM'):.0f} MB",
        flush=True,
    )
    return {
        "writes": len(jobs),
        "push_s": round(pushed, 2),
        "applied_s": round(applied, 2),
        "rss_mb_after": round(proc_status_mb(pid, "VmRSS"), 1),
        "peak_rss_mb": round(proc_status_mb(pid, "VmHWM"), 1),
    }


def tracker_events(env: Env) -> float:
    import re

    text = env.client.get("/metrics").text  # type: ignore[union-attr]
    return sum(
        float(m.group(3))
        for m in re.finditer(
            r'^dra_extender_tracker_events_total\{kind="(ResourceSlice|ResourceClaim)",type="([^"]+)"\} ([0-9.e+]+)$', text, re.M
        )
        if m.group(2) == "MODIFIED"
    )
