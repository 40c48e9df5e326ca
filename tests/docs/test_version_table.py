"""The support table's per-version claims, checked against what the code does with each version's objects.

The table (docs/operator-guide.md, the same in README.md) says per minor what
the API server keeps of a gated field and which shape it accepts; each test
builds the objects as that minor's API server stores them and runs the
extender's parsing on them (issue 41, rows 10, 14 and 15).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from allocator.parse import ValidationError, parse_device_taint_rule, parse_resource_claim, parse_resource_slice
from allocator.tolerations import allocated_tolerations, request_tolerations, untolerated_blocking_taints
from allocator.types import TOLERATIONS_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("1.34", "1.35", "1.36")
DRIVER = "gpu.example.com"
TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}

# Upstream per minor with the alpha gates at their defaults (read from each minor's API strategy and validation):
# 1.34's ResourceClaim strategy drops no DRADeviceTaints field, 1.35's drops claim tolerations; 1.34 validates
# devices against the `sharedCounters` of their own slice, 1.35 allows only one of the two in a slice.
UPSTREAM_TOLERATIONS = {"1.34": "kept", "1.35": "dropped", "1.36": "kept"}
UPSTREAM_COUNTERS = {"1.34": "one slice", "1.35": "separate slices", "1.36": "separate slices"}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("|")]


def _feature_rows() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs" / "operator-guide.md").read_text()
    table = re.findall(r"<!-- support-table -->\n(.*?)<!-- /support-table -->", text, re.S)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    header = next(line for line in lines if line.startswith("| DRA feature"))
    columns = _cells(header)
    rows = {}
    for line in lines[lines.index(header) + 2 :]:
        cells = _cells(line)
        rows[cells[0]] = dict(zip(columns, cells, strict=True))
    return rows


def _row(prefix: str) -> dict[str, str]:
    found = [row for name, row in _feature_rows().items() if name.startswith(prefix)]
    assert len(found) == 1, f"one support-table row starting {prefix!r}"
    return found[0]


def _state(cell: str) -> str:
    """`alpha, off: kept` -> `kept`: what the API server does at that minor's defaults."""
    assert ": " in cell, f"{cell!r}: the cell says per minor what the API server does (`<gate state>: <what>`)"
    return cell.rpartition(": ")[2]


def _tainted_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "taints": [{"key": TOLERATION["key"], "effect": "NoSchedule"}]}],
        },
    }


def _claim_as_served(tolerations: str) -> dict[str, Any]:
    """An allocated claim tolerating the taint, as the API server stores it: `kept` in spec and results, else the annotation."""
    kept = tolerations == "kept"
    exactly: dict[str, Any] = {"deviceClassName": "gpu", **({"tolerations": [TOLERATION]} if kept else {})}
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
    if kept:
        result["tolerations"] = [TOLERATION]
    meta: dict[str, Any] = {"name": "c", "namespace": "default", "uid": "u1"}
    if not kept:  # what the docs say to use where the API server drops them
        meta["annotations"] = {TOLERATIONS_ANNOTATION: json.dumps({"gpu": [TOLERATION]})}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_claim_tolerations_per_minor_are_honoured_as_the_table_says(version: str) -> None:
    row = _row("Tolerations in claims")
    served = _state(row[version])
    assert served == UPSTREAM_TOLERATIONS[version], f"{version}: the API server's claim tolerations with the default gates"
    if served == "kept" and row[version].startswith("alpha, off"):  # kept with the gate off: the docs say so
        assert f"{version}'s API server keeps" in row["dra-extender"] and "no annotation needed" in row["dra-extender"]
    claim = parse_resource_claim(_claim_as_served(served))
    assert (TOLERATIONS_ANNOTATION in claim.meta.annotations) == (served == "dropped")
    taints = parse_resource_slice(_tainted_slice()).devices[0].taints
    assert untolerated_blocking_taints(taints, request_tolerations(claim, "gpu")) == [], f"{version}: the pending request"
    assert claim.allocation is not None
    result = claim.allocation.results[0]
    assert untolerated_blocking_taints(taints, allocated_tolerations(claim, result)) == [], f"{version}: the allocated result"


def _counter_slices(shape: str) -> list[dict[str, Any]]:
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]
    devices = [{"name": "half-a", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "20Gi"}}}]}]
    pool = {"name": "node-a", "generation": 1, "resourceSliceCount": 1 if shape == "one slice" else 2}

    def one(name: str, **spec: Any) -> dict[str, Any]:
        body = {"driver": DRIVER, "nodeName": "node-a", "pool": pool, **spec}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}

    if shape == "one slice":
        return [one("node-a", sharedCounters=counters, devices=devices)]
    return [one("node-a-counters", sharedCounters=counters), one("node-a-devices", devices=devices)]


@pytest.mark.parametrize("version", VERSIONS)
def test_partitionable_shapes_per_minor_are_what_the_table_says(version: str) -> None:
    row = _row("Partitionable devices")
    shape = _state(row[version])
    assert shape == UPSTREAM_COUNTERS[version], f"{version}: the shape the API server accepts"
    slices = _counter_slices(shape)
    assert [parse_resource_slice(s).meta.name for s in slices] == [s["metadata"]["name"] for s in slices]
    if shape == "one slice":
        assert f"{version}'s alpha shape" in row["dra-extender"]
        stray = {**slices[0], "spec": {**slices[0]["spec"], "sharedCounters": [{"name": "gpu-1", "counters": {"memory": {"value": "1"}}}]}}
        with pytest.raises(ValidationError) as refused:  # as 1.34 validates: a device consumes its own slice's sets
            parse_resource_slice(stray)
        assert refused.value.field == "spec.devices[0].consumesCounters[0].counterSet", refused.value


@dataclass(frozen=True)
class RuleCase:
    name: str
    api_version: str
    group: str
    honoured: bool  # deviceClassName and selectors are read (else refused, naming the field)


RULE_CASES = [
    RuleCase("v1alpha3 of 1.33-1.34", "resource.k8s.io/v1alpha3", "resource.k8s.io", True),
    RuleCase("v1beta2 (1.36) has neither field", "resource.k8s.io/v1beta2", "resource.k8s.io", False),
    RuleCase("v1 has neither field", "resource.k8s.io/v1", "resource.k8s.io", False),
    RuleCase("the project's CRD keeps both", "resource.dra-extender.io/v1alpha1", "resource.dra-extender.io", True),
]


def test_design_names_the_minors_whose_v1alpha3_rules_carry_class_and_selectors() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    found = re.findall(r"A v1alpha3 rule from (1\.\d+)–(1\.\d+) may still carry", design)
    assert found == [("1.33", "1.34")], "1.35's v1alpha3 removed deviceClassName and selectors"


@pytest.mark.parametrize("case", RULE_CASES, ids=[c.name for c in RULE_CASES])
def test_device_taint_rule_class_and_selectors_per_served_version(case: RuleCase) -> None:
    raw = {
        "apiVersion": case.api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "deviceClassName": "gpu", "selectors": [{"cel": {"expression": "true"}}]},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }
    if case.honoured:
        rule = parse_device_taint_rule(raw, group=case.group)
        assert rule.selector is not None and rule.selector.device_class_name == "gpu" and rule.selector.selectors
        return
    with pytest.raises(ValidationError) as refused:
        parse_device_taint_rule(raw, group=case.group)
    assert refused.value.field == "spec.deviceSelector.deviceClassName"
    assert case.api_version in refused.value.reason and "1.33-1.34" in refused.value.reason


@pytest.mark.parametrize("version", VERSIONS)
def test_feature_gate_defaults_per_minor_are_what_the_extender_assumes(version: str) -> None:
    """Each row with an extender flag says the gate's state per minor; the extender takes that minor's (from /version)."""
    from allocator.features import GATES, defaults_for

    features = defaults_for(int(version.split(".")[1]))
    for field_name, gate in GATES.items():
        row = _row(next(name for name in _feature_rows() if f"({gate})" in name))
        cell = row[version].partition(":")[0]
        assert f"`--feature-{field_name.replace('_', '-')}`" == row["extender flag"], row
        assert cell.endswith(", on" if getattr(features, field_name) else ", off"), (gate, version, cell)
