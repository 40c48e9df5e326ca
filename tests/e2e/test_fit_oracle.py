"""The kube-scheduler model's fit oracle: which devices are free of NoSchedule/NoExecute rules, one row per selector shape.

Why: the oracle decides whether a rejected pod fitted (a wrong rejection fails the model's targets); it
looks each device up under its selector patterns instead of matching every rule, so every shape a rule's
selector may take is a row here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kubesim.objects import node_slice
from kubesim.scheduler.oracle import FitOracle

DEVICES = {("gpu.example.com", f"node-{n}", f"gpu-{d}") for n in range(2) for d in range(2)} | {("nic.example.com", "node-0", "gpu-0")}


@dataclass
class Cache:
    """What the oracle reads of an informer: its cache."""

    cache: dict[str, dict[str, Any]] = field(default_factory=dict)


def rule(name: str, selector: dict[str, str] | None, effect: str = "NoSchedule") -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": "k", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def free(upstream: list[dict[str, Any]], ours: list[dict[str, Any]], tainted_device: bool = False) -> set[tuple[str, str, str]]:
    slices = [node_slice(f"node-{n}", "gpu.example.com", [{"name": f"gpu-{d}"} for d in range(2)]) for n in range(2)]
    slices.append(node_slice("node-0", "nic.example.com", [{"name": "gpu-0"}]))
    if tainted_device:
        slices[0]["spec"]["devices"][1]["taints"] = [{"key": "k", "effect": "NoExecute"}]
    informers: dict[str, Any] = {
        "ResourceSlice": Cache({s["metadata"]["name"]: s for s in slices}),
        "DeviceTaintRule": Cache({r["metadata"]["name"]: r for r in upstream}),
        "DeviceTaintRule.dra-extender": Cache({r["metadata"]["name"]: r for r in ours}),
    }
    return FitOracle(informers).devices()  # type: ignore[arg-type]  # Cache is what the oracle reads of an Informer


GPU = "gpu.example.com"


@pytest.mark.parametrize(
    ("upstream", "ours", "tainted_device", "taken"),
    [
        pytest.param([], [], False, set(), id="no rules: every device"),
        pytest.param([rule("r", {"driver": GPU})], [], False, {d for d in DEVICES if d[0] == GPU}, id="driver: its devices"),
        pytest.param([], [rule("r", {"pool": "node-1"})], False, {d for d in DEVICES if d[1] == "node-1"}, id="pool of our rule"),
        pytest.param(
            [rule("r", {"device": "gpu-0"})], [], False, {d for d in DEVICES if d[2] == "gpu-0"}, id="device name in every pool and driver"
        ),
        pytest.param(
            [rule("r", {"driver": GPU, "pool": "node-0", "device": "gpu-1"})], [], False, {(GPU, "node-0", "gpu-1")}, id="one device"
        ),
        pytest.param([rule("r", {"driver": "nic.example.com", "pool": "node-1"})], [], False, set(), id="a pool the driver lacks: none"),
        pytest.param([rule("r", {})], [], False, DEVICES, id="empty selector: every device"),
        pytest.param([rule("r", None)], [], False, set(), id="no selector: none"),
        pytest.param([rule("r", {"driver": GPU}, "None")], [], False, set(), id="effect None: none"),
        pytest.param([], [rule("r", {"pool": "node-0"}, "NoExecute")], False, {d for d in DEVICES if d[1] == "node-0"}, id="NoExecute"),
        pytest.param(
            [rule("a", {"pool": "node-0", "device": "gpu-0"})],
            [rule("b", {"driver": GPU, "pool": "node-1"})],
            False,
            {("gpu.example.com", "node-0", "gpu-0"), ("nic.example.com", "node-0", "gpu-0")} | {d for d in DEVICES if d[1] == "node-1"},
            id="rules of both groups add up",
        ),
        pytest.param([], [], True, {(GPU, "node-0", "gpu-1")}, id="a device's own NoExecute taint"),
    ],
)
def test_devices_free_of_rules(
    upstream: list[dict[str, Any]], ours: list[dict[str, Any]], tainted_device: bool, taken: set[tuple[str, str, str]]
) -> None:
    assert free(upstream, ours, tainted_device) == DEVICES - taken
