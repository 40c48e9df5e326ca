"""A claim's counter record (allocator/counter_record.py) as the tracker reads it: what a held device is charged,
and what is reported (docs/design.md, "Counters and shares as allocated").

Objects arrive as the watch brings them, into a fresh ClusterState (a new process): the claim with its
record, then the pool as the driver publishes it now.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.counter_record import COUNTERS_ANNOTATION, format_counter_record
from allocator.quantity import parse_quantity
from allocator.types import CounterConsumption, DeviceID
from kubesim.objects import claim
from serving.metrics import Metrics
from tracker import events as ev
from tracker.state import COUNTER_RECORD_MALFORMED, COUNTERS_LOWERED, ClusterState, Problem

D = "gpu.example.com"
PART = DeviceID(D, "p", "part-a")
STAMP = "2026-01-01T00:00:00Z"


def _slices(mem: str) -> list[dict[str, Any]]:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "counters"},
            "spec": {
                "driver": D,
                "nodeName": "n1",
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": "40Gi"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "devices"},
            "spec": {
                "driver": D,
                "nodeName": "n1",
                "pool": pool,
                "devices": [{"name": "part-a", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": mem}}}]}],
            },
        },
    ]


def record(mem: str, stamp: str = STAMP) -> str:
    return format_counter_record(stamp, {PART: (CounterConsumption("gpu-0", {"mem": parse_quantity(mem)}),)})


def _claim(annotation: str | None, rv: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": "uid-a", "resourceVersion": rv}
    if annotation is not None:
        meta["annotations"] = {COUNTERS_ANNOTATION: annotation}
    body = claim("a", **meta)
    body["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": D, "pool": "p", "device": "part-a"}]},
            "allocationTimestamp": STAMP,
        }
    }
    return body


@dataclass(frozen=True)
class Row:
    name: str
    annotation: str | None  # the claim's record, as the annotation holds it
    slice_says: str  # what part-a's slice says now
    charged: str  # what part-a is charged
    reasons: tuple[str, ...] = ()  # Warning Events on the claim
    fallback_logged: bool = False  # "claim has no counter record", once


ROWS = [
    Row("record above the slice: the record", record("20Gi"), "0", "20Gi", (COUNTERS_LOWERED,)),
    Row("record above a slice lowered to 1Gi: the record", record("20Gi"), "1Gi", "20Gi", (COUNTERS_LOWERED,)),
    Row("record equal to the slice: nothing to say", record("20Gi"), "20Gi", "20Gi"),
    Row("slice above the record: the slice (the larger)", record("20Gi"), "30Gi", "30Gi"),
    Row("no record: the slice, said once", None, "5Gi", "5Gi", fallback_logged=True),
    Row("another allocation's record: as no record", record("20Gi", stamp="2025-01-01T00:00:00Z"), "5Gi", "5Gi", fallback_logged=True),
    Row("not JSON: the slice, warned", "{", "5Gi", "5Gi", (COUNTER_RECORD_MALFORMED,)),
    Row(
        "a malformed quantity: the slice, warned",
        record("20Gi").replace('"20Gi"', '"twenty"'),
        "5Gi",
        "5Gi",
        (COUNTER_RECORD_MALFORMED,),
    ),
    Row(
        "devices not a list: the slice, warned",
        f'{{"allocationTimestamp": "{STAMP}", "devices": 3}}',
        "5Gi",
        "5Gi",
        (COUNTER_RECORD_MALFORMED,),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_held_device_is_charged_as_its_claim_records(row: Row, caplog: pytest.LogCaptureFixture) -> None:
    problems: list[Problem] = []
    state = ClusterState(CelEnvironment(), on_problem=problems.append)
    caplog.set_level(logging.INFO, logger="dra_extender.tracker")
    body = _claim(row.annotation)
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/a", body))
    for s in _slices(row.slice_says):
        state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, s["metadata"]["name"], s))
    again = _claim(row.annotation, rv="2")  # a later version of the claim (a reservation, say): nothing said twice
    state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/a", again))

    charged = state.recorded_counters(PART)
    assert charged is not None and [(u.counter_set, {k: str(q) for k, q in u.counters.items()}) for u in charged] == [
        ("gpu-0", {"mem": row.charged})
    ], charged
    assert tuple(p.reason for p in problems) == row.reasons, problems
    assert all(p.name == "default/a" for p in problems)
    fallback = [r for r in caplog.records if r.getMessage().startswith("claim has no counter record")]
    assert len(fallback) == (1 if row.fallback_logged else 0), caplog.records


def test_a_slice_lowered_while_held_is_told_once_per_figure() -> None:
    problems: list[Problem] = []
    state = ClusterState(CelEnvironment(), on_problem=problems.append)
    for s in _slices("20Gi"):
        state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, s["metadata"]["name"], s))
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/a", _claim(record("20Gi"))))
    for mem in ("0", "0", "1Gi", "20Gi", "0"):
        devices = _slices(mem)[1]
        state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "devices", devices))
    lowered = [p.message for p in problems if p.reason == COUNTERS_LOWERED]
    # One Warning Event per figure (0, then 1Gi); the same figure again is the same Event, not another
    assert len(lowered) == 2, lowered
    assert "consumes gpu-0/mem 0 of" in lowered[0] and "the gpu-0/mem 20Gi it was allocated with" in lowered[0], lowered[0]
    assert "consumes gpu-0/mem 1Gi of" in lowered[1], lowered[1]
    assert [str(q) for u in state.recorded_counters(PART) or () for q in u.counters.values()] == ["20Gi"]


def test_the_lowered_and_duplicate_reasons_have_their_metrics() -> None:
    metrics = Metrics()
    metrics.object_problem(ev.RESOURCE_CLAIM, COUNTERS_LOWERED)
    metrics.object_problem(ev.RESOURCE_CLAIM, COUNTER_RECORD_MALFORMED)
    text = metrics.render().decode()
    assert "dra_extender_counters_lowered_total 1.0" in text
    assert 'dra_extender_object_problems_total{kind="ResourceClaim"} 2.0' in text
