"""The layering rule (docs/design.md#architecture) held by import-linter rather than by memory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: " in result.stdout and " broken" in result.stdout


# name -> (module that gets the bad import, the import, the contract that must name it)
BAD_IMPORTS = {
    "controllers -> extender": ("controllers/foreign_pods.py", "import extender.service", "layers: the command and kubectl dra"),
    "controllers -> webhook": ("controllers/eviction/planner.py", "import webhook.review", "layers: the command and kubectl dra"),
    "controllers -> the command": ("controllers/health/wiring.py", "import dra_extender.process", "layers: the command and kubectl dra"),
    "extender -> controllers": ("extender/requeue.py", "import controllers.eviction", "layers: the command and kubectl dra"),
    "webhook -> controllers": ("webhook/review.py", "import controllers.foreign_pods", "layers: the command and kubectl dra"),
    "webhook -> extender": ("webhook/app.py", "import extender.wire", "layers: the command and kubectl dra"),
    "serving -> extender": ("serving/logs.py", "import extender.service", "layers: the command and kubectl dra"),
    "serving -> controllers": ("serving/probes.py", "import controllers.eviction", "layers: the command and kubectl dra"),
    "tracker -> serving": ("tracker/clock.py", "import serving.metrics", "layers: the command and kubectl dra"),
    "eviction -> health": (
        "controllers/eviction/planner.py",
        "import controllers.health.policy",
        "controllers: eviction, health and the foreign-pod check",
    ),
    "serve command -> controllers": ("dra_extender/serve.py", "import controllers.eviction", "command: serve runs the verbs alone"),
    "controllers command -> extender": (
        "dra_extender/controllers.py",
        "import extender.service",
        "command: the controllers' process never loads",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_IMPORTS))
def test_a_bad_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    """Each contract fails on a deliberate bad import, in a copy of the tree (the import cache copied with it)."""
    module, line, contract = BAD_IMPORTS[case]
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns(
        ".venv", ".git", ".pytest_cache", "__pycache__", "*.egg-info", "tests", "docs", "examples", "charts", "deploy"
    )
    shutil.copytree(ROOT, copy, ignore=ignore)
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # noqa: F401, E402\n")
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(copy / "pyproject.toml")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(copy)},
    )
    assert result.returncode != 0, result.stdout
    # The report wraps long names: read it as one line, where each contract's name is followed by KEPT or BROKEN.
    report = " ".join(result.stdout.split())
    at = report.find(contract)
    assert at >= 0, result.stdout[-3000:]
    verdict = report[at:]
    assert verdict.find(" BROKEN") < (verdict.find(" KEPT") % (len(verdict) + 1)), result.stdout[-3000:]
    importer = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert importer in result.stdout, result.stdout[-3000:]
