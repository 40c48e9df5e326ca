"""What every workload shares: its configuration (--quick, the modes), its targets, and the same pods run in each mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.workloads.driver import Driver, env_info, run_pods
from bench.workloads.env import Env
from kubesim.measure import cpu_seconds


@dataclass
class Config:
    quick: bool = False
    modes: tuple[str, ...] = ("source", "cluster")

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def target(name: str, value: Any, limit: Any, ok: bool | None, unit: str = "", mode: str = "source") -> dict[str, Any]:
    return {"target": name, "value": value, "limit": limit, "unit": unit, "pass": ok, "mode": mode}


def run_modes(
    cfg: Config, tmp: Path, label: str, objs: list[dict[str, Any]], pods: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """The same pods, every node name offered, through the extender in each configured mode: mode -> result."""
    out: dict[str, Any] = {}
    for mode in cfg.modes:
        env = Env(mode, tmp, list(objs), label=label)
        try:
            env.start()
            print(f"    {label} {mode}: seeded in {env.seed_s:.1f} s, ready in {env.ready_s:.1f} s", flush=True)
            driver = Driver(env.url)
            assert env.proc is not None
            cpu0 = cpu_seconds(env.proc.pid)
            res = run_pods(driver, f"{label} {mode}", pods, lambda _k: names)
            # The extender's CPU (every thread, utime + stime) over the measured pods: the figure load does not inflate much.
            res["extender_cpu_ms_per_pod"] = round(1000 * (cpu_seconds(env.proc.pid) - cpu0) / max(1, len(pods)), 3)
            driver.close()
            res["env"] = env_info(env)
            out[mode] = res
        finally:
            env.stop()
    return out


def window(names: list[str], size: int) -> Callable[[int], list[str]]:
    """kube-scheduler's percentageOfNodesToScore: `size` names, starting where the last cycle stopped."""
    n = len(names)

    def names_for(k: int) -> list[str]:
        start = (k * size) % n
        return [names[(start + i) % n] for i in range(min(size, n))]

    return names_for
