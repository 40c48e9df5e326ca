"""What every benchmark needs: ports, percentiles, /proc readings, starting the fake API server and the extender."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def device_class(name: str, driver: str) -> dict[str, Any]:
    """A DeviceClass selecting every device of `driver`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def node_slice(node: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A node-local ResourceSlice: one pool per node, named after it, generation 1, one slice."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


PARTITIONS_GI = (10, 10, 10, 10, 20, 20, 40)  # per GPU; first-fit takes the four 10Gi ones, then the counters are spent
GPU_GI = 40


def partitioned_slices(node: str, driver: str, gpus: int) -> list[dict[str, Any]]:
    """A node's pool of `gpus` partitionable GPUs: a device slice (7 partitions per GPU, each consuming
    its GPU's counters) and a counter-set slice (one 40Gi set per GPU), as drivers publish MIG-style layouts."""
    devices = []
    counter_sets = []
    for g in range(gpus):
        counter_sets.append({"name": f"gpu-{g}", "counters": {"memory": {"value": f"{GPU_GI}Gi"}}})
        for p, size in enumerate(PARTITIONS_GI):
            devices.append(
                {
                    "name": f"gpu-{g}-part-{p}",
                    "capacity": {"memory": {"value": f"{size}Gi"}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": f"{size}Gi"}}}],
                }
            )
    dev_slice = node_slice(node, driver, devices)
    counters = node_slice(node, driver, [])
    counters["metadata"]["name"] = f"{node}-{driver}-counters"
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = counter_sets
    for s in (dev_slice, counters):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    return [dev_slice, counters]


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


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


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


def start_fake_api(tmp: Path, *extra_args: str, module: str = "kubesim.fakeapi") -> tuple[subprocess.Popen, str, Path]:
    """`python -m kubesim.fakeapi` (or `module`) in a subprocess: (process, URL, kubeconfig path); its log is TMP/fakeapi.log."""
    kubeconfig = tmp / "kubeconfig.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            module,
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            "--history-limit",
            "1000000",
            *extra_args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=(tmp / "fakeapi.log").open("wb"),
        text=True,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise RuntimeError((tmp / "fakeapi.log").read_text())
    return proc, json.loads(line)["url"], kubeconfig


def start_extender(args: list[str], port: int, log_path: Path, *, timeout: float = 600) -> tuple[subprocess.Popen, httpx.Client]:
    """`dra-extender serve ARGS --listen 127.0.0.1:PORT`, returned once /readyz answers 200."""
    return start_server(
        [sys.executable, "-m", "extender.cli", "serve", *args, "--listen", f"127.0.0.1:{port}"], port, log_path, timeout=timeout
    )


def start_server(cmd: list[str], port: int, log_path: Path, *, timeout: float = 600) -> tuple[subprocess.Popen, httpx.Client]:
    """Any extender-like server command listening on 127.0.0.1:PORT, returned once its /readyz answers 200."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    deadline = time.perf_counter() + timeout
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return proc, client
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:4]} exited with {proc.returncode}:\n{log_path.read_text()[-5000:]}")
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(f"{cmd[:4]} not ready after {timeout} s")
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


def start_extender_profiled(
    args: list[str], port: int, log_path: Path, profile_out: Path, *, timeout: float = 600
) -> tuple[subprocess.Popen, httpx.Client]:
    """`start_extender` under cProfile: the profile is written to `profile_out` when the process stops (SIGTERM)."""
    cmd = [sys.executable, "-m", "cProfile", "-o", str(profile_out), "-m", "extender.cli", "serve", *args, "--listen", f"127.0.0.1:{port}"]
    return start_server(cmd, port, log_path, timeout=timeout)


def profile_top(profile: Path, limit: int = 25, *, sort: str = "tottime") -> str:
    """The top entries of a cProfile dump, as text."""
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(profile), stream=buf)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return buf.getvalue()
