"""Who is evicted and when, as a table (docs/design.md#eviction): the plan over a tracker state, no I/O."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.pod_volumes import TOLERATIONS_ANNOTATION
from allocator.types import DeviceID, DeviceTaint
from controllers.eviction import rule_status, rule_time
from controllers.eviction.plan import (
    DryRun,
    Ownership,
    PodEviction,
    TaintKind,
    TaintOrigin,
    TaintRef,
    add_eviction,
    device_origin,
    dry_run,
    plan_evictions,
)
from controllers.eviction.rate_limit import TaintLimiters
from controllers.eviction.volume_plan import plan_volume_evictions
from kubesim import objects
from kubesim.objects import node
from tests.allocator import eviction_time_rows as shared
from tests.eviction.harness import CRD, T0, claim_and_pod, gpu_slice, rule
from tracker import events as ev
from tracker.clock import format_time, parse_time
from tracker.state import ClusterState
from tracker.volumes import TAINTS_ANNOTATION

ADDED = T0 - 1000  # the taint's timeAdded
KEY = "example.com/broken"


def tol(
    seconds: int | None = None, *, effect: str = "NoExecute", key: str = KEY, operator: str = "Exists", value: str = ""
) -> dict[str, Any]:
    t: dict[str, Any] = {"key": key, "operator": operator, "effect": effect}
    if value:
        t["value"] = value
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def build(objects: list[dict[str, Any]]) -> ClusterState:
    state = ClusterState(CelEnvironment())
    for obj in objects:
        kind = obj["kind"]
        group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
        obj.setdefault("metadata", {}).setdefault("uid", f"uid-{obj['metadata']['name']}")
        state.apply(ev.ObjectEvent("ADDED", kind, group, ev.object_key(kind, obj), obj))
    return state


def time_of(device: Any, taint: Any, source: str) -> float:
    return parse_time(taint.time_added) or ADDED


@dataclass(frozen=True)
class Row:
    name: str
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=lambda: [rule("r1", timeAdded=format_time(ADDED))])
    annotation: list[dict[str, Any]] | None = None
    slice_taints: list[dict[str, Any]] | None = None
    evict_upstream: bool = False
    want: float | None = 0.0  # seconds after ADDED; 0.0 = now; None = never


# The toleration rows both paths share are in tests/allocator/eviction_time_rows.py; these are the device's own.
ROWS = [
    Row("untolerated: now"),
    # The volume annotation allows tolerationSeconds only with effect NoUse.
    Row("an empty toleration effect with seconds matches NoExecute (the API's rule)", [tol(45, effect="")], want=ADDED + 45),
    Row("annotation tolerations count", annotation=[tol(90)], want=ADDED + 90),
    Row(
        "the earliest over several taints wins",
        [tol(100, key="a"), tol(20, key="b")],
        rules=[rule("ra", key="a", timeAdded=format_time(ADDED)), rule("rb", key="b", timeAdded=format_time(ADDED + 5))],
        want=ADDED + 25,
    ),
    Row("a tolerated taint does not hide an untolerated one", [tol(key="a")], rules=[rule("ra", key="a"), rule("rb", key="b")]),
    Row("NoSchedule never evicts", rules=[rule("r1", "NoSchedule")], want=None),
    Row("None never evicts", rules=[rule("r1", "None")], want=None),
    Row("an unknown effect acts like None", rules=[rule("r1", "NoExplode")], want=None),
    Row("upstream rules are left alone by default", rules=[rule("up", group="resource.k8s.io")], want=None),
    Row("upstream rules are ours with --evict-upstream", rules=[rule("up", group="resource.k8s.io")], evict_upstream=True),
    Row("driver taints are left alone by default", rules=[], slice_taints=[{"key": KEY, "effect": "NoExecute"}], want=None),
    Row(
        "driver taints are ours with --evict-upstream",
        [tol(10)],
        rules=[],
        slice_taints=[{"key": KEY, "effect": "NoExecute", "timeAdded": format_time(ADDED + 7)}],
        evict_upstream=True,
        want=ADDED + 17,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_when_a_pod_is_evicted(row: Row) -> None:
    claim, pod = claim_and_pod("p", 0, tolerations=row.tolerations, annotation_tolerations=row.annotation)
    taints = {0: row.slice_taints} if row.slice_taints else None
    state = build([node("node-a"), gpu_slice(1, taints=taints), *row.rules, claim, pod])
    plan = plan_evictions(state, Ownership(evict_upstream=row.evict_upstream), time_of)
    if row.want is None:
        assert plan == {}
    else:
        assert list(plan) == ["default/p"]
        assert plan["default/p"].due == row.want


@pytest.mark.parametrize("row", shared.ROWS, ids=shared.IDS)
def test_when_a_pod_is_evicted_for_a_device_taint(row: shared.Row) -> None:
    """The table the volume plan and the pure function run, on NoExecute device taints."""
    claim, pod = claim_and_pod("p", 0, tolerations=[t.api("NoExecute", "NoSchedule") for t in row.tolerations])
    state = build([node("node-a"), gpu_slice(1), rule("r1", key=shared.KEY, value=shared.VALUE, timeAdded=format_time(ADDED)), claim, pod])
    plan = plan_evictions(state, Ownership(), time_of)
    assert {k: p.due for k, p in plan.items()} == ({} if (want := shared.due(row.want, ADDED)) is None else {"default/p": want})


@pytest.mark.parametrize("row", shared.ROWS, ids=shared.IDS)
def test_when_a_pod_is_evicted_for_a_volume_taint(row: shared.Row) -> None:
    """The same table on a NoUse taint of the pod's PV, its tolerations in the pod's annotation."""
    taint = {"key": shared.KEY, "value": shared.VALUE, "effect": "NoUse", "timeAdded": format_time(ADDED)}
    tolerations = json.dumps([t.api("NoUse", "NoAttachOrMount") for t in row.tolerations])
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    state = build(
        [
            node("node-a"),
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "pv-1", "annotations": {TAINTS_ANNOTATION: json.dumps([taint])}},
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "default"},
                "spec": {"volumeName": "pv-1"},
            },
            objects.pod(
                "p", node_name="node-a", meta={"annotations": {TOLERATIONS_ANNOTATION: tolerations}}, phase="Running", volumes=[volume]
            ),
        ]
    )
    plan = plan_volume_evictions(state, state.pod_statuses, lambda _volume, t: parse_time(t.time_added) or T0)
    assert {k: p.due for k, p in plan.items()} == ({} if (want := shared.due(row.want, ADDED)) is None else {"default/p": want})


def _ref(source: str, added: float) -> TaintRef:
    kind = TaintKind.VOLUME if source.startswith("Persistent") else device_origin(source).kind
    device = None if kind is TaintKind.VOLUME else DeviceID("d", "p", "gpu-0")
    return TaintRef(source, TaintOrigin(source, kind), DeviceTaint(KEY, "NoExecute"), device, added, 10.0)


RULE_A, RULE_B, VOLUME = (
    _ref(f"DeviceTaintRule/{CRD}/a", ADDED),
    _ref(f"DeviceTaintRule/{CRD}/b", ADDED - 50),
    _ref("PersistentVolume/pv-1", ADDED + 9),
)

# name, evictions added in order, (due, taint time, reason ids, claims, volume wording) of the pod; None: the first one stays
MERGES: list[tuple[str, list[PodEviction], tuple[float, float, list[str], tuple[str, ...], bool] | None]] = [
    (
        "another claim: the earlier time and timeAdded, both reasons by id, both claims",
        [
            PodEviction("ns/p", "u", ADDED + 60, ADDED, (RULE_A,), ("ns/c1",)),
            PodEviction("ns/p", "u", ADDED + 10, ADDED - 50, (RULE_B,), ("ns/c2",)),
        ],
        (ADDED + 10, ADDED - 50, [RULE_A.id, RULE_B.id], ("ns/c1", "ns/c2"), False),
    ),
    (
        "the same reason twice is listed once",
        [PodEviction("ns/p", "u", 0.0, ADDED, (RULE_A,), ("ns/c1",)), PodEviction("ns/p", "u", 0.0, ADDED, (RULE_A,), ("ns/c2",))],
        (0.0, ADDED, [RULE_A.id], ("ns/c1", "ns/c2"), False),
    ),
    (
        "a device and a volume: the device wording, the earlier time",
        [
            PodEviction("ns/p", "u", ADDED + 60, ADDED, (RULE_A,), ("ns/c1",)),
            PodEviction("ns/p", "u", 0.0, ADDED + 9, (VOLUME,), ("ns/data",)),
        ],
        (0.0, ADDED, [RULE_A.id, VOLUME.id], ("ns/c1", "ns/data"), False),
    ),
    (
        "volumes alone keep the volume wording",
        [PodEviction("ns/p", "u", 0.0, ADDED + 9, (VOLUME,), ("ns/data",))],
        (0.0, ADDED + 9, [VOLUME.id], ("ns/data",), True),
    ),
    (
        "another pod under the name keeps the first one's place",
        [
            PodEviction("ns/p", "u", ADDED + 60, ADDED, (RULE_A,), ("ns/c1",)),
            PodEviction("ns/p", "other", 0.0, ADDED, (RULE_B,), ("ns/c2",)),
        ],
        None,
    ),
]


@pytest.mark.parametrize(("evictions", "want"), [m[1:] for m in MERGES], ids=[m[0] for m in MERGES])
def test_a_pods_evictions_merge(evictions: list[PodEviction], want: tuple[float, float, list[str], tuple[str, ...], bool] | None) -> None:
    """The one merge of the device plan (claims), the volume plan (PVCs) and the two plans together."""
    plan: dict[str, PodEviction] = {}
    for eviction in evictions:
        add_eviction(plan, eviction)
    got = plan["ns/p"]
    if want is None:
        assert got == evictions[0]
    else:
        assert (got.due, got.taint_time, [r.id for r in got.reasons], got.claims, got.volume) == want


def test_only_bound_pods_that_hold_the_reservation_are_considered() -> None:
    claim, pod = claim_and_pod("p", 0)
    unbound = {**pod, "spec": {**pod["spec"], "nodeName": ""}}
    assert plan_evictions(build([node("node-a"), gpu_slice(1), rule("r1"), claim, unbound]), Ownership(), time_of) == {}
    replaced = {**pod, "metadata": {**pod["metadata"], "uid": "a-new-pod"}}  # same name, not the holder
    assert plan_evictions(build([node("node-a"), gpu_slice(1), rule("r1"), claim, replaced]), Ownership(), time_of) == {}
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": format_time(T0)}}
    assert plan_evictions(build([node("node-a"), gpu_slice(1), rule("r1"), claim, deleting]), Ownership(), time_of) == {}


def test_a_device_no_longer_published_keeps_its_plain_rule_taints() -> None:
    claim, pod = claim_and_pod("p", 0)
    state = build([node("node-a"), rule("r1"), rule("by-class", selector={"deviceClassName": "gpu"}), claim, pod])
    plan = plan_evictions(state, Ownership(), time_of)
    assert [r.source for r in plan["default/p"].reasons] == [f"DeviceTaintRule/{CRD}/r1"]


def test_dry_run_counts() -> None:
    a_claim, a_pod = claim_and_pod("a", 0)
    b_claim, b_pod = claim_and_pod("b", 1, namespace="other", tolerations=[tol(30)])
    c_claim, c_pod = claim_and_pod("c", 2, tolerations=[tol()])
    state = build([node("node-a"), gpu_slice(4), rule("drain", "None"), a_claim, a_pod, b_claim, b_pod, c_claim, c_pod])
    assert dry_run(state, f"DeviceTaintRule/{CRD}/drain", time_of) == DryRun(4, 3, 2, 2)


CONDITIONS = [
    ("NoExecute", rule_status.RuleCounts(1, 1), ("True", "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")),
    (
        "NoExecute",
        rule_status.RuleCounts(3, 2, 1),
        (
            "True",
            "PodsPendingEviction",
            "3 pods need to be evicted in 2 different namespaces. 1 pod evicted since starting the controller.",
        ),
    ),
    ("NoExecute", rule_status.RuleCounts(0, 0, 5), ("False", "Completed", "5 pods evicted since starting the controller.")),
    ("NoExecute", rule_status.RuleCounts(), ("False", "NotStarted", "")),
    (
        "NoExecute",
        rule_status.RuleCounts(2, 1, 0, 1),
        (
            "True",
            "PodsPendingEviction",
            "2 pods need to be evicted in 1 namespace. 1 eviction refused by a PodDisruptionBudget (retrying).",
        ),
    ),
    ("NoSchedule", rule_status.RuleCounts(), ("False", "OtherEffect", "Eviction only happens for the NoExecute effect.")),
    (
        "NoExecuted",
        rule_status.RuleCounts(),
        (
            "False",
            "OtherEffect",
            "The rule has an unknown effect 'NoExecuted': nothing is evicted or blocked (known: None, NoSchedule, NoExecute).",
        ),
    ),
]


@pytest.mark.parametrize("effect,counts,want", CONDITIONS, ids=[w[1] + ":" + str(c) for _, c, w in CONDITIONS])
def test_condition_wording(effect: str, counts: rule_status.RuleCounts, want: tuple[str, str, str]) -> None:
    c = rule_status.condition(effect, counts, None, 3)
    assert (c["status"], c["reason"], c["message"]) == want and c["observedGeneration"] == 3


def test_none_wording_singular() -> None:
    c = rule_status.condition("None", rule_status.RuleCounts(), DryRun(1, 1, 1, 1), 1)
    assert c["message"].startswith(
        "1 published device selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace if the effect was NoExecute."
    )


def test_status_writes_are_throttled_unless_the_generation_changed() -> None:
    written = {"observedGeneration": 2, "reason": "PodsPendingEviction", "lastTransitionTime": format_time(T0)}
    assert rule_status.next_write(None, "NoExecute", 2, None) == 0.0
    assert rule_status.next_write(written, "NoExecute", 2, None) == T0 + 10
    assert rule_status.next_write(written, "NoExecute", 3, None) == 0.0
    assert rule_status.next_write(written, "NoExecute", 3, T0 + 4) == T0 + 14  # our own unechoed write counts
    dry = {"observedGeneration": 2, "reason": "NoEffect", "lastTransitionTime": format_time(T0)}
    assert rule_status.next_write(dry, "None", 2, None) is None
    assert rule_status.next_write(dry, "None", 3, None) == 0.0


STAMPS = [
    ("no timeAdded: stamp now", {}, "NoExecute", None, ("NOW", "NoExecute")),
    ("never recorded: adopt", {"timeAdded": "T1"}, "NoExecute", None, (None, "NoExecute")),
    ("recorded and unchanged: nothing", {"timeAdded": "T1"}, "NoExecute", {"effect": "NoExecute", "timeAdded": "T1"}, "nothing"),
    ("effect changed, time kept: stamp now", {"timeAdded": "T1"}, "NoExecute", {"effect": "None", "timeAdded": "T1"}, ("NOW", "NoExecute")),
    (
        "effect changed with a new time: the writer's time",
        {"timeAdded": "T2"},
        "NoExecute",
        {"effect": "None", "timeAdded": "T1"},
        (None, "NoExecute"),
    ),
]


@pytest.mark.parametrize("name,taint,effect,recorded,want", STAMPS, ids=[s[0] for s in STAMPS])
def test_time_added_stamping(name: str, taint: dict, effect: str, recorded: dict | None, want: Any) -> None:
    raw = {"spec": {"taint": {"key": KEY, "effect": effect, **taint}}, "status": {rule_time.STAMP_FIELD: recorded} if recorded else {}}
    got = rule_time.decide(rule_time.StampedTaint.of(raw), "NOW")
    if want == "nothing":
        assert got is None
    else:
        assert got is not None and (got.time_added, got.record["effect"]) == want


def test_fastest_taint_rate_applies_and_idle_limiters_are_dropped() -> None:
    limiters = TaintLimiters()
    slow, fast = ("slow", 1.0, T0), ("fast", 100.0, T0)
    for _ in range(10):
        assert limiters.acquire({slow}, T0)[0] == "slow"
    assert limiters.acquire({slow}, T0) == (None, T0 + 1.0)
    # A pod hit by both goes at the fast one's rate.
    assert limiters.acquire({slow, fast}, T0)[0] == "fast"
    limiters.drop_idle({"slow"}, T0 + 100)
    assert set(limiters.buckets) == {"slow"}
    limiters.drop_idle(set(), T0 + 100)
    assert limiters.buckets == {}


LEADING = T0 - 100.0  # when the controller's term began

# (name, the taint's timeAdded, now, evictions at once)
FIRST_BUCKETS = [
    ("a taint added in this term gets the burst", LEADING + 10, LEADING + 20, 10),
    ("added the moment the term began: this term's", LEADING, LEADING, 10),
    ("in effect before the term, just begun: nothing at once", LEADING - 1, LEADING, 0),
    ("in effect before the term: what the rate refilled since it began", LEADING - 1, LEADING + 4, 2),
    ("in effect before the term, long ago: refilled to the burst", LEADING - 1, LEADING + 3600, 10),
    ("dated in the future: proves nothing, as if in effect before", LEADING + 3600, LEADING + 4, 2),
]


@pytest.mark.parametrize(("added", "now", "at_once"), [pytest.param(*r[1:], id=r[0]) for r in FIRST_BUCKETS])
def test_a_new_term_gives_a_fresh_burst_only_to_taints_added_in_it(added: float, now: float, at_once: int) -> None:
    limiters = TaintLimiters()
    limiters.began_leading(LEADING)
    taken = 0
    while limiters.acquire({("rule", 0.5, added)}, now)[0] is not None:
        taken += 1
    assert taken == at_once


def test_a_taint_stamped_in_the_second_its_term_began_gets_the_burst() -> None:
    """timeAdded has whole seconds: stamped 0.6 s into the term's first second, it reads 0.4 s before the term began."""
    began = math.floor(LEADING) + 0.4
    limiters = TaintLimiters()
    limiters.began_leading(began)
    stamped = float(math.floor(began + 0.2))  # what the API server keeps of a stamp 0.2 s after the term began
    taken = 0
    while limiters.acquire({("rule", 0.5, stamped)}, began + 0.3)[0] is not None:
        taken += 1
    assert taken == 10
