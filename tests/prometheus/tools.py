"""Prometheus's own checkers, promtool and amtool (Debian's prometheus and prometheus-alertmanager; .ci/run installs them).

A test that needs one fails in CI (CI=true: a missing tool there is a broken install step, not a reason to pass)
and skips with the reason elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGES = {"promtool": "prometheus", "amtool": "prometheus-alertmanager"}


def tool(name: str) -> str:
    """The path of `name`: a failure under CI=true when it is missing, else a skip."""
    path = shutil.which(name)
    if path is not None:
        return path
    why = f"{name} is not installed (apt-get install {PACKAGES[name]})"
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"{why}: .ci/run installs it, so CI must have it")
    pytest.skip(why)


def run(name: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`name args...`, its output kept for the assertion's message."""
    return subprocess.run([tool(name), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
