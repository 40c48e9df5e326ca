"""Pods, claims, rules and patches that come and go leave nothing behind in the cluster state (bounded memory under churn).

Every dict, set, list and deque reachable from a ClusterState through the
tracker's and allocator's objects is measured before and after a churn of
pods and claims; each must be back to its size before (bench/bench_churn_memory.py
measures the same over a running extender).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from kubesim import objects
from tracker import events as ev
from tracker.state import ClusterState, Problem

D = "gpu.example.com"
NS = "ns"
# Containers that grow by design, bounded another way: (path, why).
BOUNDED = {
    "state._changes._entries": "the change log: CHANGE_LOG_MAX entries at most, then its older half is dropped",
}


def container_sizes(root: object, prefix: str = "state") -> dict[str, int]:
    """path -> len() of every container attribute reachable from `root` through tracker/allocator objects."""
    out: dict[str, int] = {}
    seen: set[int] = set()

    def walk(obj: object, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        attrs = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
        for name, value in attrs.items():
            here = f"{path}.{name}"
            if isinstance(value, dict | set | frozenset | list | collections.deque):
                out[here] = len(value)
            elif not isinstance(value, type) and type(value).__module__.split(".")[0] in ("tracker", "allocator"):
                walk(value, here, depth + 1)

    walk(root, prefix, 0)
    return out


def pod(i: int, *, node: str = "", claim: str = "", volume: str = "", bad: bool = False) -> dict[str, Any]:
    """Pod p<i> with claim `dev` from template t (kubesim/objects.py); `claim`: the claim made for it."""
    spec: dict[str, Any] = {"resourceClaims": [{"name": 5}] if bad else [{"name": "dev", "resourceClaimTemplateName": "t"}]}
    if volume:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": volume}}]
    out = objects.pod(f"p{i}", NS, node_name=node, meta={"uid": f"u{i}"}, **spec)
    if claim:
        out["status"] = {"resourceClaimStatuses": [{"name": "dev", "resourceClaimName": claim}]}
    return out


def claim(i: int, rv: int, *, allocated: bool = False, bad: bool = False) -> dict[str, Any]:
    """Pod p<i>'s claim `dev` as made from its template (kubesim/objects.py); `bad`: a count the API refuses."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": f"p{i}", "uid": f"u{i}", "controller": True}
    out = objects.claim(
        f"p{i}-dev",
        NS,
        request="dev",
        exactly={"count": -1} if bad else None,
        uid=f"c{i}",
        resourceVersion=str(rv),
        annotations={"resource.kubernetes.io/pod-claim-name": "dev"},
        ownerReferences=[owner],
    )
    if allocated:
        out["status"] = {
            "allocation": {"devices": {"results": [{"request": "dev", "driver": D, "pool": "p1", "device": f"g{i % 4}"}]}},
            "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"}],
        }
    return out


def new_state(problems: list[Problem]) -> ClusterState:
    s = ClusterState(CelEnvironment(), on_problem=problems.append)
    s.apply(ev.ObjectEvent("ADDED", ev.NODE, "", "n1", {"metadata": {"name": "n1", "labels": {}}}))
    device_class = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]}}
    s.apply(ev.ObjectEvent("ADDED", ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "gpu", device_class))
    pool = {"name": "p1", "generation": 1, "resourceSliceCount": 1}
    slice_spec = {"driver": D, "nodeName": "n1", "pool": pool, "devices": [{"name": f"g{j}"} for j in range(4)]}
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", {"metadata": {"name": "s1"}, "spec": slice_spec}))
    template = {
        "metadata": {"name": "t", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": "gpu"}}]}}},
    }
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE, f"{NS}/t", template))
    return s


def _pod(s: ClusterState, kind: ev.EventType, raw: dict[str, Any]) -> None:
    s.apply(ev.ObjectEvent(kind, ev.POD, "", f"{NS}/{raw['metadata']['name']}", raw))


def _claim(s: ClusterState, kind: ev.EventType, raw: dict[str, Any]) -> None:
    s.apply(ev.ObjectEvent(kind, ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"{NS}/{raw['metadata']['name']}", raw))


def scheduled_and_deleted(s: ClusterState, i: int) -> None:
    """The lifecycle of a pod with a claim from a template, as the watch brings it: scheduled, bound, deleted, its claim released."""
    name = f"p{i}-dev"
    _pod(s, "ADDED", pod(i))
    _claim(s, "ADDED", claim(i, 1))
    _pod(s, "MODIFIED", pod(i, claim=name))
    _claim(s, "MODIFIED", claim(i, 2, allocated=True))
    _pod(s, "MODIFIED", pod(i, node="n1", claim=name))
    _pod(s, "DELETED", pod(i, node="n1", claim=name))
    _claim(s, "MODIFIED", claim(i, 3))
    _claim(s, "DELETED", claim(i, 3))


def deleted_while_the_watch_was_down(s: ClusterState, i: int) -> None:
    """Bound, then gone by the next re-list (a DELETED without the object)."""
    _pod(s, "ADDED", pod(i, node="n1", claim=f"p{i}-dev", volume="data"))
    _claim(s, "ADDED", claim(i, 1, allocated=True))
    s.replace(ev.POD, "", [])
    s.replace(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, [])


def faulty_claim(s: ClusterState, i: int) -> None:
    _claim(s, "ADDED", claim(i, 1, bad=True))
    _claim(s, "DELETED", claim(i, 1, bad=True))


def faulty_pod(s: ClusterState, i: int) -> None:
    _pod(s, "ADDED", pod(i, bad=True))
    _pod(s, "DELETED", pod(i, bad=True))


def taint_rule(s: ClusterState, i: int) -> None:
    """A DeviceTaintRule per device and alert, as the health controller creates and deletes them."""
    selector = {"driver": D, "pool": "p1", "device": f"g{i}", "deviceClassName": f"class-{i}"}
    body = {"metadata": {"name": f"r{i}"}, "spec": {"deviceSelector": selector, "taint": {"key": "k", "effect": "NoExecute"}}}
    s.apply(ev.ObjectEvent("ADDED", ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, f"r{i}", body))
    s.apply(ev.ObjectEvent("DELETED", ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, f"r{i}", body))


def slice_patch(s: ClusterState, i: int) -> None:
    devices = {"filter": {"driver": D, "pool": "p1", "device": f"g{i}", "deviceClassName": f"class-{i}"}, "priority": 0}
    body = {"metadata": {"name": f"sp{i}", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"devices": devices}}
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, f"sp{i}", body))
    s.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, f"sp{i}", body))


@pytest.mark.parametrize(
    "lifecycle",
    [
        pytest.param(scheduled_and_deleted, id="pod-and-claim-scheduled-bound-deleted"),
        pytest.param(deleted_while_the_watch_was_down, id="deleted-while-the-watch-was-down"),
        pytest.param(faulty_claim, id="faulty-claim-created-and-deleted"),
        pytest.param(faulty_pod, id="faulty-pod-created-and-deleted"),
        pytest.param(taint_rule, id="device-taint-rule-created-and-deleted"),
        pytest.param(slice_patch, id="slice-patch-created-and-deleted"),
    ],
)
def test_churn_leaves_every_structure_at_its_size(lifecycle: Callable[[ClusterState, int], None]) -> None:
    problems: list[Problem] = []
    s = new_state(problems)
    assert not problems
    for i in range(5):  # anything a first object sets up once
        lifecycle(s, i)
    before = container_sizes(s)
    for i in range(5, 305):
        lifecycle(s, i)
    after = container_sizes(s)
    grown = {path: (before.get(path, 0), n) for path, n in after.items() if n > before.get(path, 0) and path not in BOUNDED}
    assert not grown, f"grew over 300 objects created and deleted: {grown}"
    assert len(before) > 30  # the walk reached the state's parts


def test_a_faulty_claim_created_again_is_reported_again() -> None:
    """Deleted and re-created under the same name, it is a new object: its Warning is recorded on it too."""
    problems: list[Problem] = []
    s = new_state(problems)
    assert not problems
    faulty_claim(s, 1)
    faulty_claim(s, 1)
    assert [(p.name, p.uid) for p in problems] == [(f"{NS}/p1-dev", "c1")] * 2
