"""`kubectl dra devices` marks what a ResourceSlicePatch set (issue 41 row 9).

The plugin reads the cluster and computes the patched view itself (the
chart's sidecar runs `--no-debug`, so this is the way to check a patch):
`-o wide` suffixes a patched attribute's value with `*`, names the patch per
attribute and capacity in a PATCHED column, and prints a legend; `-o json`
carries the same under `patched`. Against the fake API server, through the
plugin's entry point.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubectl_dra.cli import main
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import gpu_slice, node

DRIVER = "gpu.example.com"
MODEL = f"{DRIVER}/model"
MEMORY = f"{DRIVER}/memory"
LEGEND = "* set by a ResourceSlicePatch"


def patch(name: str, *, device: str = "gpu-0", priority: int = 0, model: str | None = "h100", memory: str | None = None,
          remove_model: bool = False) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"filter": {"driver": DRIVER, "pool": "node-b", "device": device}, "priority": priority}
    if model is not None or remove_model:
        spec["attributes"] = {MODEL: {"null": {}} if remove_model else {"string": model}}
    if memory is not None:
        spec["capacity"] = {MEMORY: {"value": memory}}
    return {"apiVersion": "resource.dra-extender.io/v1alpha1", "kind": "ResourceSlicePatch", "metadata": {"name": name},
            "spec": {"devices": spec}}  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    patches: list[dict[str, Any]]
    attributes: str  # gpu-0's ATTRIBUTES cell in -o wide
    patched_cell: str  # gpu-0's PATCHED cell
    patched_json: dict[str, dict[str, str]] = field(default_factory=lambda: {"attributes": {}, "capacity": {}})
    gpu1_json: dict[str, dict[str, str]] = field(default_factory=lambda: {"attributes": {}, "capacity": {}})


ROWS = [
    Row("no patch: nothing marked", [], f"{MODEL}=a100", "<none>"),
    Row("a patch sets the model", [patch("h100-board")], f"{MODEL}=h100*", f"{MODEL}=h100-board",
        {"attributes": {MODEL: "h100-board"}, "capacity": {}}),
    Row("two patches: the one of higher priority is named", [patch("low", model="b200"), patch("high", priority=10)],
        f"{MODEL}=h100*", f"{MODEL}=high", {"attributes": {MODEL: "high"}, "capacity": {}}),
    Row("a patch of capacity only", [patch("more-memory", model=None, memory="80Gi")], f"{MODEL}=a100",
        f"capacity:{MEMORY}=more-memory", {"attributes": {}, "capacity": {MEMORY: "more-memory"}}),
    Row("a patch of another device: gpu-0 unmarked", [patch("other", device="gpu-1")], f"{MODEL}=a100", "<none>",
        gpu1_json={"attributes": {MODEL: "other"}, "capacity": {}}),
    Row("a patch removing the model", [patch("no-model", remove_model=True)], "", f"{MODEL}=no-model",
        {"attributes": {MODEL: "no-model"}, "capacity": {}}),
]  # fmt: skip


async def _run(api: FakeApiServer, kubeconfig: Path, *argv: str) -> int:
    return await asyncio.to_thread(main, ["--kubeconfig", str(kubeconfig), *argv])


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_devices_marks_what_a_patch_set(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: Row) -> None:
    async with FakeApiServer() as api:
        api.create(node("node-b"))
        api.create(gpu_slice("node-b", 2, model="a100", memory="40Gi"))
        for p in row.patches:
            api.create(p)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        assert await _run(api, kubeconfig, "devices", "--node", "node-b", "-o", "wide") == 0
        wide, _ = capsys.readouterr()
        assert await _run(api, kubeconfig, "devices", "--node", "node-b", "-o", "json") == 0
        listed, _ = capsys.readouterr()
    lines = wide.splitlines()
    header = lines[0].split()
    assert header[-2:] == ["ATTRIBUTES", "PATCHED"], header
    [gpu0] = [line for line in lines if " gpu-0 " in line]
    cells = gpu0.split()
    assert cells[-1] == row.patched_cell, gpu0
    if row.attributes:
        assert cells[-2] == row.attributes, gpu0
    else:
        assert MODEL not in cells[-2], gpu0
    assert (LEGEND in wide) == bool(row.patches), wide
    by_device = {d["device"]: d for d in json.loads(listed)}
    assert by_device["gpu-0"]["patched"] == row.patched_json
    assert by_device["gpu-1"]["patched"] == row.gpu1_json


async def test_the_documented_check_of_the_example_patch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/resourceslicepatches.md: the demo cluster plus the example patch, checked as the page says (no /debug)."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "resourceslicepatches.md").read_text()
    said = ("`kubectl dra devices --node\nnode-b -o wide`", "`gpu.example.com/model=h100*`", "(`gpu.example.com/model=node-b-gpu-0-h100`)")
    assert all(s in page for s in said), said
    async with FakeApiServer() as api:
        api.load(root / "examples" / "demo-cluster", root / "examples" / "resourceslicepatches" / "node-b-gpu-0-h100.yaml")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        assert await _run(api, kubeconfig, "devices", "--node", "node-b", "-o", "wide") == 0
    wide, _ = capsys.readouterr()
    [gpu0] = [line for line in wide.splitlines() if " gpu-0 " in line]
    assert "gpu.example.com/model=h100*" in gpu0.split()[-2] and gpu0.split()[-1] == "gpu.example.com/model=node-b-gpu-0-h100", wide
    assert LEGEND in wide
