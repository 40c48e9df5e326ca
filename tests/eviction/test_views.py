"""What the controller reads of pods, rules and taint sources, parsed once: a table per view, no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.parse import parse_pod
from allocator.pod_volumes import TOLERATIONS_ANNOTATION
from allocator.types import DeviceTaint, DeviceToleration
from controllers.eviction.plan import Ownership, PodEviction, TaintKind, TaintOrigin, TaintRef, device_origin
from controllers.eviction.rule_view import IN_TREE_MANAGER, RuleView
from controllers.eviction.volume_plan import merge
from tracker.events import GROUP_EXTENDER, GROUP_RESOURCE
from tracker.pod_status import PodCondition, PodStatus

ORIGINS = [
    ("slice", TaintKind.DEVICE, None, False),
    ("pending", TaintKind.DEVICE, None, False),
    (f"DeviceTaintRule/{GROUP_EXTENDER}/drain", TaintKind.RULE, (GROUP_EXTENDER, "drain"), True),
    (f"DeviceTaintRule/{GROUP_RESOURCE}/drain", TaintKind.RULE, (GROUP_RESOURCE, "drain"), False),
]


@pytest.mark.parametrize(("source", "kind", "rule", "ours"), ORIGINS)
def test_a_device_taint_source_is_parsed_into_its_origin(source: str, kind: TaintKind, rule: Any, ours: bool) -> None:
    origin = device_origin(source)
    assert (origin.source, origin.kind, origin.rule, origin.ours) == (source, kind, rule, ours)
    assert Ownership().owns(origin) is ours
    assert Ownership(evict_upstream=True).owns(origin)


def _eviction(*origins: TaintOrigin) -> PodEviction:
    taint = DeviceTaint("k", "NoExecute")
    reasons = tuple(TaintRef(f"{o.source}:{i}", o, taint, None, 0.0, 10.0) for i, o in enumerate(origins))
    return PodEviction("default/p", "uid-p", 0.0, 0.0, reasons, ("default/c",))


def test_a_pod_is_a_volume_eviction_only_when_volume_taints_alone_evict_it() -> None:
    pvc = TaintOrigin("PersistentVolumeClaim/default/data", TaintKind.VOLUME)
    pv = TaintOrigin("PersistentVolume/pv-1", TaintKind.VOLUME)
    rule = device_origin(f"DeviceTaintRule/{GROUP_EXTENDER}/drain")
    assert _eviction(pvc, pv).volume
    assert not _eviction(rule).volume
    merged = merge({"default/p": _eviction(rule)}, {"default/p": _eviction(pvc)})
    assert not merged["default/p"].volume
    assert [o.source for o in merged["default/p"].origins] == sorted([rule.source, pvc.source])


def test_pod_view() -> None:
    raw = {
        "metadata": {"uid": "u1", "annotations": {TOLERATIONS_ANNOTATION: '[{"key": "k", "operator": "Exists"}]'}},
        "status": {
            "conditions": [
                "not a condition",
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "False", "reason": "Other"},
                {"type": "DisruptionTarget", "status": "True", "reason": "Ours", "message": "m"},
            ]
        },
    }
    view = PodStatus.of(raw, parse_pod({**raw, "metadata": {**raw["metadata"], "name": "p"}}))
    assert view.uid == "u1"
    assert view.conditions[0] == PodCondition("Ready", "True", "")
    assert view.condition("DisruptionTarget", frozenset({"Ours"})) == PodCondition("DisruptionTarget", "True", "Ours")
    assert view.condition("DisruptionTarget", frozenset({"Nobody"})) is None
    assert view.volume_tolerations == (DeviceToleration(key="k", operator="Exists"),)
    malformed_raw = {"metadata": {"name": "p", "annotations": {TOLERATIONS_ANNOTATION: "[{"}}}
    malformed = PodStatus.of(malformed_raw, parse_pod(malformed_raw))
    assert (malformed.uid, malformed.conditions, malformed.volume_tolerations) == ("", (), ())


def test_rule_view() -> None:
    raw = {
        "apiVersion": f"{GROUP_EXTENDER}/v1alpha1",
        "metadata": {
            "uid": "r1",
            "generation": 3,
            "managedFields": [{"manager": IN_TREE_MANAGER, "subresource": "status"}],
        },
        "spec": {"taint": {"key": "k", "effect": "Evict-Everything", "timeAdded": "T1"}},
        "status": {"stampedTaint": {"effect": "None", "timeAdded": "T0"}, "conditions": [{"type": "X"}]},
    }
    view = RuleView.of(GROUP_EXTENDER, "drain", raw)
    assert (view.ident, view.uid, view.api_version) == ((GROUP_EXTENDER, "drain"), "r1", raw["apiVersion"])
    assert view.effect == "Evict-Everything" and view.in_tree_status
    assert (view.stamped.effect, view.stamped.time_added, view.stamped.recorded) == (
        "Evict-Everything",
        "T1",
        raw["status"]["stampedTaint"],
    )
    assert view.status is raw["status"]  # written back whole
    bare = RuleView.of(GROUP_RESOURCE, "x", {"spec": {"taint": {"effect": 1}}})
    assert (bare.uid, bare.effect, bare.in_tree_status, bare.stamped.recorded) == ("", None, False, None)
