"""What an operator sees: process and build metrics with honest types, clean log lines, device changes and /filter decisions."""

from __future__ import annotations

import json
import re
import shutil
from importlib.metadata import version

from tests.e2e.cluster import wait_for
from tests.e2e.harness import DEMO, ROOT, Extender

RULE = """apiVersion: resource.dra-extender.io/v1alpha1
kind: DeviceTaintRule
metadata: {name: drain-node-a}
spec:
  deviceSelector: {driver: gpu.example.com, pool: node-a}
  taint: {key: example.com/drain, effect: None}
"""


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def test_metrics_process_build_info_and_honest_types() -> None:
    ext = Extender("--source", str(DEMO))
    try:
        ext.wait_ready()
        ext.post("filter", (ROOT / "examples" / "requests" / "filter-maintenance-job.json").read_bytes())  # runs a CEL selector
        text = ext.http.get("/metrics").text
    finally:
        ext.stop()
    types = _types(text)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"):
        assert re.search(rf"^{name} \S+$", text, re.M), name
    [info] = re.findall(r"^dra_extender_build_info\{(.*)\} 1\.0$", text, re.M)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    assert labels["version"] == version("dra-extender") and re.fullmatch(r"3\.\d+\.\d+", labels["python"])
    assert {"resource.k8s.io/v1", "v1", "resource.dra-extender.io/v1alpha1"} <= set(labels["kubernetes_api_versions"].split(","))
    assert "_created" not in text
    assert "dra_extender_cel_cache{" not in text
    for name, kind in [
        ("dra_extender_cel_cache_lookups_total", "counter"),
        ("dra_extender_cel_evaluations_total", "counter"),
        ("dra_extender_cel_compilations_total", "counter"),
        ("dra_extender_cel_cache_devices", "gauge"),
        ("dra_extender_cel_cache_results", "gauge"),
    ]:
        assert types.get(name) == kind, (name, types.get(name))
    assert float(re.search(r'^dra_extender_cel_compilations_total\{result="ok"\} (\S+)$', text, re.M).group(1)) >= 1  # type: ignore[union-attr]


def test_logs_name_device_changes_and_filter_decisions(tmp_path) -> None:
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    ext = Extender("--source", str(directory), "--log-level", "debug")
    try:
        ext.wait_ready()
        assert "devices changed" not in ext.logs(), "the initial load is not a change"
        ext.post("filter", (ROOT / "examples" / "requests" / "filter-trainer.json").read_bytes())
        (directory / "drain-node-a.yaml").write_text(RULE)
        line = wait_for(
            lambda: next((x for x in ext.logs().splitlines() if "devices changed" in x and "drain-node-a" in x), None), what="the change"
        )
    finally:
        ext.stop()
    logs = ext.logs()
    assert " I dra_extender.devices: devices changed kind=DeviceTaintRule" in line and "taint=example.com/drain:None" in line, line
    assert logs.count("object=drain-node-a") == 1, "status writes and timeAdded stamps change nothing devices look like"
    [decision] = [x for x in logs.splitlines() if "filter decision" in x]
    assert " D dra_extender.filter: filter decision pod=default/trainer asked=3 fit=node-a,node-b" in decision, decision
    assert "'node-c': 'claim default/gpu-claim, request gpu: 0 of 1 devices available: 2 tainted" in decision
    assert "color_message" not in logs and "\x1b" not in logs
    assert " I uvicorn: Started server process" in logs and "uvicorn.error" not in logs


def test_json_logs_have_no_escape_codes() -> None:
    ext = Extender("--source", str(DEMO), "--log-format", "json")
    try:
        ext.wait_ready()
    finally:
        ext.stop()
    lines = [json.loads(x) for x in ext.logs().splitlines() if x.startswith("{")]
    uvicorn = [x for x in lines if x["logger"] == "uvicorn"]
    assert uvicorn and all("color_message" not in x for x in lines)
    assert "\\u001b" not in ext.logs() and "\x1b" not in ext.logs()
