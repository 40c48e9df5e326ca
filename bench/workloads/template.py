"""SchedulingWithResourceClaimTemplate, Toleration, FirstAvailable and SteadyState: one claim shape from a template."""

from __future__ import annotations

import queue
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.workloads.cluster import SPECS, PodClaim, base_objects, node_name, prefill
from bench.workloads.driver import Attempt, Driver, Progress, attempts_result, env_info, noop_runs, summary
from bench.workloads.env import Env
from bench.workloads.runs import Config, run_modes, target


def template_workload(
    cfg: Config, tmp: Path, label: str, spec: str, *, taint_all: bool = False, pods_full: int = 2500, pods_quick: int = 500
) -> dict[str, Any]:
    nodes, devices = 500, 10
    measured = cfg.n(pods_full, pods_quick)
    init = prefill(nodes, devices, devices // 2, spec, 0)
    objs = base_objects(nodes, devices, taint_all=taint_all)
    for pc in init:
        objs += pc.objects(pc.allocated)  # type: ignore[attr-defined]
    pcs = [PodClaim(len(init) + k, spec) for k in range(measured)]
    for pc in pcs:
        objs += pc.objects()
    pods = [pc.pod() for pc in pcs]
    names = [node_name(i) for i in range(nodes)]
    out: dict[str, Any] = {
        "workload": {
            "nodes": nodes,
            "devices_per_node": devices,
            "devices": nodes * devices,
            "init_pods": len(init),
            "measured_pods": measured,
            "claim_spec": SPECS[spec],
            "taint_rule_on_every_device": taint_all,
        }
    }
    print(f"  {label}: {nodes} nodes x {devices} devices, {len(init)} init pods, {measured} measured pods", flush=True)
    out["noop_before"] = noop_runs(tmp, label, pods, lambda _k: names)
    out.update(run_modes(cfg, tmp, label, objs, pods, names))
    out["noop_after"] = noop_runs(tmp, label, pods, lambda _k: names)
    noop = statistics.fmean([out["noop_before"]["pods_per_s"], out["noop_after"]["pods_per_s"]])
    out["noop_pods_per_s"] = round(noop, 1)
    for mode in cfg.modes:
        out[mode]["ratio_to_noop"] = round(out[mode]["pods_per_s"] / noop, 3)
    return out


def scheduling_with_template(cfg: Config, tmp: Path) -> dict[str, Any]:
    out = template_workload(cfg, tmp, "SchedulingWithResourceClaimTemplate", "template")
    out["targets"] = []
    for mode in cfg.modes:
        r = out[mode]
        out["targets"].append(
            target(
                "pods/s >= 0.8 x no-op (same run)",
                r["ratio_to_noop"],
                0.8,
                r["ratio_to_noop"] >= 0.8 if mode == "source" else None,
                "x",
                mode,
            )
        )
        p99 = r["latency_ms"]["filter"]["p99"]
        out["targets"].append(target("filter p99 <= 10 ms at 500 nodes", p99, 10, p99 <= 10 if mode == "source" else None, "ms", mode))
    return out


def toleration(cfg: Config, tmp: Path) -> dict[str, Any]:
    return template_workload(cfg, tmp, "Toleration", "toleration", taint_all=True, pods_full=1000, pods_quick=200)


def first_available(cfg: Config, tmp: Path) -> dict[str, Any]:
    return template_workload(cfg, tmp, "FirstAvailable", "first_available", pods_full=1000, pods_quick=200)


def steady_state(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Create one pod and delete the oldest at a constant rate, at 50 % occupancy; schedule what appears."""
    nodes, devices = 500, 10
    rate = 20.0
    duration = cfg.n(60, 15)
    init = prefill(nodes, devices, devices // 2, "template", 0)
    random.Random(7).shuffle(init)  # the oldest pods are spread over the nodes
    objs = base_objects(nodes, devices)
    names = [node_name(i) for i in range(nodes)]
    out: dict[str, Any] = {
        "workload": {"nodes": nodes, "devices_per_node": devices, "occupancy": 0.5, "rate_per_s": rate, "duration_s": duration}
    }
    print(f"  SteadyState: {nodes} x {devices}, 50 % occupied, create + delete {rate:g} pods/s for {duration} s", flush=True)
    for mode in cfg.modes:
        env = Env(mode, tmp, list(objs), label="SteadyState")
        live: list[tuple[str, list[dict[str, Any]]]] = [(pc.name, pc.objects(pc.allocated)) for pc in init]  # type: ignore[attr-defined]
        env.add_grouped(live)
        try:
            env.start()
            out[mode] = _steady_run(env, mode, names, live, len(init), int(duration * rate), rate)
        finally:
            env.stop()
    return out


def _steady_run(
    env: Env, mode: str, names: list[str], live: list[tuple[str, list[dict[str, Any]]]], first: int, total: int, rate: float
) -> dict[str, Any]:
    """The driver schedules each pod as the creator thread makes it, until the creator is done."""
    driver = Driver(env.url)
    pending: queue.Queue[dict[str, Any] | None] = queue.Queue()
    created_at: dict[str, float] = {}
    progress = Progress(f"SteadyState {mode}", total)
    creator_errors: list[str] = []
    attempts: list[Attempt] = []
    latency: list[float] = []
    unbound = 0
    t0 = time.perf_counter()
    args = (env, live, first, total, rate, pending, created_at, progress, creator_errors)
    thread = threading.Thread(target=_create_and_delete, args=args, daemon=True)
    thread.start()
    while (pod := pending.get()) is not None:
        a = driver.schedule(pod, names)
        attempts.append(a)
        if a.node:
            latency.append((a.t1 - created_at[a.pod]) * 1000)
        else:
            unbound += 1
    thread.join()
    elapsed = time.perf_counter() - t0
    res = attempts_result(attempts, elapsed, t0)
    res["created"] = len(attempts)
    res["creator_errors"] = creator_errors
    res["created_to_bound_ms"] = summary(latency)
    res["not_bound"] = unbound
    res["env"] = env_info(env)
    driver.close()
    return res


def _create_and_delete(
    env: Env,
    live: list[tuple[str, list[dict[str, Any]]]],
    first: int,
    total: int,
    rate: float,
    pending: queue.Queue[dict[str, Any] | None],
    created_at: dict[str, float],
    progress: Progress,
    errors: list[str],
) -> None:
    """kube-controller-manager's side: a pod (and its claim) every 1/rate s, the oldest deleted."""
    start = time.perf_counter()
    try:
        for made in range(total):
            time.sleep(max(0.0, start + made / rate - time.perf_counter()))
            pc = PodClaim(first + made, "template")
            name, old = live.pop(0)
            env.delete(name, old)
            made_objs = env.create(pc.name, pc.objects())
            created_at[pc.name] = time.perf_counter()
            live.append((pc.name, pc.objects()))
            pending.put(next(o for o in made_objs if o["kind"] == "Pod"))
            progress.tick()
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        pending.put(None)
