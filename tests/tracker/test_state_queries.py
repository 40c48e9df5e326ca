"""ClusterState's contract with its readers and writers: read-only queries, and changes only through its methods."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from allocator.cel import CelEnvironment
from allocator.types import AllocationResult, DeviceID, DeviceRequestAllocationResult
from tests.tracker.test_state import D, claim_obj, gpu, slice_obj
from tracker import events as ev
from tracker.claim_status import parse_claim_status
from tracker.state import ClusterState


@pytest.fixture
def state() -> ClusterState:
    s = ClusterState(CelEnvironment())
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", slice_obj("s1", "p1", [gpu("g0"), gpu("g1")])))
    s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", claim_obj("c", ["g0"], "10")))
    return s


QUERIES = [
    "nodes",
    "pods",
    "claims",
    "templates",
    "classes",
    "slices",
    "rules",
    "patches",
    "devices",
    "slice_views",
    "allocated",
    "inflight",
]


@pytest.mark.parametrize("name", QUERIES)
def test_queries_are_read_only_live_views(state: ClusterState, name: str) -> None:
    view = getattr(state, name)
    assert isinstance(view, MappingProxyType)
    with pytest.raises(TypeError):
        view["x"] = None  # type: ignore[index]
    assert getattr(state, name) is view, "made once: no copy per read"


def test_versions_are_read_only(state: ClusterState) -> None:
    claims = state.versions[(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE)]
    assert claims == {"default/c": "10"}
    with pytest.raises(TypeError):
        claims["default/c"] = "11"  # type: ignore[index]


def test_the_state_has_no_public_mutable_part(state: ClusterState) -> None:
    public = {n: getattr(state, n) for n in dir(state) if not n.startswith("_")}
    assert not [n for n, v in public.items() if isinstance(v, dict | list | set)]
    assert not hasattr(state, "listeners") and not hasattr(state, "store") and not hasattr(state, "views")


def test_reserve_holds_devices_in_flight_until_released(state: ClusterState) -> None:
    did = DeviceID(D, "p1", "g1")
    one = DeviceRequestAllocationResult(request="r", driver=did.driver, pool=did.pool, device=did.device)
    hold = state.reserve({"default/other": AllocationResult(results=(one,))})
    assert state.inflight == {did: "default/other"} and state.is_taken(did)
    hold.release()
    assert not state.inflight and not state.is_taken(did)


def test_subscribers_hear_every_applied_change(state: ClusterState) -> None:
    heard: list[str] = []
    state.subscribe(lambda e: heard.append(f"{e.type} {e.key}"))
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", {}))
    assert heard == ["DELETED default/c"]


def test_claim_status_is_parsed_at_intake(state: ClusterState) -> None:
    held = state.claim_status("default/c")
    assert held is not None and held.resource_version == "10" and held.allocated
    assert held.allocated_devices == {DeviceID(D, "p1", "g0")}
    state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/c", {}))
    assert state.claim_status("default/c") is None


def test_claim_status_reads_device_conditions_and_reservations() -> None:
    raw = {
        "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7", "finalizers": ["f"]},
        "status": {
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
            "devices": [
                {"driver": "d", "pool": "p", "device": "x", "conditions": [{"type": "Ready", "status": "True"}, "junk"]},
                "junk",
            ],
        },
    }
    held = parse_claim_status(raw)
    assert (held.namespace, held.name, held.resource_version, held.finalizers) == ("ns", "c", "7", ("f",))
    assert held.reserved_uids == ("u1",) and held.reserved_for == ({"resource": "pods", "name": "p", "uid": "u1"},)
    assert not held.allocated
    (ready,) = held.device_conditions[("d", "p", "x")]
    assert ready.type == "Ready" and ready.true and ready.reason == "" and ready.message == ""
    assert parse_claim_status({"status": {"devices": 5}}).device_conditions == {}
