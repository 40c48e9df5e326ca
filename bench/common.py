"""What the benchmarks alone need: where results go, and the extender under cProfile.

The rest of what every benchmark uses (objects, processes, readings) is in
`kubesim`, shared with the tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from kubesim.processes import ROOT, start_server

RESULTS = ROOT / "bench" / "results"


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
