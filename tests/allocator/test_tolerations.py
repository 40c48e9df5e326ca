"""Toleration matching (upstream ToleratesTaint) and the tolerationSeconds rule, row by row."""

from __future__ import annotations

import pytest

from allocator.tolerations import (
    blocks_allocation,
    eviction_time,
    tolerates_taint,
    untolerated_blocking_taints,
    untolerated_no_execute_taints,
)
from allocator.types import DeviceTaint, DeviceToleration
from tests.allocator.eviction_time_rows import IDS, KEY, ROWS, VALUE, Row, due

T = DeviceTaint
Tol = DeviceToleration

MATCH_CASES = [
    # name, toleration, taint, tolerated
    ("equal-key-value-effect", Tol("k", "Equal", "v", "NoSchedule"), T("k", "NoSchedule", "v"), True),
    ("equal-value-differs", Tol("k", "Equal", "v", "NoSchedule"), T("k", "NoSchedule", "w"), False),
    ("equal-key-differs", Tol("k", "Equal", "v", "NoSchedule"), T("other", "NoSchedule", "v"), False),
    ("empty-operator-means-equal", Tol("k", "", "v"), T("k", "NoExecute", "v"), True),
    ("empty-operator-value-differs", Tol("k", "", "v"), T("k", "NoExecute", "x"), False),
    ("exists-any-value", Tol("k", "Exists", "", "NoSchedule"), T("k", "NoSchedule", "anything"), True),
    ("exists-key-differs", Tol("k", "Exists"), T("j", "NoSchedule"), False),
    ("empty-key-exists-tolerates-all", Tol("", "Exists"), T("any/key", "NoExecute", "v"), True),
    ("empty-key-exists-with-effect", Tol("", "Exists", "", "NoSchedule"), T("any", "NoExecute"), False),
    # The API server rejects this combination; the function still answers by its rules.
    ("empty-key-equal-empty-value", Tol("", "Equal", ""), T("k", "NoSchedule", ""), True),
    ("empty-key-equal-value-differs", Tol("", "Equal", "x"), T("k", "NoSchedule", "y"), False),
    ("empty-effect-matches-noschedule", Tol("k", "Exists"), T("k", "NoSchedule"), True),
    ("empty-effect-matches-noexecute", Tol("k", "Exists"), T("k", "NoExecute"), True),
    ("empty-effect-matches-none", Tol("k", "Exists"), T("k", "None"), True),
    ("noexecute-tol-vs-noschedule-taint", Tol("k", "Exists", "", "NoExecute"), T("k", "NoSchedule"), False),
    ("noschedule-tol-vs-noexecute-taint", Tol("k", "Exists", "", "NoSchedule"), T("k", "NoExecute"), False),
    ("unknown-operator", Tol("k", "Gt", "1"), T("k", "NoSchedule", "1"), False),
    ("lowercase-operator-unknown", Tol("k", "exists"), T("k", "NoSchedule"), False),
    ("effect-matches-unknown-effect", Tol("k", "Exists", "", "Degraded"), T("k", "Degraded"), True),
    ("empty-value-equal-empty", Tol("k", "Equal", ""), T("k", "NoSchedule", ""), True),
]


@pytest.mark.parametrize(("toleration", "taint", "expected"), [c[1:] for c in MATCH_CASES], ids=[c[0] for c in MATCH_CASES])
def test_tolerates_taint(toleration: DeviceToleration, taint: DeviceTaint, expected: bool) -> None:
    assert tolerates_taint(toleration, taint) is expected


BLOCK_CASES = [
    ("noschedule-blocks", T("k", "NoSchedule"), True),
    ("noexecute-blocks", T("k", "NoExecute"), True),
    ("none-does-not-block", T("k", "None"), False),
    ("unknown-effect-acts-like-none", T("k", "SomeFutureEffect"), False),
    ("prefer-noschedule-is-not-a-device-effect", T("k", "PreferNoSchedule"), False),
]


@pytest.mark.parametrize(("taint", "expected"), [c[1:] for c in BLOCK_CASES], ids=[c[0] for c in BLOCK_CASES])
def test_blocks_allocation(taint: DeviceTaint, expected: bool) -> None:
    assert blocks_allocation(taint) is expected


def test_every_blocking_taint_must_be_tolerated() -> None:
    taints = [T("a", "NoSchedule"), T("b", "NoExecute"), T("c", "None")]
    assert untolerated_blocking_taints(taints, [Tol("a", "Exists")]) == [T("b", "NoExecute")]
    assert untolerated_blocking_taints(taints, [Tol("a", "Exists"), Tol("b", "Exists")]) == []
    # The same key with two effects: both apply, both need a toleration.
    both = [T("k", "NoSchedule"), T("k", "NoExecute")]
    assert untolerated_blocking_taints(both, [Tol("k", "Exists", "", "NoExecute")]) == [T("k", "NoSchedule")]


def test_untolerated_no_execute_ignores_other_effects() -> None:
    taints = [T("a", "NoSchedule"), T("b", "NoExecute", "x")]
    assert untolerated_no_execute_taints(taints, []) == [T("b", "NoExecute", "x")]
    assert untolerated_no_execute_taints(taints, [Tol("b", "Equal", "x")]) == []


ADDED = 1_767_225_600.0


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eviction_time(row: Row) -> None:
    """The shared table, on the pure function (the device and volume plans run it too)."""
    tolerations = [t.parsed("NoExecute", "NoSchedule") for t in row.tolerations]
    assert eviction_time(T(KEY, "NoExecute", VALUE), tolerations, ADDED) == due(row.want, ADDED)
