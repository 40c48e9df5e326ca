"""`kubectl dra why` says when the extender was unreachable or not leading, from kube-scheduler's own Events (issue 41 row 4).

`why` computes its answer on this machine with the extender's code, which
says "2 of 2 nodes fit" even while the extender is down. kube-scheduler's
latest FailedScheduling Event on the pod says otherwise: `why` reads it,
names an unreachable or non-leading extender, and shows the Event whenever
it disagrees with the local answer. Events as kube-scheduler writes them,
on the fake API server; the plugin runs in process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubectl_dra.cli import build_parser, run
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import node, pod

REFUSED = (
    '0/2 nodes are available: Post "http://127.0.0.1:8888/filter": dial tcp 127.0.0.1:8888: connect: connection refused. '
    "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
)
TIMEOUT = 'Post "http://127.0.0.1:8888/filter": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
NOT_LEADER = 'running Bind plugin "DefaultBinder": extender dra-extender: bind: not leader'
OTHER = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found."


def event(message: str, at: str, *, uid: str = "uid-trainer", name: str = "trainer.1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "trainer", "uid": uid, "apiVersion": "v1"},
        "reason": "FailedScheduling",
        "message": message,
        "type": "Warning",
        "lastTimestamp": at,
        "source": {"component": "dra-scheduler"},
    }


@dataclass(frozen=True)
class Row:
    name: str
    events: list[dict] = field(default_factory=list)
    says: list[str] = field(default_factory=list)  # lines the output has
    extender: str | None = None  # in -o json


ROWS = [
    Row("no Event: the local answer only"),
    Row(
        "the extender refused the connection",
        [event(REFUSED, "2026-01-01T00:00:10Z")],
        [
            "the extender was unreachable when kube-scheduler last tried (below)",
            f"kube-scheduler's latest FailedScheduling Event (2026-01-01T00:00:10Z): {REFUSED}",
        ],
        "unreachable",
    ),
    Row("the extender timed out", [event(TIMEOUT, "2026-01-01T00:00:10Z")], ["the extender was unreachable"], "unreachable"),
    Row("no replica leads", [event(NOT_LEADER, "2026-01-01T00:00:10Z")], ["the extender answered 'not leader'"], "not leading"),
    Row(
        "kube-scheduler disagrees for another reason: the Event is shown",
        [event(OTHER, "2026-01-01T00:00:10Z")],
        [f"kube-scheduler's latest FailedScheduling Event (2026-01-01T00:00:10Z): {OTHER}"],
    ),
    Row(
        "the latest Event counts, not an earlier one",
        [event(REFUSED, "2026-01-01T00:00:10Z"), event(OTHER, "2026-01-01T00:05:00Z", name="trainer.2")],
        [f"kube-scheduler's latest FailedScheduling Event (2026-01-01T00:05:00Z): {OTHER}"],
    ),
    Row("an Event of an earlier pod of the same name is not this pod's", [event(REFUSED, "2026-01-01T00:00:10Z", uid="uid-old")]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_why_says_what_kube_scheduler_said(tmp_path: Path, row: Row) -> None:
    async with FakeApiServer() as api:
        for obj in (node("node-a"), node("node-b"), pod("trainer", scheduler="dra-scheduler", meta={"uid": "uid-trainer"}), *row.events):
            api.create(obj)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        lines: list[str] = []
        assert await run(build_parser().parse_args(["--kubeconfig", kubeconfig, "why", "trainer"]), lines.append) == 0
        answer: list[str] = []
        assert await run(build_parser().parse_args(["--kubeconfig", kubeconfig, "why", "trainer", "-o", "json"]), answer.append) == 0
    text = "\n".join(lines)
    assert "2 of 2 nodes fit" in text
    for line in row.says:
        assert any(x.startswith(line) for x in lines), (line, text)
    if not row.says:
        assert "FailedScheduling" not in text and "extender was" not in text, text
    says = json.loads("\n".join(answer))["schedulerSays"]
    assert (says or {}).get("extender") == row.extender
