"""Readings on a shared machine: percentiles, process memory and CPU, and the machine itself."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path
from typing import Any


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank below); 0 for no samples."""
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def proc_status_mb(pid: int, key: str = "VmRSS") -> float:
    """A memory figure of /proc/PID/status (VmRSS, VmHWM, ...) in MB; 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages ([] if unreadable)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def steal_seconds() -> float | None:
    """CPU time the hypervisor gave to other guests, summed over this machine's CPUs (/proc/stat); None off Linux.

    On a shared VM a run whose every latency is higher than its neighbours' (same code, same load average) is
    often one that lost CPU this way: the difference over a run is recorded with it.
    """
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def machine() -> dict[str, Any]:
    """Cores, CPU model, Python and platform, plus the load average: results on a shared machine need it."""
    model = ""
    with contextlib.suppress(OSError):
        model = next(
            (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), ""
        )
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


class Cpu:
    """CPU seconds of the processes of interest (and this one) over a phase."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = time.perf_counter()
        self.start = {k: cpu_seconds(p) for k, p in pids.items()}
        self.self0 = time.process_time()

    def done(self) -> dict[str, float]:
        wall = time.perf_counter() - self.t0
        out = {f"{k}_cpu_s": round(cpu_seconds(p) - self.start[k], 2) for k, p in self.pids.items()}
        out["bench_client_cpu_s"] = round(time.process_time() - self.self0, 2)
        out["wall_s"] = round(wall, 2)
        return out
