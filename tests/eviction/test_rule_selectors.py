"""A DeviceTaintRule that taints nothing is said, not silently accepted (issue 41 row 3).

`kubectl dra taint` refuses a rule that matches no device (exit 2, naming
the flag that matched nothing; `--allow-empty` insists) and a `--selector`
that fails at run time, as it refuses one that does not compile;
`explain-rule` prints such a rule's run-time failure as a `Problem:` line;
the eviction controller writes the rule's own `Ready` condition. Against the
fake API server; the plugin runs its real entry point (exit codes), the
controller on the fake clock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kubectl_dra.cli import main
from kubesim.objects import gpu_slice, node
from tests.eviction.harness import CRD, DRIVER, Cluster, rule, seed

MISSING = 'device.attributes["gpu.example.com"].modle == "a100"'  # the attribute is `model`
FALSE = 'device.attributes["gpu.example.com"].model == "h100"'
TRUE = 'device.attributes["gpu.example.com"].model == "a100"'


def objects() -> list[dict]:
    return [node("node-a"), node("node-b"), gpu_slice("node-a", 2, model="a100"), gpu_slice("node-b", 2, model="a100")]


async def kubectl_dra(cluster: Cluster, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["--kubeconfig", str(cluster.kubeconfig), *argv])
    out, err = capsys.readouterr()
    return code, out, err


@dataclass(frozen=True)
class Row:
    name: str
    flags: tuple[str, ...]
    code: int
    says: str  # on stderr for a refusal, on stdout otherwise


ROWS = [
    Row("a typo in --pool", ("--driver", DRIVER, "--pool", "node-z"), 2,
        f"error: the rule would taint no device: --pool node-z matches no published device with --driver {DRIVER} "
        "(there are: node-a, node-b); pass --allow-empty to create it anyway"),
    Row("a typo in --driver", ("--driver", "gpu.exmaple.com"), 2,
        f"--driver gpu.exmaple.com matches no published device (there are: {DRIVER})"),
    Row("a --device no pool has", ("--pool", "node-a", "--device", "gpu-7"), 2,
        "--device gpu-7 matches no published device with --pool node-a (there are: gpu-0, gpu-1)"),
    Row("a --selector that fails at run time", ("--driver", DRIVER, "--selector", MISSING), 2,
        "error: --selector fails at run time: selector failed for device gpu.example.com/node-"),
    Row("a --selector no device satisfies", ("--driver", DRIVER, "--selector", FALSE), 2,
        f"--selector select none of the 4 device(s) --driver {DRIVER}"),
    Row("--allow-empty insists", ("--driver", DRIVER, "--pool", "node-z", "--allow-empty"), 0,
        f"devicetaintrule.{CRD}/r created"),
    Row("a rule that matches", ("--driver", DRIVER, "--pool", "node-b", "--selector", TRUE), 0, f"devicetaintrule.{CRD}/r created"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_taint_refuses_a_rule_that_taints_nothing(cluster: Cluster, capsys: pytest.CaptureFixture[str], row: Row) -> None:
    seed(cluster.api, *objects())
    code, out, err = await kubectl_dra(cluster, capsys, "taint", "example.com/maint:NoExecute", "--name", "r", *row.flags)
    assert code == row.code, (out, err)
    assert row.says in (out if code == 0 else err), (out, err)
    created = cluster.api.get("devicetaintrules", None, "r", group=CRD)
    assert (created is not None) == (code == 0), "a refused rule is not written"
    if "fails at run time" in row.says:
        assert "no such key: modle" in err and "(the extender would not taint a device it fails for)" in err


async def test_a_selector_failing_at_run_time_is_a_problem_and_the_rules_ready_condition(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cluster.api
    broken = rule("typo", "NoSchedule", selector={"driver": DRIVER, "selectors": [{"cel": {"expression": MISSING}}]})
    seed(api, *objects(), broken, rule("fine", "NoSchedule", selector={"driver": DRIVER, "pool": "node-a"}))
    await cluster.start()

    def ready(name: str) -> dict | None:
        obj = api.get("devicetaintrules", None, name, group=CRD) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), None)

    await cluster.run_until(lambda: ready("typo") is not None and ready("fine") is not None, within=30)
    typo = ready("typo")
    assert typo is not None and (typo["status"], typo["reason"]) == ("False", "InvalidSelector"), typo
    assert "no such key: modle" in typo["message"] and typo["message"].startswith("spec.deviceSelector: selector failed for device")
    fine = ready("fine")
    assert fine is not None and (fine["status"], fine["reason"]) == ("True", "Valid"), fine

    code, out, _ = await kubectl_dra(cluster, capsys, "explain-rule", "typo")
    problems = [line for line in out.splitlines() if line.startswith("Problem:")]
    assert code == 0 and len(problems) == 1 and "invalid: spec.deviceSelector: selector failed for device" in problems[0], out
    assert "no such key: modle" in problems[0]
    _, _, err = await kubectl_dra(cluster, capsys, "devices")
    assert "Warning: rule/typo: invalid: spec.deviceSelector: selector failed" in err, err

    # Fixed: Ready again, at once (a new generation).
    obj = api.get("devicetaintrules", None, "typo", group=CRD)
    obj["spec"]["deviceSelector"]["selectors"] = [{"cel": {"expression": TRUE}}]
    api.update(obj)
    await cluster.run_until(lambda: (ready("typo") or {}).get("status") == "True", within=30)
