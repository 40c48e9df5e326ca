"""The README walkthrough shows what the server really says."""

from __future__ import annotations

import json
import re
import shutil

from tests.e2e.harness import DEMO, ROOT, Extender

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
    ext = Extender("--source", str(directory), command="all")
    printed: dict[str, list[str]] = {}
    try:
        ext.wait_ready()
        for request, verb, expected in STEPS:
            body = (REQUESTS / f"{request}.json").read_bytes()
            response = ext.post(verb, body)
            got = response.json()
            printed.setdefault(request, []).append(response.text)  # in walkthrough order, as the README shows them
            want = json.loads((EXPECTED / f"{expected}.json").read_text())
            assert got == want, f"{request} ({verb}) differs from examples/requests/expected/{expected}.json"
    finally:
        ext.stop()
    _readme_shows_what_curl_prints(printed)


def _readme_shows_what_curl_prints(printed: dict[str, list[str]]) -> None:
    """Each `curl ... @examples/requests/R.json` block is followed by exactly what that command prints: the body as
    the server sends it, or as `python3 -m json.tool` (4-space indent, ASCII escapes) re-prints it when piped."""
    readme = (ROOT / "README.md").read_text()
    pairs = re.findall(r"```sh\n(curl [^\n]*@examples/requests/([\w-]+)\.json[^\n]*)\n```\n```json\n(.*?)\n```", readme, re.S)
    assert pairs, "no curl example followed by its output in the README"
    for command, request, shown in pairs:
        if not printed.get(request):
            continue
        raw = printed[request].pop(0)
        want = json.dumps(json.loads(raw), indent=4) if "json.tool" in command else raw
        assert shown == want, f"README: the output shown after `{command}` is not what it prints:\n{want}"


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
