"""The verdict cache under churn of claims: what it keeps per claim goes when the claim goes."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.filter.outcomes import SIGNATURES_SLACK, OutcomeCache
from kubesim import objects
from tracker import events as ev
from tracker.state import ClusterState

NS = "ns"


def claim(i: int, rv: int, *, allocated: bool = False) -> dict[str, Any]:
    out = objects.claim(f"c{i}", NS, request="r", uid=f"uid-{i}", resourceVersion=str(rv))
    if allocated:
        out["status"] = {
            "allocation": {"devices": {"results": [{"request": "r", "driver": "gpu.example.com", "pool": "p", "device": "d"}]}}
        }
    return out


def _apply(state: ClusterState, kind: ev.EventType, raw: dict[str, Any]) -> None:
    state.apply(ev.ObjectEvent(kind, ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"{NS}/{raw['metadata']['name']}", raw))


@pytest.mark.parametrize("live", [0, 100], ids=["no-claim-stays", "100-claims-stay"])
def test_signatures_of_deleted_claims_are_dropped(live: int) -> None:
    """Each claim is signed as /filter and /bind see it (new, then allocated), then deleted; `live` claims stay."""
    state = ClusterState(CelEnvironment())
    cache = OutcomeCache(state, Allocator(CelEnvironment()))
    for i in range(live):
        _apply(state, "ADDED", claim(10_000 + i, 1))
        cache.signature([state.claims[f"{NS}/c{10_000 + i}"]])
    for i in range(2000):
        for raw in (claim(i, 1), claim(i, 2, allocated=True)):
            _apply(state, "MODIFIED", raw)
            cache.signature([state.claims[f"{NS}/c{i}"]])
        _apply(state, "DELETED", claim(i, 3))
    assert len(state.claims) == live
    assert len(cache._signatures) <= 2 * live + SIGNATURES_SLACK


def test_a_new_version_is_signed_again_and_equal_specs_share() -> None:
    state = ClusterState(CelEnvironment())
    cache = OutcomeCache(state, Allocator(CelEnvironment()))
    _apply(state, "ADDED", claim(1, 1))
    _apply(state, "ADDED", claim(2, 1))
    first = cache.signature([state.claims[f"{NS}/c1"]])
    assert cache.signature([state.claims[f"{NS}/c2"]]) == first
    _apply(state, "MODIFIED", claim(1, 2, allocated=True))
    assert cache.signature([state.claims[f"{NS}/c1"]]) == (("allocated", f"{NS}/c1", "2"),)
