"""The README walkthrough shows what the server really says."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.e2e.harness import DEMO, ROOT, Extender

pytestmark = pytest.mark.e2e

REQUESTS = ROOT / "examples" / "requests"
EXPECTED = REQUESTS / "expected"

# In walkthrough order: (request file, verb, expected output file)
STEPS = [
    ("filter-trainer", "filter", "filter-trainer"),
    ("filter-maintenance-job", "filter", "filter-maintenance-job"),
    ("filter-pair", "filter", "filter-pair"),
    ("filter-templated", "filter", "filter-templated"),
    ("filter-gpu-and-nic", "filter", "filter-gpu-and-nic"),
    ("filter-plain", "filter", "filter-plain"),
    ("prioritize-gpu-and-nic", "prioritize", "prioritize-gpu-and-nic"),
    ("bind-trainer", "bind", "bind-trainer"),
    ("filter-pair", "filter", "filter-pair-after-bind"),
    ("filter-reader", "filter", "filter-reader"),
    ("filter-populator", "filter", "filter-populator"),
]


def test_walkthrough_outputs_match_the_server(tmp_path) -> None:
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    ext = Extender("--source", str(directory))
    try:
        ext.wait_ready()
        for request, verb, expected in STEPS:
            body = (REQUESTS / f"{request}.json").read_bytes()
            got = ext.post(verb, body).json()
            want = json.loads((EXPECTED / f"{expected}.json").read_text())
            assert got == want, f"{request} ({verb}) differs from examples/requests/expected/{expected}.json"
    finally:
        ext.stop()


def test_readme_shows_the_expected_outputs() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", readme, re.S)]
    for _, _, expected in STEPS:
        if expected in ("filter-plain", "filter-populator"):
            continue
        assert json.loads((EXPECTED / f"{expected}.json").read_text()) in blocks, expected


def test_readme_quick_start_has_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    commands = [line.split("#")[0].strip() for line in re.findall(r"```sh\n(.*?)```", quick, re.S)[0].splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    assert "make run LISTEN=" in quick and "`--listen`" in quick, "the Quick start says how to pick another port"


def test_the_walkthrough_writes_only_into_a_copy() -> None:
    """The steps that add or edit manifests target the copy `make run SOURCE=` serves, never the tracked examples/."""
    readme = (ROOT / "README.md").read_text()
    walkthrough = readme.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    assert "cp -r examples/demo-cluster /tmp/demo\nmake run SOURCE=/tmp/demo" in walkthrough
    writes = re.findall(r"^cat > (\S+)", walkthrough, re.M)
    assert writes and all(w.startswith("/tmp/demo/") for w in writes), writes
    assert "under `/tmp/demo/` while it runs" in walkthrough and "`/tmp/demo/volumes.yaml`" in walkthrough
