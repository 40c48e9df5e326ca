"""Follow mode across hand-overs: when a sidecar may allocate (docs/design.md#leadership, #never-double-allocate-a-device)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from tracker import leadership
from tracker.leadership import Leadership


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class LeaseSource:
    """Answers the Lease GET with whatever the test set."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] | None = None

    async def request(self, method: str, path: str, **_: Any) -> tuple[int, bytes]:
        assert method == "GET" and path.endswith("/leases/kube-scheduler")
        if self.spec is None:
            return 404, b"{}"
        return 200, orjson.dumps({"metadata": {"name": "kube-scheduler"}, "spec": self.spec})


def micro(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def spec(holder: str, *, acquired_ago: float | None = None, renewed_ago: float = 0.0) -> dict[str, Any]:
    now = datetime.now(UTC)
    out: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": micro(now - timedelta(seconds=renewed_ago))}
    if acquired_ago is not None:
        out["acquireTime"] = micro(now - timedelta(seconds=acquired_ago))
    return out


@pytest.fixture
def follower(monkeypatch: pytest.MonkeyPatch) -> tuple[Leadership, LeaseSource, Clock]:
    clock = Clock()
    monkeypatch.setattr(leadership.time, "monotonic", clock)
    source = LeaseSource()
    lead = Leadership(source, mode="follow", namespace="kube-system", name="kube-scheduler", identity="me", hostname="me")
    return lead, source, clock


async def test_leads_at_once_when_its_scheduler_has_held_the_lease_for_long(follower) -> None:
    lead, source, _clock = follower
    source.spec = spec("me_1", acquired_ago=600)
    await lead._follow_once()
    assert lead.is_leader()
    source.spec = spec("me_1")  # no acquireTime at all: nothing to wait for either
    lead2 = Leadership(source, mode="follow", namespace="kube-system", name="kube-scheduler", identity="me", hostname="me")
    await lead2._follow_once()
    assert lead2.is_leader()


async def test_waits_after_a_hand_over_until_the_old_holders_sidecar_has_stopped(follower) -> None:
    lead, source, clock = follower
    source.spec = spec("other_1")
    await lead._follow_once()
    assert not lead.is_leader()
    source.spec = spec("me_2", acquired_ago=0)
    clock.t += 2
    asked = clock.t
    await lead._follow_once()
    # The old holder's sidecar trusts its last poll for follow_validity: not before that (+ margin).
    assert lead.takeover_delay > lead.follow_validity >= lead.retry_period
    while clock.t < asked + lead.takeover_delay:
        assert not lead.is_leader(), clock.t - asked
        clock.t += 0.5
        if clock.t - asked >= 2:
            await lead._follow_once()  # polls keep confirming the holder
    assert lead.is_leader()


async def test_a_fresh_sidecar_waits_if_the_lease_just_changed_hands(follower) -> None:
    lead, source, clock = follower
    source.spec = spec("me_3", acquired_ago=1)
    await lead._follow_once()
    assert not lead.is_leader()
    clock.t += lead.takeover_delay
    await lead._follow_once()
    assert lead.is_leader()


async def test_a_positive_poll_is_trusted_only_for_the_validity_window(follower) -> None:
    lead, source, clock = follower
    source.spec = spec("me_4", acquired_ago=600)
    await lead._follow_once()
    assert lead.is_leader()
    clock.t += lead.follow_validity - 0.01
    assert lead.is_leader()
    clock.t += 0.02  # no poll answered since (API server unreachable): stop allocating
    assert not lead.is_leader()
    # The same holder seen again after the gap: no hand-over, no wait.
    await lead._follow_once()
    assert lead.is_leader()


async def test_loses_leadership_at_the_first_poll_after_the_hand_over(follower) -> None:
    lead, source, clock = follower
    source.spec = spec("me_5", acquired_ago=600)
    await lead._follow_once()
    assert lead.is_leader()
    source.spec = spec("other_6", acquired_ago=0)
    clock.t += lead.retry_period
    await lead._follow_once()
    assert not lead.is_leader()
    # An expired lease of ours is no leadership either, and a hostname prefix is not ours.
    for s in (spec("me_5", renewed_ago=60), spec("me-2_7")):
        source.spec = s
        await lead._follow_once()
        assert not lead.is_leader()
    source.spec = None
    await lead._follow_once()
    assert not lead.is_leader()
