"""What every benchmark needs: ports, percentiles, /proc readings, starting the extender."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def start_extender(args: list[str], port: int, log_path: Path, *, timeout: float = 600) -> tuple[subprocess.Popen, httpx.Client]:
    """`dra-extender serve ARGS --listen 127.0.0.1:PORT`, returned once /readyz answers 200."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender.cli", "serve", *args, "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    deadline = time.perf_counter() + timeout
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return proc, client
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the extender exited with {proc.returncode}:\n{log_path.read_text()[-5000:]}")
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(f"extender not ready after {timeout} s")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def start_extender_profiled(args: list[str], port: int, log_path: Path, profile_out: Path, *, timeout: float = 600) -> tuple[subprocess.Popen, httpx.Client]:
    """`start_extender` under cProfile: the profile is written to `profile_out` when the process stops (SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cProfile", "-o", str(profile_out), "-m", "extender.cli", "serve", *args, "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    deadline = time.perf_counter() + timeout
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return proc, client
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the extender exited with {proc.returncode}:\n{log_path.read_text()[-5000:]}")
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(f"extender not ready after {timeout} s")
        time.sleep(0.05)


def profile_top(profile: Path, limit: int = 25, *, sort: str = "tottime") -> str:
    """The top entries of a cProfile dump, as text."""
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(profile), stream=buf)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return buf.getvalue()
