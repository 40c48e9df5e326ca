"""The reflector's pieces without a server: what one watch line means, and how a reflector applies it."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from tracker import events as ev
from tracker.apiserver.reflector import (
    Bookmark,
    Freshness,
    Gone,
    GoneError,
    Reflector,
    WatchError,
    WatchEvent,
    WatchLine,
    WatchProgress,
    process_line,
)
from tracker.resources import KIND_RESOURCES
from tracker.source import SourceError


def line(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


POD = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"}}

CASES: list[tuple[str, bytes, WatchLine]] = [
    ("blank line", b"\n", None),
    ("whitespace only", b"  \r\n", None),
    ("added", line({"type": "ADDED", "object": POD}), WatchEvent("ADDED", POD, "7")),
    ("modified", line({"type": "MODIFIED", "object": POD}), WatchEvent("MODIFIED", POD, "7")),
    ("deleted", line({"type": "DELETED", "object": POD}), WatchEvent("DELETED", POD, "7")),
    (
        "event without a version",
        line({"type": "ADDED", "object": {"metadata": {"name": "x"}}}),
        WatchEvent("ADDED", {"metadata": {"name": "x"}}, None),
    ),
    (
        "event with an empty version",
        line({"type": "ADDED", "object": {"metadata": {"resourceVersion": ""}}}),
        WatchEvent("ADDED", {"metadata": {"resourceVersion": ""}}, None),
    ),
    ("bookmark", line({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}), Bookmark("42")),
    ("bookmark without a version", line({"type": "BOOKMARK", "object": {}}), Bookmark(None)),
    ("410 by code", line({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}), Gone()),
    ("Gone by reason alone", line({"type": "ERROR", "object": {"reason": "Gone"}}), Gone()),
    ("Expired by reason alone", line({"type": "ERROR", "object": {"reason": "Expired"}}), Gone()),
    ("other error", line({"type": "ERROR", "object": {"code": 500, "message": "etcd is sad"}}), WatchError("etcd is sad")),
    ("error without a message", line({"type": "ERROR", "object": {"code": 500}}), WatchError("{'code': 500}")),
    ("unknown type", line({"type": "SURPRISE", "object": POD}), None),
    ("no type", line({"object": POD}), None),
]


@pytest.mark.parametrize(("raw", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_process_line(raw: bytes, expected: WatchLine) -> None:
    assert process_line(raw) == expected


@pytest.mark.parametrize("raw", [b"{not json\n", b'"a string"\n', b"[1, 2]\n"], ids=["not json", "a string", "an array"])
def test_a_broken_line_raises(raw: bytes) -> None:
    with pytest.raises((ValueError, AttributeError)):
        process_line(raw)


class Sink:
    ready = True

    def __init__(self) -> None:
        self.events: list[ev.ObjectEvent] = []

    def apply(self, event: ev.ObjectEvent) -> None:
        self.events.append(event)

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        raise AssertionError("not listing")

    def mark_synced(self, kind: str, group: str) -> None:
        raise AssertionError("not listing")


def reflector(sink: Sink, rvs: dict[tuple[str, str], str]) -> Reflector:
    stats = {"lists": 0, "watch_events": 0, "relists_410": 0, "watch_restarts": 0, "errors": 0}
    return Reflector(
        KIND_RESOURCES[ev.POD],
        sink,
        transport=None,  # type: ignore[arg-type]  # handle() never reaches the server
        freshness=Freshness(30.0),
        stats=stats,
        last_resource_versions=rvs,
        watch_timeout_seconds=1,
    )


APPLY: list[tuple[str, WatchLine, bool, str, int, int]] = [
    # (case, line, applied (the caller yields), progress.rv after, delivered, events in the sink)
    ("nothing", None, False, "1", 0, 0),
    ("an event advances the RV", WatchEvent("ADDED", dict(POD), "7"), True, "7", 1, 1),
    ("an event without a version keeps it", WatchEvent("MODIFIED", {"metadata": {"name": "q", "namespace": "ns"}}, None), True, "1", 1, 1),
    ("a bookmark advances the RV", Bookmark("42"), False, "42", 1, 0),
    ("an empty bookmark counts, keeps the RV", Bookmark(None), False, "1", 1, 0),
]


@pytest.mark.parametrize(("decoded", "applied", "rv", "delivered", "events"), [c[1:] for c in APPLY], ids=[c[0] for c in APPLY])
def test_handle(decoded: WatchLine, applied: bool, rv: str, delivered: int, events: int) -> None:
    sink, rvs = Sink(), {}
    r = reflector(sink, rvs)
    progress = WatchProgress("1")
    assert r.handle(decoded, progress) is applied
    assert (progress.rv, progress.delivered, len(sink.events)) == (rv, delivered, events)
    assert rvs.get((ev.POD, ev.GROUP_CORE), "1") == rv
    if events:
        e = sink.events[0]
        assert (e.kind, e.group, e.object["kind"]) == (ev.POD, ev.GROUP_CORE, ev.POD)
        assert e.key == f"ns/{e.object['metadata']['name']}"
        assert r.stats["watch_events"] == 1


def test_handle_gone_and_errors_raise() -> None:
    r = reflector(Sink(), {})
    with pytest.raises(GoneError):
        r.handle(Gone(), WatchProgress("1"))
    with pytest.raises(SourceError, match="watch pods: etcd is sad"):
        r.handle(WatchError("etcd is sad"), WatchProgress("1"))


FRESHNESS = [
    # name, watching, seconds since the server last answered, seconds since the last sync, stale?
    ("watching-server-answers", True, 1.0, 100.0, False),
    ("watching-server-silent", True, 31.0, 1.0, True),
    ("not-watching-recent-list", False, 100.0, 1.0, False),
    ("not-watching-old-list", False, 1.0, 31.0, True),
]


@pytest.mark.parametrize(("name", "watching", "silence", "since_sync", "stale"), FRESHNESS, ids=[r[0] for r in FRESHNESS])
def test_an_open_watch_is_current_only_while_the_server_answers(
    name: str, watching: bool, silence: float, since_sync: float, stale: bool
) -> None:
    """A frozen API server leaves its watches open and silent: they count as current only as
    long as the server last answered (a probe, a list, a watch line)."""
    freshness = Freshness(30.0)
    st = freshness.of(KIND_RESOURCES[ev.POD])
    now = time.monotonic()
    freshness.last_answer = now - silence
    st.last_sync_monotonic = now - since_sync
    st.watching = watching
    [status] = freshness.status().values()
    assert status["stale"] is stale
