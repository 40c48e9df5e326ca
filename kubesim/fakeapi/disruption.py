"""`pods/eviction` as the real API server answers it: PodDisruptionBudgets are honoured.

A PDB covers the pods of its namespace that its `spec.selector` matches;
the pods counted as healthy are those not being deleted and not finished
(the fake has no readiness). As the disruption controller computes it, an
eviction is allowed while healthy pods exceed the desired healthy count:
`minAvailable`, or the expected pods minus `maxUnavailable` (percentages of
the expected pods, rounded up). Refused: 429 with a DisruptionBudget cause. A pod covered by two PDBs is a 500, as
upstream. When it proceeds, the pod gets `DisruptionTarget=True` (reason
`EvictionByEvictionAPI`) before it is deleted.
"""

from __future__ import annotations

import math
from typing import Any

from kubesim.fakeapi.store import ApiError, Store, now_rfc3339


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector; an empty one matches everything, a missing one nothing (policy/v1)."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _healthy(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def check_eviction(store: Store, namespace: str, pod: dict[str, Any]) -> None:
    """Raise the API server's 429 (or 500) if a PodDisruptionBudget forbids evicting `pod`."""
    if not _healthy(pod):
        return  # evicting an unhealthy or terminating pod never counts against a budget
    pdb_type = store.registry.types.get(("policy", "poddisruptionbudgets"))
    pod_type = store.registry.types[("", "pods")]
    if pdb_type is None:
        return
    labels = pod["metadata"].get("labels") or {}
    budgets = [
        s.obj
        for (ns, _), s in store.table(pdb_type).items()
        if ns == namespace and selector_matches((s.obj.get("spec") or {}).get("selector"), labels)
    ]
    if not budgets:
        return
    if len(budgets) > 1:
        raise ApiError(
            500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.", "InternalError"
        )
    pdb = budgets[0]
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    covered = [
        s.obj
        for (ns, _), s in store.table(pod_type).items()
        if ns == namespace and selector_matches(spec.get("selector"), s.obj["metadata"].get("labels") or {})
    ]
    healthy = sum(1 for p in covered if _healthy(p))
    # The disruption controller's expected count comes from the workload's scale; the fake has
    # none, so it takes the pods covered at the first eviction and keeps them in the status.
    expected = status.get("expectedPods")
    if not isinstance(expected, int):
        expected = len(covered)
        store.patch(
            pdb_type, namespace, pdb["metadata"]["name"], {"status": {"expectedPods": expected}}, "merge", subresource="status", http=False
        )
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected - _scaled(spec.get("maxUnavailable", 0), expected)
    name = pdb["metadata"]["name"]
    if healthy - desired <= 0:  # the disruption controller's disruptionsAllowed
        raise ApiError(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            "TooManyRequests",
            details={
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently",
                    }
                ]
            },
        )


def disruption_condition() -> dict[str, Any]:
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": now_rfc3339(),
    }
