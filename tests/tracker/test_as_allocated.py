"""ClusterState keeps what allocated devices consume as allocated (rows 1-3 of the safety issue, through the tracker).

Objects arrive as the watch brings them (ObjectEvents); the allocator asks the
state's own allocated state, as /filter and /bind do.
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_resource_claim
from allocator.types import DeviceID, Node
from kubesim.objects import claim
from tracker import events as ev
from tracker.state import DUPLICATE_SHARE_ID, ClusterState, Problem

D = "gpu.example.com"
NODE = {"metadata": {"name": "n1"}}
CLASS = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]}}


def _slice(name: str, generation: int, count: int, devices=None, counters=None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": D, "nodeName": "n1", "pool": {"name": "p", "generation": generation, "resourceSliceCount": count}}
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = [{"name": "gpu-0", "counters": {k: {"value": v} for k, v in counters.items()}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def part(name: str, mem: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"id": {"string": name}},
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": mem}}}],
    }


def _claim(name: str, request: dict[str, Any], results: list[dict[str, Any]] | None = None, rv: str = "1") -> dict[str, Any]:
    body = claim(name, request="r", exactly=request, uid=f"uid-{name}", resourceVersion=rv)
    if results is not None:
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return body


def named(device: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].id == "{device}"'}}]}


def held(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": D, "pool": "p", "device": device, **extra}


def apply(state: ClusterState, kind: str, key: str, body: dict[str, Any], kind_type: str = "MODIFIED") -> None:
    state.apply(ev.ObjectEvent(kind_type, kind, "" if kind == ev.NODE else ev.GROUP_RESOURCE, key, body))


def _state(problems: list[Problem]) -> ClusterState:
    state = ClusterState(CelEnvironment(), on_problem=problems.append)
    apply(state, ev.NODE, "n1", NODE)
    apply(state, ev.DEVICE_CLASS, "gpu", CLASS)
    return state


def _fits(state: ClusterState, claim_body: dict[str, Any]) -> tuple[bool, str]:
    claim = parse_resource_claim(claim_body)
    out = Allocator(CelEnvironment()).allocate(
        Node("n1"),
        [claim],
        state.queries.slices_for_node("n1"),
        state.classes,
        state.allocated_state,
        pool_slices=state.queries.pool_slices,
    )
    return out.ok, out.failure.message if out.failure is not None else ""


GEN1 = [part("full", "2"), part("part-a", "1")]
GEN2 = [part("full", "2")]  # republished without part-a, still allocated to A
RAISED = [part("full", "2"), part("part-a", "2")]  # part-a said to take 2 while A holds it
LOWERED = [part("full", "2"), part("part-a", "0")]

# name, the order objects arrive in, what B's `full` (2 of 2) gets
ORDERS = [
    ("republish-after-the-allocation", ["gen1", "claim-a", "gen2"], "mem: 1 left, 2 needed"),
    ("claim-listed-before-its-slice", ["claim-a", "gen1", "gen2"], "mem: 1 left, 2 needed"),
    ("started-after-the-republish", ["gen2", "claim-a"], "is no longer published and what it consumes was never seen"),
    # The most any version said while A holds part-a is what it takes: 2, not the 1 it took when allocated.
    ("raised-then-lowered", ["gen1", "claim-a", "raised", "lowered"], "mem: 0 left, 2 needed"),
    ("raised-then-dropped", ["gen1", "claim-a", "raised", "dropped"], "mem: 0 left, 2 needed"),
]


@pytest.mark.parametrize(("order", "fail"), [o[1:] for o in ORDERS], ids=[o[0] for o in ORDERS])
def test_a_republished_pool_does_not_free_the_counters_of_an_allocated_device(order: list[str], fail: str) -> None:
    problems: list[Problem] = []
    state = _state(problems)
    counters = {"mem": "2"}
    steps = {
        "gen1": lambda: (
            apply(state, ev.RESOURCE_SLICE, "counters", _slice("counters", 1, 2, counters=counters)),
            apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 2, devices=GEN1)),
        ),
        "gen2": lambda: (
            apply(state, ev.RESOURCE_SLICE, "counters", _slice("counters", 2, 2, counters=counters)),
            apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 2, 2, devices=GEN2)),
        ),
        "raised": lambda: apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 2, devices=RAISED)),
        "lowered": lambda: apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 2, devices=LOWERED)),
        "dropped": lambda: apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 2, devices=GEN2)),
        "claim-a": lambda: apply(state, ev.RESOURCE_CLAIM, "default/a", _claim("a", named("part-a"), [held("part-a")])),
    }
    for step in order:
        steps[step]()
    ok, why = _fits(state, _claim("b", named("full")))
    assert not ok, "B got full (2 units) while A holds part-a (1): 3 of 2 promised"
    assert fail in why, why
    # A deallocated: its counters come back.
    apply(state, ev.RESOURCE_CLAIM, "default/a", _claim("a", named("part-a"), None, rv="2"))
    ok, why = _fits(state, _claim("b", named("full")))
    assert ok, why


def test_a_duplicate_share_id_counts_twice_and_warns_on_both_claims() -> None:
    problems: list[Problem] = []
    state = _state(problems)
    apply(
        state,
        ev.RESOURCE_SLICE,
        "devices",
        _slice("devices", 1, 1, devices=[{"name": "gpu", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "40Gi"}}}]),
    )
    share = {"shareID": "6b6a4f4c-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "20Gi"}}
    for name in ("x", "y"):
        apply(state, ev.RESOURCE_CLAIM, f"default/{name}", _claim(name, {}, [held("gpu", **share)]))
    assert state.allocated_state.consumed_capacity(DeviceID(D, "p", "gpu"))[f"{D}/memory"].value == 40 * 1024**3  # type: ignore[index]
    ok, _ = _fits(state, _claim("z", {"capacity": {"requests": {"memory": "5Gi"}}}))
    assert not ok, "a 5Gi share on a device whose 40Gi two results already consume"
    warned = sorted(p.name for p in problems if p.kind == ev.RESOURCE_CLAIM and p.reason == DUPLICATE_SHARE_ID)
    assert warned == ["default/x", "default/y"], problems
    assert all(p.uid for p in problems if p.kind == ev.RESOURCE_CLAIM), "the Warning Event names the claim's uid"


def test_a_negative_step_refuses_only_its_device() -> None:
    problems: list[Problem] = []
    state = _state(problems)
    bad = {
        "name": "bad",
        "attributes": {"id": {"string": "bad"}},
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "40Gi", "requestPolicy": {"default": "10Gi", "validRange": {"min": "10Gi", "step": "-10Gi"}}}},
    }
    good = {"name": "good", "attributes": {"id": {"string": "good"}}}
    apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 1, devices=[bad, good]))
    assert not problems, "the slice is not refused whole"
    assert state.device(DeviceID(D, "p", "good")) is not None
    assert "validRange.step" in state.device(DeviceID(D, "p", "bad")).refused  # type: ignore[union-attr]
    assert "validRange.step: -10Gi must be greater than zero" in state.queries.sharing(DeviceID(D, "p", "bad"))["refused"]  # /debug/devices
    assert _fits(state, _claim("g", named("good")))[0]
    ok, why = _fits(state, _claim("b", named("bad")))
    assert not ok and "1 refused" in why and "validRange.step: -10Gi must be greater than zero" in why, why


@pytest.mark.parametrize("first", ["x", "y"], ids=["first-holder-freed-first", "second-holder-freed-first"])
def test_a_device_two_claims_hold_whole_stays_held_until_both_let_go(first: str) -> None:
    """Two allocators gave one device to two claims: freeing one must not make it look free."""
    state = _state([])
    apply(state, ev.RESOURCE_SLICE, "devices", _slice("devices", 1, 1, devices=[{"name": "gpu"}]))
    for name in ("x", "y"):
        apply(state, ev.RESOURCE_CLAIM, f"default/{name}", _claim(name, {}, [held("gpu")]))
    second = "y" if first == "x" else "x"
    apply(state, ev.RESOURCE_CLAIM, f"default/{first}", _claim(first, {}, None, rv="2"))
    assert state.allocated.get(DeviceID(D, "p", "gpu")) == f"default/{second}"
    ok, _ = _fits(state, _claim("z", {}))
    assert not ok, f"{second} still holds gpu: z must not get it"
    apply(state, ev.RESOURCE_CLAIM, f"default/{second}", _claim(second, {}, None, rv="2"))
    ok, why = _fits(state, _claim("z", {}))
    assert ok, why
