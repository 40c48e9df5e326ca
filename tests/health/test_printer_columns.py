"""`kubectl get` columns of the project's CRDs show what the controllers wrote, and `kubectl dra health` the rest (issue 41 row 8).

The API server prints a column as the first value its JSONPath finds
(apiextensions' table convertor), so each column here is evaluated the same
way over objects the real controllers wrote to the fake API server: a
typo'd path, a list where one value is shown, or a field the schema prunes
would print an empty or wrong cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesim.objects import node
from tests.eviction.harness import seed
from tests.health.harness import DRIVER, HealthCluster, alert, delivery, policy, uuid_slice, xid_rule
from tests.health.test_kubectl_health import dra

ROOT = Path(__file__).resolve().parents[2]
GROUP = "resource.dra-extender.io"


def columns(plural: str) -> dict[str, str]:
    crd = yaml.safe_load((ROOT / "deploy" / "crds" / f"{plural}.{GROUP}.yaml").read_text())
    return {c["name"]: c["jsonPath"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}


def first_value(obj: Any, path: str) -> Any:
    """The value `kubectl get` prints for a column: dotted fields and `[?(@.f=="v")]` filters, the first match."""
    values = [obj]
    for step in re.findall(r'\.([A-Za-z]+)|\[\?\(@\.(\w+)=="([^"]*)"\)\]', path):
        field, key, want = step
        if field:
            values = [v[field] for v in values if isinstance(v, dict) and field in v]
        else:
            values = [i for v in values if isinstance(v, list) for i in v if isinstance(i, dict) and i.get(key) == want]
    return values[0] if values else None


@dataclass(frozen=True)
class Row:
    name: str
    plural: str
    obj: str  # the object's name
    column: str
    want: Any


ROWS = [
    Row("a working policy is Ready", "devicehealthpolicies", "gpu-health", "Ready", "True"),
    Row("its mode is the Ready reason", "devicehealthpolicies", "gpu-health", "Reason", "Enforcing"),
    Row("the devices it holds at NoExecute", "devicehealthpolicies", "gpu-health", "NoExecute", 1),
    Row("and at NoSchedule (the other one, held by the guard)", "devicehealthpolicies", "gpu-health", "NoSchedule", 1),
    Row("the alerts that named no device", "devicehealthpolicies", "gpu-health", "Unmatched", 1),
    Row("the guard (1 per node) holds one", "devicehealthpolicies", "gpu-health", "Guard", "True"),
    Row("an invalid policy is not Ready", "devicehealthpolicies", "broken", "Ready", "False"),
    Row("and says why", "devicehealthpolicies", "broken", "Reason", "Invalid"),
    Row("a rule the health controller made is Ready", "devicetaintrules", "<health>", "Ready", "True"),
    Row("with its effect", "devicetaintrules", "<health>", "Effect", "NoExecute"),
    Row("a rule whose selector fails is not Ready", "devicetaintrules", "typo", "Ready", "False"),
    Row("and names the problem", "devicetaintrules", "typo", "Problem", "InvalidSelector"),
]


@pytest.fixture
async def written(cluster: HealthCluster) -> HealthCluster:
    typo = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "typo"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].uid == "x"'}}]},
            "taint": {"key": "example.com/typo", "effect": "NoSchedule"},
        },
    }
    bad = xid_rule(devices={"driver": DRIVER, "selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].uid == 'x'"}}]})
    seed(cluster.api, node("node-a"), uuid_slice(4), policy("gpu-health", xid_rule()), policy("broken", bad), typo)
    await cluster.start()
    await cluster.post(delivery(alert("GPU-node-a-1"), alert("GPU-node-a-2"), alert("GPU-nowhere")))
    await cluster.advance(301)  # NoSchedule, then NoExecute after the policy's default wait
    return cluster


async def test_printer_columns_show_what_the_controllers_wrote(written: HealthCluster) -> None:
    """One cluster for every row (a health cluster takes ~20 s to bring to NoExecute); each row named in the answer."""
    api = written.api
    health_rule = next(o for o in api.list("devicetaintrules", group=GROUP) if o["metadata"]["name"] != "typo")
    got, want = {}, {}
    for row in ROWS:
        obj = health_rule if row.obj == "<health>" else api.get(row.plural, None, row.obj, group=GROUP)
        got[row.name] = first_value(obj, columns(row.plural)[row.column])
        want[row.name] = row.want
    assert got == want

    # kubectl dra health: the invalid policy, and the alert that named no device.
    code, text = await dra(written, "health")
    assert code == 0
    lines = text.splitlines()
    table = lines[next(i for i, x in enumerate(lines) if x.startswith("POLICY")) :]
    assert table[0].split() == ["POLICY", "MODE", "RULE", "GUARD", "UNMATCHED"]
    broken = next(x for x in table if x.startswith("broken"))
    assert broken.split()[:3] == ["broken", "INVALID", "-"] and "fails at run time" in broken, broken
    health = next(x for x in table if x.startswith("gpu-health"))
    assert "1 (last 2026-01-01T00:00:00Z: no gpu.example.com device with gpu.example.com/uuid=GPU-nowhere" in health, health


def test_no_column_lists_what_only_its_first_value_would_show() -> None:
    for plural in ("devicehealthpolicies", "devicetaintrules", "resourceslicepatches"):
        for name, path in columns(plural).items():
            assert "[*]" not in path, f"{plural} column {name}: the API server prints the first value only"
