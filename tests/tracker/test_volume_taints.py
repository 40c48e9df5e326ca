"""Volume taints and tolerations: parsing, matching (the device toleration function), admission, stamping."""

from __future__ import annotations

import json

import pytest

import allocator.tolerations
import tracker.volumes
from allocator.parse import parse_pod
from allocator.pod_volumes import MalformedAnnotation, parse_tolerations
from allocator.types import DeviceTaint, DeviceToleration
from tracker.volumes import (
    PV,
    PVC,
    VolumeIndex,
    admission_verdict,
    parse_taints,
    stamp_time_added,
)

NOT_READY = DeviceTaint("example.com/data-not-ready", "NoAttachOrMount", "true")
MIGRATING = DeviceTaint("example.com/migrating", "NoUse")


def tol(**fields: object) -> DeviceToleration:
    (parsed,) = parse_tolerations(json.dumps([fields]))
    return parsed


def test_matching_is_the_device_toleration_function() -> None:
    """Not a copy: the module uses the allocator's function object (and the eviction plan its `eviction_time`)."""
    assert tracker.volumes.taint_tolerated is allocator.tolerations.taint_tolerated


MATCH_CASES = [
    # name, toleration (annotation fields), taint, tolerated, seconds (None: for good)
    ("equal-key-value-effect", {"key": "example.com/data-not-ready", "value": "true", "effect": "NoAttachOrMount"}, NOT_READY, True, None),
    ("equal-is-the-default-operator", {"key": "example.com/data-not-ready", "value": "true"}, NOT_READY, True, None),
    ("equal-value-differs", {"key": "example.com/data-not-ready", "value": "false"}, NOT_READY, False, None),
    ("exists-any-value", {"key": "example.com/data-not-ready", "operator": "Exists"}, NOT_READY, True, None),
    ("exists-key-differs", {"key": "example.com/other", "operator": "Exists"}, NOT_READY, False, None),
    ("empty-key-exists-matches-all", {"operator": "Exists"}, MIGRATING, True, None),
    ("empty-key-exists-with-effect-differs", {"operator": "Exists", "effect": "NoUse"}, NOT_READY, False, None),
    ("empty-effect-matches-no-use", {"key": "example.com/migrating", "operator": "Exists"}, MIGRATING, True, None),
    ("effect-differs", {"key": "example.com/migrating", "operator": "Exists", "effect": "NoAttachOrMount"}, MIGRATING, False, None),
    (
        "no-use-with-seconds",
        {"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse", "tolerationSeconds": 30},
        MIGRATING,
        True,
        30,
    ),
    (
        "no-use-zero-seconds-evicts-at-once",
        {"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse", "tolerationSeconds": 0},
        MIGRATING,
        True,
        0,
    ),
    (
        "no-use-negative-seconds-evicts-at-once",
        {"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse", "tolerationSeconds": -5},
        MIGRATING,
        True,
        0,
    ),
]


@pytest.mark.parametrize(("toleration", "taint", "tolerated", "seconds"), [c[1:] for c in MATCH_CASES], ids=[c[0] for c in MATCH_CASES])
def test_toleration_matching(toleration: dict[str, object], taint: DeviceTaint, tolerated: bool, seconds: int | None) -> None:
    parsed = tol(**toleration)
    assert allocator.tolerations.tolerates_taint(parsed, taint) is tolerated
    added = 1000.0
    want = (None if seconds is None else added + seconds) if tolerated else allocator.tolerations.NOW
    assert allocator.tolerations.eviction_time(taint, (parsed,), added) == want


MALFORMED_TOLERATIONS = [
    ("not-json", "[{"),
    ("not-a-list", '{"key": "k"}'),
    ("item-not-object", '["k"]'),
    ("unknown-operator", '[{"key": "k", "operator": "Gt"}]'),
    ("exists-with-value", '[{"key": "k", "operator": "Exists", "value": "v"}]'),
    ("empty-key-needs-exists", '[{"value": "v"}]'),
    ("seconds-without-no-use", '[{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]'),
    ("seconds-not-integer", '[{"key": "k", "operator": "Exists", "effect": "NoUse", "tolerationSeconds": "5"}]'),
    ("key-not-string", '[{"key": 5, "operator": "Exists"}]'),
]


@pytest.mark.parametrize("text", [c[1] for c in MALFORMED_TOLERATIONS], ids=[c[0] for c in MALFORMED_TOLERATIONS])
def test_malformed_tolerations_are_refused(text: str) -> None:
    with pytest.raises(MalformedAnnotation):
        parse_tolerations(text)


MALFORMED_TAINTS = [
    ("not-json", '[{"key": "k", "effect": "NoUse"'),
    ("not-a-list", '{"key": "k", "effect": "NoUse"}'),
    ("missing-key", '[{"effect": "NoUse"}]'),
    ("missing-effect", '[{"key": "k"}]'),
    ("value-not-string", '[{"key": "k", "value": true, "effect": "NoUse"}]'),
    # As the API server refuses a malformed metav1.Time; before, the time was dropped (the clock restarted each restart)
    # or a zone-less one read as the machine's local time.
    ("time-added-not-a-time", '[{"key": "k", "effect": "NoUse", "timeAdded": "yesterday"}]'),
    ("time-added-without-a-zone", '[{"key": "k", "effect": "NoUse", "timeAdded": "2026-01-01T00:00:00"}]'),
    ("time-added-a-date-alone", '[{"key": "k", "effect": "NoUse", "timeAdded": "2026-01-01"}]'),
]


@pytest.mark.parametrize("text", [c[1] for c in MALFORMED_TAINTS], ids=[c[0] for c in MALFORMED_TAINTS])
def test_malformed_taints_are_refused(text: str) -> None:
    with pytest.raises(MalformedAnnotation):
        parse_taints(text)


def test_unknown_taint_effects_are_ignored() -> None:
    assert parse_taints('[{"key": "k", "effect": "Degraded"}, {"key": "j", "effect": "NoUse"}]') == (DeviceTaint("j", "NoUse"),)


def _obj(kind: str, name: str, taints: object = None, volume_name: str = "") -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "uid": f"uid-{name}"}
    if taints is not None:
        meta["annotations"] = {tracker.volumes.TAINTS_ANNOTATION: taints if isinstance(taints, str) else json.dumps(taints)}
    return {"kind": kind, "metadata": meta, "spec": {"volumeName": volume_name} if volume_name else {}}


ADMISSION_CASES = [
    # name, pvc taints, pv taints, bound, tolerations, reason substring (None: admitted)
    ("untainted", None, None, True, (), None),
    (
        "pv-taint-not-tolerated",
        None,
        [{"key": "k", "effect": "NoAttachOrMount"}],
        True,
        (),
        "volume claim default/data (pv pv-1): taint k:NoAttachOrMount not tolerated",
    ),
    (
        "pvc-taint-not-tolerated",
        [{"key": "k", "value": "v", "effect": "NoUse"}],
        None,
        True,
        (),
        "volume claim default/data (pv pv-1): taint k=v:NoUse not tolerated",
    ),
    ("pv-taint-tolerated", None, [{"key": "k", "effect": "NoAttachOrMount"}], True, ({"key": "k", "operator": "Exists"},), None),
    ("unbound-pvc-carries-only-its-own", None, [{"key": "k", "effect": "NoAttachOrMount"}], False, (), None),
    ("malformed-closes-whatever-the-tolerations", "[oops", None, True, ({"operator": "Exists"},), "annotation of the claim is malformed"),
    ("malformed-pv-closes", None, '[{"key": 1}]', True, ({"operator": "Exists"},), "annotation of the pv is malformed"),
]


@pytest.mark.parametrize(
    ("pvc_taints", "pv_taints", "bound", "tolerations", "reason"), [c[1:] for c in ADMISSION_CASES], ids=[c[0] for c in ADMISSION_CASES]
)
def test_admission(
    pvc_taints: object, pv_taints: object, bound: bool, tolerations: tuple[dict[str, object], ...], reason: str | None
) -> None:
    index = VolumeIndex()
    index.set_volume(PVC, "default/data", _obj(PVC, "data", pvc_taints, "pv-1" if bound else ""))
    index.set_volume(PV, "pv-1", _obj(PV, "pv-1", pv_taints))
    verdict = admission_verdict(index, ("default/data",), tuple(tol(**t) for t in tolerations))
    if reason is None:
        assert verdict is None
    else:
        assert verdict is not None and reason in verdict.message


def test_pod_claims_include_generic_ephemeral_volumes() -> None:
    pod = {
        "metadata": {"name": "web"},
        "spec": {
            "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {}},
                {"name": "c", "emptyDir": {}},
            ]
        },
    }
    assert parse_pod(pod).volume_claims == ("data", "web-scratch")


def test_stamping_writes_time_added_only_on_no_use_taints_and_keeps_the_rest() -> None:
    text = json.dumps(
        [
            {"key": "a", "effect": "NoUse", "extra": 1},
            {"key": "b", "effect": "NoAttachOrMount"},
            {"key": "c", "effect": "NoUse", "timeAdded": "2026-01-01T00:00:00Z"},
        ]
    )
    out = json.loads(stamp_time_added(text, {"a:NoUse": "2026-02-02T00:00:00Z", "b:NoAttachOrMount": "x"}) or "")
    assert out == [
        {"key": "a", "effect": "NoUse", "extra": 1, "timeAdded": "2026-02-02T00:00:00Z"},
        {"key": "b", "effect": "NoAttachOrMount"},
        {"key": "c", "effect": "NoUse", "timeAdded": "2026-01-01T00:00:00Z"},
    ]
    assert stamp_time_added(text, {}) is None
