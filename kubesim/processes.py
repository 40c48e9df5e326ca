"""Starting and stopping the servers a run needs: the fake API server, dra-extender or any extender-like command."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_fake_api(tmp: Path, *extra_args: str, module: str = "kubesim.fakeapi") -> tuple[subprocess.Popen[str], str, Path]:
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
    line = proc.stdout.readline()  # type: ignore[union-attr]  # started with stdout=PIPE
    if not line:
        raise RuntimeError((tmp / "fakeapi.log").read_text())
    return proc, json.loads(line)["url"], kubeconfig


def seed(http: httpx.Client, objects: list[dict[str, Any]], batch: int = 2000) -> None:
    """Create `objects` in the fake API server (its /_fake/objects control endpoint), `batch` to a request."""
    for i in range(0, len(objects), batch):
        http.post(
            "/_fake/objects",
            content=orjson.dumps({"kind": "List", "items": objects[i : i + batch]}),
            headers={"Content-Type": "application/json"},
        ).raise_for_status()


def start_extender(args: list[str], port: int, log_path: Path, *, timeout: float = 600) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """`dra-extender serve ARGS --listen 127.0.0.1:PORT`, returned once /readyz answers 200."""
    return start_server(
        [sys.executable, "-m", "dra_extender.cli", "serve", *args, "--listen", f"127.0.0.1:{port}"], port, log_path, timeout=timeout
    )


def start_server(
    cmd: list[str], port: int, log_path: Path, *, timeout: float = 600, new_session: bool = False
) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """Any extender-like server command listening on 127.0.0.1:PORT, returned once its /readyz answers 200.

    `new_session`: in a process group of its own, so that a wrapper (a profiler) and the server stop together.
    """
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=new_session)
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


def stop_process(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
