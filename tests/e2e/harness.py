"""Start `dra-extender serve` (or `controllers`, or `all`: both in one process) as a real subprocess on a free loopback port."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "samples"
DEMO = ROOT / "examples" / "demo-cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Extender:
    """`dra-extender COMMAND --listen 127.0.0.1:PORT ARGS`: `serve` (the verbs), `controllers` (its --listen serves
    the probes and /metrics) or `all` (both in one process, as `make run`)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, command: str = "serve") -> None:
        self.command = command
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"dra-extender-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dra_extender.cli", command, "--listen", f"127.0.0.1:{self.port}", *args],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"extender exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"extender not ready after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def post(self, verb: str, body: Any) -> httpx.Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(f"/{verb}", content=data, headers={"Content-Type": "application/json"})

    def stop(self) -> int:
        stop_process(self.proc)
        self.http.close()
        self._log.close()
        return self.proc.returncode


def sample(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / name).read_text())["body"]


def filter_args(pod_name: str, claims: list[dict[str, Any]] | None, nodes: list[str], *, statuses=None, uid=None) -> dict:
    """A real scheduler filter body (ncc-true-filter-2) re-pointed at a demo pod."""
    body = copy.deepcopy(sample("ncc-true-filter-2.json"))
    pod = body["Pod"]
    pod["metadata"]["name"] = pod_name
    pod["metadata"]["uid"] = uid or f"uid-{pod_name}"
    if claims is None:
        pod["spec"].pop("resourceClaims", None)
    else:
        pod["spec"]["resourceClaims"] = claims
    if statuses:
        pod["status"]["resourceClaimStatuses"] = statuses
    body["NodeNames"] = nodes
    return body


DEMO_UIDS = {
    "trainer": "5d0e3c2a-0000-4000-8000-000000000001",
    "maintenance-job": "5d0e3c2a-0000-4000-8000-000000000002",
    "pair": "5d0e3c2a-0000-4000-8000-000000000003",
    "templated": "5d0e3c2a-0000-4000-8000-000000000004",
    "plain": "5d0e3c2a-0000-4000-8000-000000000005",
    "gpu-and-nic": "5d0e3c2a-0000-4000-8000-000000000006",
}


def demo_pod_args(pod: str, nodes: list[str]) -> dict:
    """Filter args for a pod of the demo cluster, as the scheduler would send them."""
    claims = {
        "trainer": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
        "maintenance-job": [{"name": "gpu", "resourceClaimName": "maintenance-ok"}],
        "pair": [{"name": "gpu", "resourceClaimName": "two-gpus"}],
        "templated": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
        "plain": None,
        "gpu-and-nic": [{"name": "gpu", "resourceClaimName": "gpu-and-nic"}],
    }[pod]
    statuses = [{"name": "gpu", "resourceClaimName": "templated-gpu-x7k2p"}] if pod == "templated" else None
    return filter_args(pod, claims, nodes, statuses=statuses, uid=DEMO_UIDS[pod])
