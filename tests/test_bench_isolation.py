"""bench/bench_isolation.py's writes-only control: the run order, the controllers' writes cut into phases, and their replay.

The replay stands in for the controllers in the control layout, so it must
send what they sent, where they sent it, and be refused where they would be:
checked against the fake API server over HTTP, its journal telling who wrote.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.bench_isolation import REPLAY_AGENT, Trace, controller_writes, replay, role_of, rounds
from kubesim.fakeapi import FakeApiServer
from kubesim.fakeapi.journal import Journal
from kubesim.objects import pod
from tracker.apiserver.requests import MERGE_PATCH


@pytest.mark.parametrize(
    ("layouts", "count", "want"),
    [
        pytest.param(["split", "writes-only", "combined"], 1, ["split", "writes-only", "combined"], id="one-round"),
        pytest.param(
            ["split", "writes-only", "combined"],
            2,
            ["split", "writes-only", "combined", "combined", "writes-only", "split"],
            id="second-round-reversed-writes-only-replays-the-first-split",
        ),
        pytest.param(["combined", "split"], 3, ["combined", "split", "split", "combined", "combined", "split"], id="without-the-control"),
        pytest.param(["writes-only", "split"], 2, ValueError, id="writes-only-before-any-split-refused"),
        pytest.param(["writes-only"], 1, ValueError, id="writes-only-alone-refused"),
    ],
)
def test_rounds(layouts: list[str], count: int, want: list[str] | type[Exception]) -> None:
    if isinstance(want, list):
        assert rounds(layouts, count) == want
    else:
        with pytest.raises(want, match="split must come before it"):
            rounds(layouts, count)


@pytest.mark.parametrize(
    ("agent", "role"),
    [
        pytest.param("dra-extender-controllers/0.3.0", "controllers", id="controllers"),
        pytest.param("dra-extender-serve/0.3.0", "serve", id="serve"),
        pytest.param("Python/3.11 aiohttp/3.10.5", "kube-scheduler model", id="model"),
        pytest.param(f"{REPLAY_AGENT}/1", "replay", id="replay"),
        pytest.param("", "unknown", id="none"),
    ],
)
def test_role_of(agent: str, role: str) -> None:
    assert role_of(agent) == role


def _entry(at: float, agent: str, method: str, path: str) -> dict[str, Any]:
    e: dict[str, Any] = {"at": at, "user_agent": agent, "method": method, "verb": "", "resource": "", "path": path, "query": {}}
    if method != "GET":
        e |= {"content_type": "application/json", "body": {"n": at}}
    return e


CTL, SERVE = "dra-extender-controllers/0", "dra-extender-serve/0"


def test_controller_writes_cut_into_phases() -> None:
    """Only the controllers' writes, each at its offset into the phase it fell in; the rest counted, not replayed."""
    rows = [{"phase": "a", "t0": 10.0, "t1": 20.0}, {"phase": "b", "t0": 20.0, "t1": 25.0}]
    entries = [
        _entry(5.0, CTL, "PATCH", "/start-up"),  # before every phase
        _entry(10.0, CTL, "POST", "/a0"),
        _entry(11.5, CTL, "GET", "/a-read"),  # a read: not replayed
        _entry(12.0, SERVE, "POST", "/a-serve"),  # serve's: not the controllers'
        _entry(19.9, CTL, "DELETE", "/a1"),
        _entry(20.0, CTL, "POST", "/b0"),
        _entry(26.0, CTL, "POST", "/after"),  # after every phase
    ]
    trace, outside = controller_writes(entries, rows)
    got = {phase: [(round(w[0], 3), w[1], w[2]) for w in writes] for phase, writes in trace.items()}
    assert got == {"a": [(0.0, "POST", "/a0"), (9.9, "DELETE", "/a1")], "b": [(0.0, "POST", "/b0")]}
    assert outside == 2


async def _starting_now(*names: str) -> AsyncIterator[tuple[str, float]]:
    for name in names:
        yield name, time.monotonic()


async def test_replay_sends_the_recorded_writes() -> None:
    """A create, a merge patch, a delete with the pod's UID as precondition (and one with another pod's UID, refused
    as the controllers' would be): sent as recorded, named as the replay, tallied by answer."""
    async with FakeApiServer() as api:
        uid = api.create(pod("held", "evict"))["metadata"]["uid"]
        api.create(pod("kept", "evict"))
        journal = Journal()
        api.add_reactor(journal)
        event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "held.", "namespace": "evict"}, "reason": "Evicted"}
        trace: Trace = {
            "eviction": [
                [0.0, "POST", "/api/v1/namespaces/evict/events", {}, "application/json", event],
                [0.05, "PATCH", "/api/v1/namespaces/evict/pods/held", {}, MERGE_PATCH, {"metadata": {"labels": {"x": "y"}}}],
                [0.1, "DELETE", "/api/v1/namespaces/evict/pods/kept", {}, "application/json", {"preconditions": {"uid": uid}}],
                [0.15, "DELETE", "/api/v1/namespaces/evict/pods/held", {}, "application/json", {"preconditions": {"uid": uid}}],
            ],
            "unused": [[0.0, "DELETE", "/api/v1/namespaces/evict/pods/never", {}, "application/json", None]],
        }
        tally = await replay(api.url, trace, _starting_now("eviction", "quiet"))
        assert api.get("pods", "evict", "held") is None and api.get("pods", "evict", "kept") is not None
        assert [e["metadata"]["generateName"] for e in api.list("events", namespace="evict")] == ["held."]
    assert tally["eviction"]["sent"] == 4 and tally["eviction"]["status"] == {"201": 1, "200": 2, "409": 1}
    assert tally["quiet"]["sent"] == 0 and "unused" not in tally
    sent = sorted((e["method"], e["path"], e["content_type"], role_of(e["user_agent"])) for e in journal.entries)
    assert sent == [
        ("DELETE", "/api/v1/namespaces/evict/pods/held", "application/json", "replay"),
        ("DELETE", "/api/v1/namespaces/evict/pods/kept", "application/json", "replay"),
        ("PATCH", "/api/v1/namespaces/evict/pods/held", MERGE_PATCH, "replay"),
        ("POST", "/api/v1/namespaces/evict/events", "application/json", "replay"),
    ]
