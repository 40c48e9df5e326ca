"""dra_extender_eviction_oldest_due_timestamp_seconds: when the earliest pending eviction fell due.

The DraExtenderEvictionOverdue alert (deploy/prometheus/dra-extender-rules.yaml) is `time()` minus it: an
eviction still pending long after its tolerationSeconds ran out (a PodDisruptionBudget, failing deletes), as
opposed to one still waiting out its toleration, which is not overdue at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from kubesim.objects import node
from tests.eviction.harness import T0, Cluster, claim_and_pod, gpu_slice, rule, seed
from tracker.clock import format_time


def seconds(n: int) -> dict:
    return {"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": n}


def pdb(min_available: int) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainers", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}}, "minAvailable": min_available},
    }


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    tolerations: tuple[int | None, ...]  # per pod: its tolerationSeconds, or None for no toleration
    budget: int | None  # a PodDisruptionBudget's minAvailable over the pods (evict mode), or None (delete mode)
    leading: bool
    after: float  # fake seconds after the rule was added
    pending: int
    oldest_due: float | None  # seconds after T0, or None for the gauge's 0


ROWS = (
    Row("waiting out tolerationSeconds is not overdue: due at the toleration's end", (60, 90), None, True, 30, 2, 60.0),
    Row("blocked by a PodDisruptionBudget: due since the taint was added", (None, None, None), 2, True, 120, 2, 0.0),
    Row("every pod gone: nothing pending", (None, None), None, True, 30, 0, None),
    Row("a follower plans nothing: 0", (None,), None, False, 30, 0, None),
)


def gauge(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} is not on /metrics"
    return float(found.group(1))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_oldest_due_eviction(cluster: Cluster, row: Row) -> None:
    api = cluster.api
    pods = [
        o
        for i, t in enumerate(row.tolerations)
        for o in claim_and_pod(f"p{i}", i, tolerations=[seconds(t)] if t is not None else [], labels={"app": "trainer"})
    ]
    extra = [pdb(row.budget)] if row.budget is not None else []
    seed(api, node("node-a"), gpu_slice(len(row.tolerations)), *pods, *extra)
    cluster.leading = row.leading
    ctrl = await cluster.start(mode="evict" if row.budget is not None else "delete")
    api.create(rule("gpu-broken", timeAdded=format_time(T0)))
    await cluster.advance(row.after)

    text = ctrl.metrics.render().decode()
    assert gauge(text, "dra_extender_eviction_pending_pods") == row.pending
    want = 0.0 if row.oldest_due is None else T0 + row.oldest_due
    assert gauge(text, "dra_extender_eviction_oldest_due_timestamp_seconds") == pytest.approx(want, abs=1.0)
