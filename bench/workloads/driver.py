"""The sequential driver ("extender alone"): /filter, /prioritize, /bind for one pod at a time, timed."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.workloads.env import Env, start_noop
from kubesim.measure import cpu_seconds, pct, proc_status_mb
from kubesim.processes import stop_process


@dataclass
class Attempt:
    pod: str
    t0: float
    t1: float = 0.0
    filter_ms: float = 0.0
    prioritize_ms: float | None = None
    bind_ms: float | None = None
    feasible: int = 0
    node: str | None = None
    error: str = ""
    failed: dict[str, str] = field(default_factory=dict)


class Driver:
    """kube-scheduler's calls to one extender, one pod at a time (the scheduling cycle is sequential)."""

    def __init__(self, url: str, seed: int = 1) -> None:
        self.http = httpx.Client(base_url=url, timeout=120, headers={"Content-Type": "application/json"})
        self.rng = random.Random(seed)

    def close(self) -> None:
        self.http.close()

    def schedule(
        self, pod: dict[str, Any], names: list[str], *, exclude: frozenset[str] = frozenset(), bind: bool = True, keep_failed: bool = False
    ) -> Attempt:
        meta = pod["metadata"]
        a = Attempt(meta["name"], time.perf_counter())
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        r = self.http.post("/filter", content=orjson.dumps(args))
        t = time.perf_counter()
        a.filter_ms = (t - a.t0) * 1000
        res = orjson.loads(r.content)
        if r.status_code != 200 or res.get("Error"):
            a.error = res.get("Error") or f"HTTP {r.status_code}"
        feasible = [n for n in res.get("NodeNames") or [] if n not in exclude]
        a.feasible = len(feasible)
        if keep_failed:
            a.failed = {**(res.get("FailedNodes") or {}), **(res.get("FailedAndUnresolvableNodes") or {})}
        if not feasible or not bind:
            a.t1 = time.perf_counter()
            return a
        best = feasible[0]
        if len(feasible) > 1:
            args["NodeNames"] = feasible
            t = time.perf_counter()
            scores = orjson.loads(self.http.post("/prioritize", content=orjson.dumps(args)).content)
            a.prioritize_ms = (time.perf_counter() - t) * 1000
            top = max(s["Score"] for s in scores)
            best = self.rng.choice([s["Host"] for s in scores if s["Score"] == top])
        t = time.perf_counter()
        r = self.http.post(
            "/bind", content=orjson.dumps({"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best})
        )
        a.bind_ms = (time.perf_counter() - t) * 1000
        a.error = orjson.loads(r.content).get("Error") or ""
        a.node = None if a.error else best
        a.t1 = time.perf_counter()
        return a


class Progress:
    def __init__(self, label: str, total: int, every: float = 5.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.t0 = self.last = time.perf_counter()
        self.done = 0

    def tick(self, n: int = 1, extra: str = "") -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            left = (self.total - self.done) / rate if rate and self.total else 0
            width = 30
            filled = int(width * self.done / self.total) if self.total else width
            print(
                f"    [{'#' * filled}{'.' * (width - filled)}] {self.label}: {self.done}/{self.total}, {rate:.0f}/s, ~{left:.0f} s left {extra}",
                flush=True,
            )


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(pct(values, 0.5), 2),
        "p90": round(pct(values, 0.9), 2),
        "p99": round(pct(values, 0.99), 2),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def run_pods(driver: Driver, label: str, pods: list[dict[str, Any]], names_for: Callable[[int], list[str]], **kw: Any) -> dict[str, Any]:
    """Schedule `pods` in order; pods/s, latency per verb, completions over time."""
    attempts: list[Attempt] = []
    progress = Progress(label, len(pods))
    t0 = time.perf_counter()
    for k, pod in enumerate(pods):
        a = driver.schedule(pod, names_for(k), **kw)
        attempts.append(a)
        progress.tick(extra=f"filter {a.filter_ms:.1f} ms")
    elapsed = time.perf_counter() - t0
    return attempts_result(attempts, elapsed, t0)


def attempts_result(attempts: list[Attempt], elapsed: float, t0: float) -> dict[str, Any]:
    bound = sum(1 for a in attempts if a.node)
    unschedulable = sum(1 for a in attempts if not a.feasible)
    return {
        "pods": len(attempts),
        "bound": bound,
        "unschedulable": unschedulable,
        "bind_errors": sorted({a.error for a in attempts if a.error})[:5],
        "seconds": round(elapsed, 2),
        "pods_per_s": round(len(attempts) / elapsed, 1) if elapsed else None,
        "latency_ms": {
            "filter": summary([a.filter_ms for a in attempts]),
            "prioritize": summary([a.prioritize_ms for a in attempts if a.prioritize_ms is not None]),
            "bind": summary([a.bind_ms for a in attempts if a.bind_ms is not None]),
            "pod": summary([(a.t1 - a.t0) * 1000 for a in attempts]),
        },
        "samples": {
            "filter_ms": [round(a.filter_ms, 3) for a in attempts],
            "done_s": [round(a.t1 - t0, 3) for a in attempts],
        },
    }


def env_info(env: Env) -> dict[str, Any]:
    return {
        "seed_s": round(env.seed_s, 2),
        "ready_s": round(env.ready_s, 2),
        "rss_mb": round(proc_status_mb(env.proc.pid, "VmRSS"), 1) if env.proc else None,
        "peak_rss_mb": round(proc_status_mb(env.proc.pid, "VmHWM"), 1) if env.proc else None,
        "extender_cpu_s": round(cpu_seconds(env.proc.pid), 1) if env.proc else None,
    }


def noop_runs(tmp: Path, label: str, pods: list[dict[str, Any]], names_for: Callable[[int], list[str]]) -> dict[str, Any]:
    proc, url = start_noop(tmp)
    try:
        driver = Driver(url)
        out = run_pods(driver, f"{label} no-op", pods, names_for)
        driver.close()
        return out
    finally:
        stop_process(proc)
