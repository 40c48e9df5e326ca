"""Hostile CEL selectors in every object that carries one, against `dra-extender serve` on a copy
of the demo cluster: the main loop keeps turning (/livez), verbs are answered (/filter) and
SIGTERM stops the process, whichever object the selector is in.

The selector compiles 1,500 distinct regular expressions that RE2 refuses for their size
(each 50-90 ms of compiling before it gives up): well inside the static cost estimate, and
before the compile charge, minutes of work per device on the main loop.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import DEMO, Extender, demo_pod_args, free_port

HOSTILE = "[" + ",".join(str(i) for i in range(1500)) + '].all(i, !"a".matches("\\\\pL{1000}" + string(i)))'
GPU = "gpu.example.com"
NODES = ["node-a", "node-b", "node-c"]


def _hostile_class(directory: Path) -> None:
    """The GPU class itself: every GPU's class membership runs the selector."""
    text = (directory / "deviceclasses.yaml").read_text()
    old = f'expression: device.driver == "{GPU}"'
    assert old in text
    (directory / "deviceclasses.yaml").write_text(text.replace(old, "expression: " + json.dumps(f'device.driver == "{GPU}" && {HOSTILE}')))


def _hostile_rule(directory: Path) -> None:
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",  # the upstream version whose rules carry CEL selectors (1.33-1.34)
        "kind": "DeviceTaintRule",
        "metadata": {"name": "hostile-rule"},
        "spec": {
            "deviceSelector": {"driver": GPU, "selectors": [{"cel": {"expression": HOSTILE}}]},
            "taint": {"key": "example.com/hostile", "effect": "NoSchedule"},
        },
    }
    (directory / "hostile.yaml").write_text(json.dumps(rule))


def _hostile_patch(directory: Path) -> None:
    patch = {
        "apiVersion": "resource.dra-extender.io/v1alpha1",
        "kind": "ResourceSlicePatch",
        "metadata": {"name": "hostile-patch"},
        "spec": {
            "devices": {
                "filter": {"driver": GPU, "selectors": [{"cel": {"expression": HOSTILE}}]},
                "attributes": {f"{GPU}/model": {"string": "h100"}},
            }
        },
    }
    (directory / "hostile.yaml").write_text(json.dumps(patch))


def _hostile_claim(directory: Path) -> None:
    """The trainer's claim selects with it (row 2: stopped by its cost, not the /filter budget)."""
    text = (directory / "claims.yaml").read_text()
    assert "name: gpu-claim" in text
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu-claim", "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "selectors": [{"cel": {"expression": HOSTILE}}]}}]}
        },
    }
    docs = [d for d in text.split("\n---\n") if "name: gpu-claim\n" not in d]
    (directory / "claims.yaml").write_text("\n---\n".join([*docs, json.dumps(claim)]))


KINDS = [
    # name, how to make the demo hostile, seconds of probing, what the trainer's reason names
    ("device-class", _hostile_class, 20, [f"class {GPU}", "cost limit exceeded"]),
    ("taint-rule", _hostile_rule, 6, []),
    ("slice-patch", _hostile_patch, 6, []),
    ("claim", _hostile_claim, 6, ["claim default/gpu-claim", "cost limit exceeded"]),
]


@pytest.mark.parametrize(("name", "make_hostile", "seconds", "reason"), KINDS, ids=[k[0] for k in KINDS])
def test_hostile_selector_never_holds_the_loop(tmp_path: Path, name: str, make_hostile: Any, seconds: int, reason: list[str]) -> None:
    """/livez answers 200 within 1 s every 2 s, /filter answers within 5 s, SIGTERM ends it within 10 s."""
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    make_hostile(directory)
    probe_port = free_port()
    ext = Extender("--source", str(directory), "--probe-listen", f"127.0.0.1:{probe_port}")
    probe = f"http://127.0.0.1:{probe_port}"
    try:
        ext.wait_ready()
        answers: list[Any] = []

        def filter_trainer() -> None:
            started = time.monotonic()
            try:
                r = httpx.post(ext.url + "/filter", json=demo_pod_args("trainer", NODES), timeout=5)
                answers.append((time.monotonic() - started, r.json()))
            except httpx.HTTPError as e:
                answers.append((time.monotonic() - started, e))

        filtering = threading.Thread(target=filter_trainer, daemon=True)
        filtering.start()
        failures = []
        for _ in range(seconds // 2):
            tick = time.monotonic()
            for url in (ext.url, probe):
                try:
                    r = httpx.get(url + "/livez", timeout=1)
                    if r.status_code != 200:
                        failures.append(f"{url}: {r.status_code} {r.text}")
                except httpx.HTTPError as e:
                    failures.append(f"{url}: {type(e).__name__}")
            time.sleep(max(0.0, 2 - (time.monotonic() - tick)))
        filtering.join(10)
        assert not failures, failures
        assert answers, "/filter did not return"
        took, result = answers[0]
        assert isinstance(result, dict), f"/filter failed after {took:.1f} s: {result!r}"
        assert took < 5, f"/filter took {took:.1f} s"
        assert result["Error"] == "", result
        if reason:
            for node, why in result["FailedAndUnresolvableNodes"].items():
                for part in reason:
                    assert part in why, (node, why)
        assert ext.http.get("/readyz").status_code == 200
    finally:
        started = time.monotonic()
        ext.proc.send_signal(signal.SIGTERM)
        try:
            code = ext.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        took_to_stop = time.monotonic() - started
        ext.stop()
    assert code is not None, f"SIGTERM did not stop the extender within 10 s ({took_to_stop:.1f} s)"


@pytest.mark.parametrize("at_start", [False, True], ids=["rule-added-later", "rule-there-at-start"])
def test_costly_rule_selector_over_many_devices_is_computed_in_slices(tmp_path: Path, at_start: bool) -> None:
    """A DeviceTaintRule whose selector is legal but slow (~20 ms per device) over 512 devices is
    ~10 s of work: it is done in slices, so the loop keeps turning (/livez with a 1 s stall
    threshold stays 200), /filter answers, the taint lands on every device (and no device is left
    provisional), and SIGTERM works; whether the rule comes after the slices or the slices after it."""
    from tests.e2e.test_hostile import HEAVY, claim_pod, write_cluster

    nodes = write_cluster(tmp_path / "c", nodes=4, devices=128, claims={"plain": f'device.driver == "{GPU}"'})
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",  # the upstream version whose rules carry CEL selectors (1.33-1.34)
        "kind": "DeviceTaintRule",
        "metadata": {"name": "slow-rule"},
        "spec": {
            "deviceSelector": {"driver": GPU, "selectors": [{"cel": {"expression": HEAVY}}]},
            "taint": {"key": "example.com/slow", "effect": "NoSchedule"},
        },
    }
    if at_start:
        (tmp_path / "c" / "a-rule.yaml").write_text(json.dumps(rule))
    ext = Extender("--source", str(tmp_path / "c"), "--livez-stall-threshold", "1")
    try:
        if not at_start:
            ext.wait_ready()
            (tmp_path / "c" / "rule.yaml").write_text(json.dumps(rule))
        failures: list[str] = []
        filtered: list[float] = []
        tainted = pending = 0
        up = False  # the HTTP server is listening (before, connections are refused)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                # The extender's own stall check (--livez-stall-threshold 1) answers 503 past 1 s; the client
                # waits longer, so a slow start on a busy machine is not mistaken for a stall.
                r = httpx.get(ext.url + "/livez", timeout=3)
                up = True
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text}")
                ready = httpx.get(ext.url + "/readyz", timeout=3).status_code == 200
            except httpx.ConnectError:
                if up:
                    failures.append("ConnectError")
                ready = False
            except httpx.HTTPError as e:
                failures.append(type(e).__name__)
                ready = False
            if ready:
                started = time.monotonic()
                result = httpx.post(ext.url + "/filter", json=claim_pod("plain", nodes), timeout=5).json()
                filtered.append(time.monotonic() - started)
                page = ext.http.get("/debug/devices", params={"limit": 1000}).json()["items"]
                tainted = sum(1 for d in page if "example.com/slow" in str(d.get("taints")))
                pending = sum(1 for d in page if "selectors-pending" in str(d.get("taints")))
                if tainted == 4 * 128 and not pending and result["NodeNames"] == [] and result["Error"] == "":
                    break
            time.sleep(0.5)
        assert not failures, failures
        assert tainted == 4 * 128 and not pending, f"{tainted} of 512 devices tainted, {pending} pending"
        assert filtered and max(filtered) < 5, filtered
    finally:
        started = time.monotonic()
        ext.proc.send_signal(signal.SIGTERM)
        try:
            code = ext.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        ext.stop()
    assert code is not None, f"SIGTERM did not stop the extender within 10 s ({time.monotonic() - started:.1f} s)"
