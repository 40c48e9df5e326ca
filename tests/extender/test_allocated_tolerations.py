"""Which tolerations an allocated claim's request has: one rule (allocator.tolerations.allocated_tolerations)
for a new pod of the claim (/filter and /bind through the allocator's allocated-claim check, and
`kubectl dra`'s explain over the same allocator) and for its running pods (the eviction plan, which
`kubectl dra` shows). Every row is asked of both paths: a pod is admitted exactly when its running
siblings are spared (docs/design.md, "Taints and tolerations").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from allocator.allocation import REASON_NO_EXECUTE, Allocator
from allocator.cel import CelEnvironment
from allocator.types import DeviceID, Node
from controllers.eviction.plan import Ownership, plan_evictions
from tests.eviction.harness import DRIVER, claim_and_pod, gpu_slice, rule
from tracker import events as ev
from tracker.state import ClusterState

KEY = "example.com/broken"


def tol(*, key: str = KEY, seconds: int | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"key": key, "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


@dataclass(frozen=True)
class Row:
    name: str
    result: list[dict[str, Any]] = field(default_factory=list)  # copied into the allocation result
    spec: list[dict[str, Any]] = field(default_factory=list)  # the request's spec tolerations
    annotation: list[dict[str, Any]] | None = None  # the claim's tolerations annotation, as it is now
    tolerated: bool = True


ROWS = [
    Row("nothing tolerates", tolerated=False),
    Row("the result's tolerations", result=[tol()]),
    Row("a result tolerating another key", result=[tol(key="example.com/other")], tolerated=False),
    Row("annotation added after allocation, results carry other tolerations", result=[tol(key="example.com/other")], annotation=[tol()]),
    Row("annotation added after allocation, results carry tolerationSeconds", result=[tol(seconds=60)], annotation=[tol()]),
    Row("annotation on a server that dropped the results' tolerations", annotation=[tol()]),
    Row("annotation removed after allocation: the results keep what was copied", result=[tol()]),
    Row("spec tolerations a foreign allocator did not copy", spec=[tol()]),
    Row("an annotation tolerating another key adds nothing", result=[], annotation=[tol(key="example.com/other")], tolerated=False),
]


def _state(row: Row) -> ClusterState:
    claim, pod = claim_and_pod("p", 0, tolerations=row.result, annotation_tolerations=row.annotation)
    if row.spec:
        claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = row.spec
    state = ClusterState(CelEnvironment())
    for obj in (gpu_slice(1), rule("r1"), claim, pod):
        kind = obj["kind"]
        group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        state.apply(ev.ObjectEvent("ADDED", kind, group, ev.object_key(kind, obj), obj))
    return state


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_new_pods_are_admitted_exactly_when_running_pods_are_spared(row: Row) -> None:
    state = _state(row)
    claim = state.claims["default/p-gpu"]
    device = state.device(DeviceID(DRIVER, "node-a", "gpu-0"))
    assert device is not None and [t.key for t in device.taints] == [KEY]

    out = Allocator(state.cel).allocate(Node("node-a"), [claim], [], {}, {device.id}, state.device)
    plan = plan_evictions(state, Ownership(), lambda _d, _t, _s: 0.0)

    assert (out.ok, list(plan)) == ((True, []) if row.tolerated else (False, ["default/p"])), out.failure
    if not row.tolerated:
        assert out.failure is not None and out.failure.code == REASON_NO_EXECUTE
