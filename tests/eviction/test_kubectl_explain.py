"""`kubectl dra explain-rule` shows the rule's actual EvictionInProgress condition, labelled as such.

At NoExecute the rule is acting: the condition the eviction controller wrote
(Completed, PodsPendingEviction, the count evicted) is the truth, and the
"if the effect was NoExecute ... Recreate the DeviceTaintRule" dry run would
contradict it. Against the fake API server with the real controller on a
fake clock; the plugin runs in process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from kubectl_dra.cli import build_parser, run
from kubesim.objects import node
from tests.eviction.harness import Cluster, claim_and_pod, gpu_slice, rule, seed
from tracker.clock import format_time

TOLERATES_10_MIN = [{"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}]


async def explain(cluster: Cluster, *argv: str) -> str:
    lines: list[str] = []
    args = build_parser().parse_args(["--kubeconfig", str(cluster.kubeconfig), "explain-rule", *argv])
    assert await run(args, lines.append) == 0
    return "\n".join(lines)


@dataclass(frozen=True)
class Row:
    name: str
    effect: str
    tolerations: list[dict[str, Any]] | None
    reason: str  # of the condition the controller writes
    says: list[str]  # lines (prefixes) the text has
    never: list[str] = field(default_factory=list)


ROWS = [
    Row(
        "NoExecute, drained: Completed, with the count evicted",
        "NoExecute",
        None,
        "Completed",
        ["Still to evict: no pods.", "Condition:  EvictionInProgress=False Completed, written 20"],
        ["if the effect was NoExecute", "Recreate the DeviceTaintRule", "As NoExecute it would evict", "Status:"],
    ),
    Row(
        "NoExecute, a pod tolerates for 10 minutes: PodsPendingEviction",
        "NoExecute",
        TOLERATES_10_MIN,
        "PodsPendingEviction",
        [
            "Still to evict: 1 pod in 1 namespace:",
            "Condition:  EvictionInProgress=True PodsPendingEviction, written 20",
        ],
        ["if the effect was NoExecute", "As NoExecute it would evict"],
    ),
    Row(
        "None: the dry run, which is also its condition",
        "None",
        None,
        "NoEffect",
        [
            "As NoExecute it would evict 1 pod in 1 namespace:",
            "Status:     1 published device selected.",
            "Condition:  EvictionInProgress=False NoEffect",
        ],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_explain_rule_shows_the_rules_actual_condition(cluster: Cluster, row: Row) -> None:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0, tolerations=row.tolerations))
    await cluster.start()
    api.create(rule("r", row.effect, timeAdded=format_time(cluster.clock.now())))
    written = api.get("devicetaintrules", None, "r", group="resource.dra-extender.io")

    def reason() -> str | None:
        obj = api.get("devicetaintrules", None, "r", group="resource.dra-extender.io") or {}
        return next((c["reason"] for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "EvictionInProgress"), None)

    await cluster.run_until(lambda: reason() == row.reason, within=60)
    text = await explain(cluster, "r")
    for line in row.says:
        assert any(t.startswith(line) for t in text.splitlines()), (line, text)
    for phrase in row.never:
        assert phrase not in text, (phrase, text)
    if row.reason == "Completed":
        assert text.rstrip().endswith("1 pod evicted since starting the controller."), text
    answer = json.loads(await explain(cluster, "r", "-o", "json"))
    assert answer["condition"]["reason"] == row.reason and written is not None
    assert (answer["dryRunMessage"] is None) == (row.effect == "NoExecute")


async def test_explain_rule_says_when_no_condition_is_written_yet(cluster: Cluster) -> None:
    """A NoExecute rule no controller has acted on (none runs, or none leads): said, not a hypothetical."""
    seed(cluster.api, node("node-a"), gpu_slice(1), *claim_and_pod("a", 0), rule("r", timeAdded=format_time(cluster.clock.now())))
    cluster.leading = False
    await cluster.start()
    text = await explain(cluster, "r")
    assert "Condition:  EvictionInProgress not written yet (the eviction controller writes it once it acts on the rule" in text
    assert "Still to evict: 1 pod in 1 namespace:" in text and "if the effect was NoExecute" not in text
