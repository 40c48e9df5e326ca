"""ClusterState: effective taints, patches, incremental recomputation, claims."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.types import DeviceID
from kubesim import objects
from tracker import events as ev
from tracker.state import ClusterState, Problem

D = "gpu.example.com"


def slice_obj(name: str, pool: str, devices: list[dict[str, Any]], node: str = "n1") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": D, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def gpu(name: str, model: str = "a100", taints: list | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "attributes": {"model": {"string": model}}, "capacity": {"memory": {"value": "40Gi"}}}
    if taints:
        d["taints"] = taints
    return d


def rule(name: str, selector: dict | None, effect: str = "NoSchedule", key: str = "example.com/rule") -> dict[str, Any]:
    """A rule as the state's intake reads it, without apiVersion and kind (kubesim/objects.py)."""
    return objects.rule(name, effect, selector=selector, key=key, group=None)


def patch(
    name: str, filt: dict, attrs: dict | None = None, priority: int = 0, created: str = "2026-01-01T00:00:00Z", capacity=None
) -> dict:
    devices: dict[str, Any] = {"filter": filt, "priority": priority}
    if attrs is not None:
        devices["attributes"] = attrs
    if capacity is not None:
        devices["capacity"] = capacity
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"devices": devices}}


@pytest.fixture
def problems() -> list[Problem]:
    return []


@pytest.fixture
def state(problems) -> ClusterState:
    s = ClusterState(CelEnvironment(), on_problem=problems.append)
    s.apply(
        ev.ObjectEvent(
            "ADDED",
            ev.DEVICE_CLASS,
            ev.GROUP_RESOURCE,
            "big",
            {"metadata": {"name": "big"}, "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].model == "h100"'}}]}},
        )
    )
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", slice_obj("s1", "p1", [gpu("g0"), gpu("g1", "h100")])))
    s.apply(
        ev.ObjectEvent(
            "ADDED",
            ev.RESOURCE_SLICE,
            ev.GROUP_RESOURCE,
            "s2",
            slice_obj("s2", "p2", [gpu("g0", taints=[{"key": "drv", "effect": "None"}])], node="n2"),
        )
    )
    return s


def taint_keys(state: ClusterState, pool: str, device: str) -> list[str]:
    return [f"{t.key}:{t.effect}" for t in state.device(DeviceID(D, pool, device)).taints]


def add_rule(state: ClusterState, body: dict, group: str = ev.GROUP_RESOURCE) -> None:
    state.apply(ev.ObjectEvent("ADDED", ev.DEVICE_TAINT_RULE, group, body["metadata"]["name"], body))


RULE_CASES = [
    # name, selector, {(pool, device): tainted?}
    ("by-driver", {"driver": D}, {("p1", "g0"): True, ("p1", "g1"): True, ("p2", "g0"): True}),
    ("by-pool", {"driver": D, "pool": "p1"}, {("p1", "g0"): True, ("p1", "g1"): True, ("p2", "g0"): False}),
    ("by-device", {"driver": D, "pool": "p1", "device": "g1"}, {("p1", "g0"): False, ("p1", "g1"): True, ("p2", "g0"): False}),
    ("device-name-across-pools", {"device": "g0"}, {("p1", "g0"): True, ("p1", "g1"): False, ("p2", "g0"): True}),
    ("empty-selector-matches-all", {}, {("p1", "g0"): True, ("p1", "g1"): True, ("p2", "g0"): True}),
    ("missing-selector-matches-none", None, {("p1", "g0"): False, ("p1", "g1"): False, ("p2", "g0"): False}),
    ("other-driver", {"driver": "other.example.com"}, {("p1", "g0"): False, ("p2", "g0"): False}),
]


@pytest.mark.parametrize(("selector", "expected"), [c[1:] for c in RULE_CASES], ids=[c[0] for c in RULE_CASES])
def test_rule_selectors(state: ClusterState, selector, expected) -> None:
    add_rule(state, rule("r", selector))
    for (pool, device), tainted in expected.items():
        assert ("example.com/rule:NoSchedule" in taint_keys(state, pool, device)) is tainted


def test_effective_taints_slice_first_then_rules_no_dedup(state: ClusterState) -> None:
    add_rule(state, rule("b", {"pool": "p2"}, "NoExecute", key="drv"))
    add_rule(state, rule("a", {"pool": "p2"}, "NoExecute", key="drv"), group=ev.GROUP_EXTENDER)
    view = state.device(DeviceID(D, "p2", "g0"))
    assert [f"{t.key}:{t.effect}" for t in view.taints] == ["drv:None", "drv:NoExecute", "drv:NoExecute"]
    assert view.taint_sources == ("slice", "DeviceTaintRule/resource.dra-extender.io/a", "DeviceTaintRule/resource.k8s.io/b")


def test_rule_deleted_removes_taint_and_views_update(state: ClusterState) -> None:
    add_rule(state, rule("r", {"pool": "p1"}))
    assert any(t.key == "example.com/rule" for d in state.slice_views["s1"].devices for t in d.taints)
    state.apply(ev.ObjectEvent("DELETED", ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "r", {}))
    assert taint_keys(state, "p1", "g0") == []
    assert all(not d.taints for d in state.slice_views["s1"].devices)


def test_class_and_cel_selected_rule(state: ClusterState) -> None:
    add_rule(
        state,
        {"metadata": {"name": "c"}, "spec": {"deviceSelector": {"deviceClassName": "big"}, "taint": {"key": "k", "effect": "NoSchedule"}}},
        ev.GROUP_EXTENDER,
    )
    assert taint_keys(state, "p1", "g1") == ["k:NoSchedule"] and taint_keys(state, "p1", "g0") == []
    add_rule(
        state,
        {
            "metadata": {"name": "cel"},
            "spec": {
                "deviceSelector": {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].model == "a100"'}}]},
                "taint": {"key": "j", "effect": "NoExecute"},
            },
        },
        ev.GROUP_EXTENDER,
    )
    assert taint_keys(state, "p1", "g0") == ["j:NoExecute"]


def test_class_change_recomputes_class_selected_rules(state: ClusterState) -> None:
    add_rule(
        state,
        {"metadata": {"name": "c"}, "spec": {"deviceSelector": {"deviceClassName": "big"}, "taint": {"key": "k", "effect": "NoSchedule"}}},
        ev.GROUP_EXTENDER,
    )
    state.apply(
        ev.ObjectEvent(
            "MODIFIED",
            ev.DEVICE_CLASS,
            ev.GROUP_RESOURCE,
            "big",
            {"metadata": {"name": "big"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
        )
    )
    assert taint_keys(state, "p1", "g0") == ["k:NoSchedule"]


def test_failing_rule_selector_does_not_apply_and_is_reported_once(state: ClusterState, problems) -> None:
    bad = {
        "metadata": {"name": "bad"},
        "spec": {
            "deviceSelector": {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].nope == 1'}}]},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }
    add_rule(state, bad, ev.GROUP_EXTENDER)
    assert taint_keys(state, "p1", "g0") == []
    assert len(problems) == 1  # one Event per object, though it failed for 3 devices
    add_rule(state, bad, ev.GROUP_EXTENDER)  # re-applied: no duplicate reports
    add_rule(state, {**bad, "metadata": {"name": "bad", "labels": {"a": "b"}}}, ev.GROUP_EXTENDER)  # metadata only
    state.apply(
        ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", slice_obj("s1", "p1", [gpu("g0"), gpu("g1", "h100")]))
    )
    assert len(problems) == 1
    assert all(p.kind == "DeviceTaintRule" and p.name == "bad" and "nope" in p.message for p in problems)


def test_failing_rule_is_reported_again_for_a_new_spec_or_object(state: ClusterState, problems) -> None:
    def bad(expression: str, uid: str = "u1") -> dict:
        selector = {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].{expression} == 1'}}]}
        return {
            "metadata": {"name": "bad", "uid": uid},
            "spec": {"deviceSelector": selector, "taint": {"key": "k", "effect": "NoSchedule"}},
        }

    add_rule(state, bad("nope"), ev.GROUP_EXTENDER)
    add_rule(state, bad("other"), ev.GROUP_EXTENDER)  # a new spec, a new mistake
    state.apply(ev.ObjectEvent("DELETED", ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, "bad", {}))
    add_rule(state, bad("other", uid="u2"), ev.GROUP_EXTENDER)  # re-created
    assert [("nope" in p.message, "other" in p.message) for p in problems] == [(True, False), (False, True), (False, True)]


def test_invalid_object_is_reported_not_applied(state: ClusterState, problems) -> None:
    state.apply(ev.ObjectEvent("ADDED", ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "x", {"metadata": {"name": "x"}, "spec": {}}))
    assert ("resource.k8s.io", "x") not in state.rules
    assert problems and "spec.taint" in problems[0].message


PATCH_CASES = [
    # name, patches, expected model of p1/g0 (None: attribute removed)
    ("no-filter-matches-all", [patch("a", {}, {f"{D}/model": {"string": "patched"}})], "patched"),
    ("filter-by-device", [patch("a", {"device": "g1"}, {f"{D}/model": {"string": "patched"}})], "a100"),
    (
        "higher-priority-wins",
        [patch("lo", {}, {f"{D}/model": {"string": "lo"}}, 1), patch("hi", {}, {f"{D}/model": {"string": "hi"}}, 5)],
        "hi",
    ),
    (
        "tie-older-wins",
        [
            patch("new", {}, {f"{D}/model": {"string": "new"}}, created="2026-02-01T00:00:00Z"),
            patch("old", {}, {f"{D}/model": {"string": "old"}}, created="2026-01-01T00:00:00Z"),
        ],
        "old",
    ),
    ("tie-name-decides", [patch("b", {}, {f"{D}/model": {"string": "b"}}), patch("a", {}, {f"{D}/model": {"string": "a"}})], "a"),
    ("null-removes", [patch("a", {}, {f"{D}/model": {"null": {}}})], None),
    (
        "filter-sees-original",
        [
            patch("a", {}, {f"{D}/model": {"string": "x"}}),
            patch(
                "b",
                {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].model == "a100"'}}]},
                {f"{D}/model": {"string": "y"}},
                9,
            ),
        ],
        "y",
    ),
]


@pytest.mark.parametrize(("patches", "expected"), [c[1:] for c in PATCH_CASES], ids=[c[0] for c in PATCH_CASES])
def test_patch_precedence(state: ClusterState, patches, expected) -> None:
    for p in patches:
        state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, p["metadata"]["name"], p))
    assert state.device(DeviceID(D, "p1", "g0")).attributes.get(f"{D}/model") == expected


def test_rules_and_classes_see_the_patched_device(state: ClusterState) -> None:
    p = patch("h", {"device": "g0", "pool": "p1"}, {f"{D}/model": {"string": "h100"}}, capacity={f"{D}/memory": {"value": "80Gi"}})
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, "h", p))
    add_rule(
        state,
        {"metadata": {"name": "c"}, "spec": {"deviceSelector": {"deviceClassName": "big"}, "taint": {"key": "k", "effect": "NoSchedule"}}},
        ev.GROUP_EXTENDER,
    )
    assert taint_keys(state, "p1", "g0") == ["k:NoSchedule"]
    assert str(state.device(DeviceID(D, "p1", "g0")).capacity[f"{D}/memory"]) == "80Gi"
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, "h", p))
    assert taint_keys(state, "p1", "g0") == []


def test_rule_change_touches_only_selected_devices(state: ClusterState) -> None:
    before = {did: v for did, v in state.devices.items()}
    add_rule(state, rule("r", {"driver": D, "pool": "p2"}))
    changed = [did for did, v in state.devices.items() if v is not before[did]]
    assert changed == [DeviceID(D, "p2", "g0")]


def test_cel_rule_costs_one_evaluation_per_device(state: ClusterState) -> None:
    cel = state.cel
    start = cel.stats["evaluations"]
    add_rule(
        state,
        {
            "metadata": {"name": "cel"},
            "spec": {
                "deviceSelector": {"driver": D, "selectors": [{"cel": {"expression": 'device.driver != ""'}}]},
                "taint": {"key": "j", "effect": "None"},
            },
        },
        ev.GROUP_EXTENDER,
    )
    assert cel.stats["evaluations"] - start == 3
    # A slice change that leaves attributes and capacity alone (here: a taint removed)
    # keeps the device's CEL identity: nothing is evaluated again.
    state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s2", slice_obj("s2", "p2", [gpu("g0")], node="n2")))
    assert cel.stats["evaluations"] - start == 3
    # One that changes an attribute re-evaluates only that device: once for the rule's
    # selector, once for the class selector (warmed ahead of filters).
    state.apply(
        ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s2", slice_obj("s2", "p2", [gpu("g0", model="h100")], node="n2"))
    )
    assert cel.stats["evaluations"] - start == 5


def test_node_index(state: ClusterState) -> None:
    assert [s.name for s in state.queries.slices_for_node("n1")] == ["s1"]
    assert [s.name for s in state.queries.slices_for_node("n2")] == ["s2"]
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", {}))
    assert state.queries.slices_for_node("n1") == [] and state.device(DeviceID(D, "p1", "g0")) is None


def claim_obj(name: str, devices: list[str], rv: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "big"}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": D, "pool": "p1", "device": d} for d in devices]}}},
    }


def test_allocated_devices_follow_claims_and_ignore_stale_events(state: ClusterState) -> None:
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", claim_obj("c", ["g0"], "10")))
    assert state.is_taken(DeviceID(D, "p1", "g0"))
    stale = claim_obj("c", [], "9")
    del stale["status"]
    state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", stale))
    assert state.is_taken(DeviceID(D, "p1", "g0")), "a late, older event must not free an allocated device"
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", {}))
    assert not state.is_taken(DeviceID(D, "p1", "g0"))


def test_versions_track_what_the_view_holds(state: ClusterState) -> None:
    claims = state.versions[(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE)]
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", claim_obj("c", ["g0"], "10")))
    state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", claim_obj("c", ["g0"], "9")))
    assert claims == {"default/c": "10"}, "a stale event does not move the recorded version back"
    pod = {"metadata": {"name": "p", "namespace": "default", "resourceVersion": "11"}, "spec": {"containers": []}}
    state.apply(ev.ObjectEvent("ADDED", ev.POD, ev.GROUP_CORE, "default/p", pod))
    assert "default/p" not in state.versions[(ev.POD, ev.GROUP_CORE)], "pods without claims are not kept"
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", {}))
    assert claims == {}


def test_replace_deletes_missing_objects(state: ClusterState) -> None:
    state.replace(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, [slice_obj("s2", "p2", [gpu("g0")], node="n2")])
    assert set(state.slices) == {"s2"}


def test_readiness_waits_for_required_kinds() -> None:
    s = ClusterState(CelEnvironment())
    assert not s.ready and "ResourceSlice.resource.k8s.io" in s.missing()
    for kind, group in list(s.required):
        s.mark_synced(kind, group)
    assert s.ready and s.missing() == []


def test_class_with_bad_cel_is_reported(state: ClusterState, problems) -> None:
    state.apply(
        ev.ObjectEvent(
            "ADDED",
            ev.DEVICE_CLASS,
            ev.GROUP_RESOURCE,
            "broken",
            {"metadata": {"name": "broken"}, "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]}},
        )
    )
    assert [(p.kind, p.name) for p in problems] == [("DeviceClass", "broken")]
    assert "spec.selectors[0]" in problems[0].message


def test_change_log_names_changed_nodes_and_says_when_it_cannot(state: ClusterState, monkeypatch) -> None:
    """Caches catch up from the log: changed nodes by name, None when every node may have changed."""
    import tracker.store as st

    seq = state.change_seq
    assert state.changed_nodes_since(seq) == []
    state.apply(
        ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s2", slice_obj("s2", "p2", [gpu("g0", model="x")], node="n2"))
    )
    assert set(state.changed_nodes_since(seq) or ()) == {"n2"}
    mid = state.change_seq
    state.apply(ev.ObjectEvent("MODIFIED", ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "big", {"metadata": {"name": "big"}, "spec": {}}))
    assert state.changed_nodes_since(mid) is None, "a class change concerns every node"
    after = state.change_seq
    assert state.changed_nodes_since(after) == []
    monkeypatch.setattr(st, "CHANGE_LOG_MAX", 4)
    for i in range(6):
        state.apply(ev.ObjectEvent("MODIFIED", ev.NODE, ev.GROUP_CORE, f"n{i}", {"metadata": {"name": f"n{i}"}}))
    assert state.changed_nodes_since(after) is None, "the log was trimmed past this point"
    assert state.changed_nodes_since(state.change_seq - 1) == ["n5"]


# ---------------------------------------------------------------- costly selectors: work in slices on the loop

PENDING = "resource.dra-extender.io/selectors-pending:NoSchedule"
SELECTOR = {"driver": D, "selectors": [{"cel": {"expression": f'device.attributes["{D}"].model == "a100"'}}]}


def _rule_then_slices(s: ClusterState) -> None:
    """A rule with a CEL selector listed before the slices: each slice's handler evaluates it."""
    add_rule(s, rule("r", SELECTOR))
    for i in range(3):
        s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, f"s{i}", slice_obj(f"s{i}", f"p{i}", [gpu("g0"), gpu("g1")])))


def _slices_then_rule(s: ClusterState) -> None:
    for i in range(3):
        s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, f"s{i}", slice_obj(f"s{i}", f"p{i}", [gpu("g0"), gpu("g1")])))
    add_rule(s, rule("r", SELECTOR))


SLICED = [
    # name, how the state is built, the kind of the events that leave work behind
    ("rule-then-slices", _rule_then_slices, ev.RESOURCE_SLICE),
    ("slices-then-rule", _slices_then_rule, ev.DEVICE_TAINT_RULE),
]


@pytest.mark.parametrize(("name", "build", "held"), SLICED, ids=[r[0] for r in SLICED])
async def test_views_with_costly_selectors_are_finished_in_the_background(
    monkeypatch: pytest.MonkeyPatch, name: str, build: Any, held: str
) -> None:
    """With no time at all for selectors in a handler (each step does one device), the views
    left over are finished by the background task: until then the state is not ready, the
    devices not yet computed carry the pending taint (nothing is allocated on them), and the
    events that asked for the work reach the listeners only afterwards."""
    from tracker.views import recompute

    monkeypatch.setattr(recompute, "WARM_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(recompute, "SLICE_HANDLER_SECONDS", 0.0)
    s = ClusterState(CelEnvironment())
    heard: list[str] = []
    s.subscribe(lambda e: heard.append(e.kind))
    build(s)
    for kind, group in sorted(s.required):
        s.mark_synced(kind, group)
    assert not s.ready, "views still being computed"
    keys = [taint_keys(s, f"p{i}", d) for i in range(3) for d in ("g0", "g1")]
    if held == ev.RESOURCE_SLICE:
        assert any(PENDING in k for k in keys), f"provisional views are tainted: {keys}"
    else:
        assert any(not k for k in keys), f"views not recomputed yet keep their old taints: {keys}"
    assert heard.count(held) < 3 if held == ev.RESOURCE_SLICE else held not in heard
    for _ in range(200):
        if s.ready:
            break
        await asyncio.sleep(0)
    assert s.ready
    assert heard.count(held) == (3 if held == ev.RESOURCE_SLICE else 1), heard
    for i in range(3):
        for device in ("g0", "g1"):
            assert taint_keys(s, f"p{i}", device) == ["example.com/rule:NoSchedule"], (i, device)


async def test_views_recomputed_in_the_background_do_not_wait_for_quiet_between_verbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CEL warm-up waits for a quiet moment between the scheduler's verbs (tracker/foreground.py); the views
    a rule asks for do not: with a verb in flight the whole time and the warm-up already waiting, a rule's views
    are finished and its event told, long before the warm-up's longest deferral."""
    from tracker.views import recompute

    monkeypatch.setattr(recompute, "WARM_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(recompute, "SLICE_HANDLER_SECONDS", 0.0)
    s = ClusterState(CelEnvironment())
    monkeypatch.setattr(s.foreground, "_max_defer", 3600.0)
    s.foreground.begin()  # never ended
    heard: list[str] = []
    s.subscribe(lambda e: heard.append(e.kind))
    gpu_class = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]}}
    s.apply(ev.ObjectEvent("ADDED", ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "gpu", gpu_class))
    for i in range(3):
        s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, f"s{i}", slice_obj(f"s{i}", f"p{i}", [gpu("g0"), gpu("g1")])))
    for kind, group in sorted(s.required):
        s.mark_synced(kind, group)
    for _ in range(200):  # the views of the slices (no rule yet) are done; the warm-up is left, waiting
        if s.ready:
            break
        await asyncio.sleep(0)
    assert s.ready
    await asyncio.sleep(0.05)  # the background task has started the warm-up, which waits for quiet
    assert [t for t in asyncio.all_tasks() if t.get_name() == "warm-selectors"], "the warm-up waits for quiet"
    add_rule(s, rule("r", SELECTOR))
    deadline = time.monotonic() + 30
    while ev.DEVICE_TAINT_RULE not in heard and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert ev.DEVICE_TAINT_RULE in heard, "the rule's event was held while the warm-up waited for quiet"
    for i in range(3):
        for device in ("g0", "g1"):
            assert taint_keys(s, f"p{i}", device) == ["example.com/rule:NoSchedule"], (i, device)
