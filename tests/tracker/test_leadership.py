"""Follow mode across hand-overs: when a sidecar may allocate (docs/design.md#leadership, #never-double-allocate-a-device)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from kubesim.clock import FakeClock
from kubesim.fakeapi import FakeApiServer, RequestInfo
from tracker.apiserver import leadership
from tracker.apiserver.leadership import Leadership
from tracker.apiserver.source import ApiSource
from tracker.timestamps import rfc3339


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
    return rfc3339(dt, micro=True)


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


# name -> (the Lease spec the GET returns, None: 404; seconds the follower has been polling; the problem it reports, or None)
# (specs are built when the test runs: their times are relative to now)
RENEWAL_CASES: dict[str, tuple[Callable[[], dict[str, Any] | None], float, str | None]] = {
    "renewed by its scheduler": (lambda: spec("me_1", renewed_ago=1), 60, None),
    "renewed by another replica": (lambda: spec("other_1", renewed_ago=14), 60, None),
    "not renewed for longer than its duration": (
        lambda: spec("other_1", renewed_ago=40),
        0,
        "not renewed for 40 s (leaseDurationSeconds 15)",
    ),
    "never renewed": (lambda: {"holderIdentity": "x_1", "leaseDurationSeconds": 15}, 0, "never renewed"),
    # The one RFC 3339 parser reads a Lease's times as the API server does: an offset is a time, not "never".
    "renewed, written with an offset": (
        lambda: {**spec("other_1"), "renewTime": datetime.now(UTC).astimezone(timezone(timedelta(hours=2))).isoformat()},
        60,
        None,
    ),
    "renewTime not a string": (lambda: {**spec("x_1"), "renewTime": 1767225600}, 0, "never renewed"),
    "missing, but only just started": (lambda: None, 10, None),
    "missing for longer than a lease duration": (lambda: None, 20, "has not existed for 20 s"),
}


@pytest.mark.parametrize("case", RENEWAL_CASES)
async def test_says_loudly_when_nobody_renews_the_followed_lease(case: str, follower, caplog: pytest.LogCaptureFixture) -> None:
    make_spec, polling_for, problem = RENEWAL_CASES[case]
    lead, source, clock = follower
    source.spec = make_spec()
    await lead._follow_once()
    clock.t += polling_for
    await lead._follow_once()
    if problem is None:
        assert lead.lease_problem is None
        assert "not renewed by anyone" not in caplog.text
    else:
        assert lead.lease_problem is not None and problem in lead.lease_problem, lead.lease_problem
        assert "Lease kube-system/kube-scheduler" in lead.lease_problem and "leaderElection" in lead.lease_problem
        assert caplog.text.count("followed lease is not renewed by anyone") == 1  # once per change, not per poll
        assert not lead.is_leader()


async def test_a_renewed_lease_clears_the_problem(follower) -> None:
    lead, source, _clock = follower
    source.spec = spec("other_1", renewed_ago=60)
    await lead._follow_once()
    assert lead.lease_problem is not None
    source.spec = spec("other_1", renewed_ago=0)
    await lead._follow_once()
    assert lead.lease_problem is None


# name -> (the KubeSchedulerConfiguration text, the Lease followed (None: no election), or the error's words)
CONFIGS: dict[str, tuple[str, tuple[str, str] | str | None]] = {
    "named": (
        "kind: KubeSchedulerConfiguration\nleaderElection: {leaderElect: true, resourceNamespace: dra-system, resourceName: dra-scheduler}\n",
        ("dra-system", "dra-scheduler"),
    ),
    "kube-scheduler's defaults": ("kind: KubeSchedulerConfiguration\n", ("kube-system", "kube-scheduler")),
    "no election": ("kind: KubeSchedulerConfiguration\nleaderElection: {leaderElect: false}\n", None),
    "not a scheduler config": ("kind: ConfigMap\n", "not a KubeSchedulerConfiguration"),
    "not yaml": ("kind: [\n", "not valid YAML"),
    "endpoints lock": ("kind: KubeSchedulerConfiguration\nleaderElection: {resourceLock: endpoints}\n", "only leases"),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_the_lease_comes_from_the_schedulers_own_configuration(case: str, tmp_path) -> None:
    text, want = CONFIGS[case]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    if isinstance(want, str):
        with pytest.raises(leadership.SchedulerConfigError, match=want) as e:
            leadership.lease_from_scheduler_config(str(path))
        assert str(path) in str(e.value)
    else:
        assert leadership.lease_from_scheduler_config(str(path)) == want


def test_a_missing_scheduler_config_is_named() -> None:
    with pytest.raises(leadership.SchedulerConfigError, match=r"/nonexistent/config\.yaml: No such file"):
        leadership.lease_from_scheduler_config("/nonexistent/config.yaml")


# name -> (a profile's plugins, whether kube-scheduler keeps DynamicResources on in it)
PROFILES: dict[str, tuple[dict, bool]] = {
    "defaults": ({}, True),
    "disabled under multiPoint": ({"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}, False),
    "all disabled under multiPoint": ({"multiPoint": {"disabled": [{"name": "*"}]}}, False),
    "disabled at filter only": ({"filter": {"disabled": [{"name": "DynamicResources"}]}}, True),
    "re-enabled at reserve": (
        {"multiPoint": {"disabled": [{"name": "*"}]}, "reserve": {"enabled": [{"name": "DynamicResources"}]}},
        True,
    ),
    "another plugin disabled": ({"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}, True),
}


@pytest.mark.parametrize("case", PROFILES)
def test_the_in_tree_allocator_is_seen_as_kube_scheduler_merges_plugins(case: str) -> None:
    plugins, on = PROFILES[case]
    assert leadership.keeps_in_tree_allocator({"schedulerName": "s", "plugins": plugins}) is on


def created(holder: str, *, transitions: int | None, acquired_ago: float = 0.0) -> dict[str, Any]:
    """A Lease as client-go writes it: leaseTransitions counts the changes of holder (0: only the creator has held it)."""
    out = spec(holder, acquired_ago=acquired_ago)
    if transitions is not None:
        out["leaseTransitions"] = transitions
    return out


@pytest.mark.parametrize(
    ("case", "transitions", "gap", "waits_from_now"),
    [
        # The previous poll found no Lease and this one has only ever been ours: wait from that poll, not from now.
        ("created-by-our-scheduler-since-the-last-poll", 0, 2.0, None),
        ("created-long-after-the-last-poll", 0, 30.0, 0.0),
        # Someone else held it in between (or the count is missing): the whole delay, as for any hand-over.
        ("changed-hands-since-created", 1, 2.0, "delay"),
        ("no-transition-count", None, 2.0, "delay"),
    ],
)
async def test_a_lease_that_appears_after_a_poll_found_none(
    case: str, transitions: int | None, gap: float, waits_from_now, follower
) -> None:
    lead, source, clock = follower
    await lead._follow_once()
    missing_at = clock.t
    assert not lead.is_leader()
    clock.t += gap
    source.spec = created("me_7", transitions=transitions)
    await lead._follow_once()
    asked = clock.t
    if waits_from_now == "delay":
        expected_from = asked + lead.takeover_delay
    elif waits_from_now is None:
        expected_from = missing_at + lead.takeover_delay
    else:
        expected_from = asked + waits_from_now
    left = lead.leading_in()
    if waits_from_now == "delay":
        assert left is None, "a hand-over from another holder is not waited for by binds"
    else:
        assert (left or 0.0) == pytest.approx(max(0.0, expected_from - asked)), case
    assert lead.is_leader() is (expected_from <= asked)
    if expected_from > asked:
        clock.t = expected_from - 0.01
        assert not lead.is_leader()
        clock.t = expected_from
        await lead._follow_once()  # the next poll confirms the holder
        assert lead.is_leader() and lead.leading_in() is None


async def test_leading_in_is_none_for_a_sidecar_whose_scheduler_does_not_hold_the_lease(follower) -> None:
    lead, source, _clock = follower
    source.spec = spec("other_1", acquired_ago=0)
    await lead._follow_once()
    assert lead.leading_in() is None and not lead.is_leader()


class CountingLeaseSource(LeaseSource):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def request(self, method: str, path: str, **kw: Any) -> tuple[int, bytes]:
        self.reads += 1
        return await super().request(method, path, **kw)


async def test_a_bind_reads_the_lease_at_once_only_while_the_last_read_found_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our scheduler creates its Lease and binds before the next periodic read: the bind's read finds it."""
    clock = Clock()
    monkeypatch.setattr(leadership.time, "monotonic", clock)
    source = CountingLeaseSource()
    lead = Leadership(source, mode="follow", namespace="kube-system", name="kube-scheduler", identity="me", hostname="me")
    await lead._follow_once()  # no Lease yet
    missing_at = clock.t
    clock.t += 1.0
    source.spec = created("me_8", transitions=0)
    await asyncio.gather(lead.poll_if_missing(), lead.poll_if_missing(), lead.poll_if_missing())
    assert source.reads == 2, "concurrent binds share one read"
    assert lead.leading_in() == pytest.approx(missing_at + lead.takeover_delay - clock.t)
    await lead.poll_if_missing()
    assert source.reads == 2, "the last read found the Lease: binds do not read it again"


async def test_reads_asked_for_by_binds_are_spaced(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(leadership.time, "monotonic", clock)
    source = CountingLeaseSource()
    lead = Leadership(source, mode="follow", namespace="kube-system", name="kube-scheduler", identity="me", hostname="me")
    await lead._follow_once()
    await lead.poll_if_missing()
    assert source.reads == 1, "right after a read: not again"
    clock.t += leadership.ON_DEMAND_INTERVAL
    await lead.poll_if_missing()
    assert source.reads == 2


@pytest.mark.parametrize(
    ("case", "holder", "duration", "renewed_ago", "before", "after", "fresh"),
    [
        # The old scheduler stopped long ago; ours takes the expired Lease: one change of holder since the read.
        ("expired-long-ago-taken-by-ours", "old_1", 15, 60.0, 3, 4, True),
        # kube-scheduler released it on exit (holder "", 1 s) shortly before: free since then, counted on our clock.
        ("released-just-before", "", 1, 2.5, 3, 4, True),
        ("expired-only-just (within the clocks' allowance)", "old_1", 15, 15.5, 3, 4, False),
        ("changed-holder-twice-since", "old_1", 15, 60.0, 3, 5, False),
        ("held-and-live-at-the-read", "old_1", 15, 1.0, 3, 4, False),
    ],
)
async def test_our_scheduler_takes_a_lease_nobody_held_at_the_last_read(
    case: str, holder: str, duration: int, renewed_ago: float, before: int, after: int, fresh: bool, follower
) -> None:
    lead, source, clock = follower
    source.spec = {**spec(holder, renewed_ago=renewed_ago), "leaseTransitions": before, "leaseDurationSeconds": duration}
    await lead._follow_once()
    read_at = clock.t
    assert not lead.is_leader()
    clock.t += 2.0
    source.spec = created("me_9", transitions=after)
    await lead._follow_once()
    if fresh:
        # Free since its term ended (plus the clocks' allowance): whoever led stopped by then + the validity window.
        free_since = read_at - (renewed_ago - duration) + leadership.TAKEOVER_MARGIN
        left = free_since + lead.takeover_delay - clock.t
        assert (lead.leading_in() or 0.0) == pytest.approx(max(0.0, left), abs=0.01), case
        assert lead.is_leader() is (left <= 0), case
    else:
        assert lead.leading_in() is None, case
        assert not lead.is_leader(), "the whole hand-over wait"


# ---------------------------------------------------------------------- elect mode (client-go's leaderelection), on the fake API server

ELECT_NS = "dra-system"


@contextlib.asynccontextmanager
async def elector(kubeconfig: Path, clock: FakeClock, identity: str = "me_1") -> AsyncIterator[Leadership]:
    """A `--leader-elect` Leadership on its own API session (closed after), counting time on `clock`."""
    source = ApiSource(kubeconfig=str(kubeconfig))
    try:
        yield Leadership(source, mode="elect", namespace=ELECT_NS, name="dra-extender", identity=identity, hostname="me", clock=clock.now)
    finally:
        await source.close()


def _lease_put_answers_late(clock: FakeClock, seconds: float) -> Callable[[RequestInfo], None]:
    """The Lease's update takes `seconds` (of the test's clock) to be answered."""

    def react(info: RequestInfo) -> None:
        if info.resource == "leases" and info.method == "PUT":
            clock.advance(seconds)

    return react


async def test_a_renewal_answered_late_counts_from_when_it_was_sent(tmp_path: Path) -> None:
    clock = FakeClock()
    async with FakeApiServer() as api, elector(api.write_kubeconfig(tmp_path / "kubeconfig"), clock) as lead:
        await lead._elect_once()  # creates the Lease
        assert lead.is_leader()
        clock.advance(lead.retry_period)
        sent = clock.now()
        api.add_reactor(_lease_put_answers_late(clock, 10.0))
        await lead._elect_once()
        assert clock.now() == sent + 10.0
        clock.advance_to(sent + lead.lease_duration - 0.01)
        assert lead.is_leader()
        clock.advance_to(sent + lead.lease_duration)  # what the Lease written at `sent` promises the other candidates
        assert not lead.is_leader(), "leadership outlived the renewal's lease duration"


def other_lease(holder: str, *, renewed_ago: float, duration: int = 15) -> dict[str, Any]:
    renewed = datetime.now(UTC) - timedelta(seconds=renewed_ago)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "dra-extender", "namespace": ELECT_NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": micro(renewed), "acquireTime": micro(renewed)},
    }


def _renew_other(api: FakeApiServer) -> None:
    lease = api.get("leases", ELECT_NS, "dra-extender", group="coordination.k8s.io")
    assert lease is not None
    lease["spec"]["renewTime"] = micro(datetime.now(UTC))
    api.update(lease)


# name -> (the Lease another replica left: holder, seconds since its renewTime (on its clock), its leaseDurationSeconds;
#          seconds after our first read at which that replica renews once more (None: never);
#          seconds after our first read at which we take the Lease)
TAKEOVERS: dict[str, tuple[str, float, int, float | None, float]] = {
    # Its renewTime says long expired, but our clock cannot compare with its: a whole duration from our first sight.
    "expired by the holder's renewTime": ("other_1", 60.0, 15, None, 15.0),
    "live when first seen": ("other_1", 0.0, 15, None, 15.0),
    "renewed while we wait": ("other_1", 0.0, 15, 10.0, 25.0),
    "the holder's duration is longer than ours": ("other_1", 60.0, 30, None, 30.0),
    # client-go's release (no holder): free at once.
    "released": ("", 0.0, 1, None, 0.0),
}


@pytest.mark.parametrize("case", TAKEOVERS)
async def test_a_candidate_waits_a_whole_lease_duration_from_when_it_last_saw_the_lease_change(case: str, tmp_path: Path) -> None:
    holder, renewed_ago, duration, renews_at, takes_at = TAKEOVERS[case]
    clock = FakeClock()
    async with FakeApiServer() as api:
        api.create(other_lease(holder, renewed_ago=renewed_ago, duration=duration))
        async with elector(api.write_kubeconfig(tmp_path / "kubeconfig"), clock) as lead:
            took_at = await _elect_until_leading(api, clock, lead, renews_at)
        assert took_at == takes_at, case
        spec = api.get("leases", ELECT_NS, "dra-extender", group="coordination.k8s.io")["spec"]
        assert spec["holderIdentity"] == "me_1", case


async def _elect_until_leading(api: FakeApiServer, clock: FakeClock, lead: Leadership, renews_at: float | None) -> float | None:
    """Seconds from the first try until `lead` leads, trying every second (the other holder renewing at `renews_at`)."""
    first = clock.now()
    for step in range(40):
        if renews_at is not None and step == renews_at:
            _renew_other(api)
        await lead._elect_once()
        if lead.is_leader():
            return clock.now() - first
        clock.advance(1.0)
    return None


async def test_a_stopping_leader_releases_the_lease_and_stops_leading_first(tmp_path: Path) -> None:
    clock = FakeClock()
    async with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        async with elector(kubeconfig, clock) as lead:
            await lead._elect_once()
            assert lead.is_leader()
            seen: list[bool] = []

            def on_release(info: RequestInfo) -> None:
                if info.resource == "leases" and info.method == "PUT":
                    seen.append(lead.is_leader())

            api.add_reactor(on_release)
            await lead.release()
            assert seen == [False], "leadership ends before the release is sent"
        spec = api.get("leases", ELECT_NS, "dra-extender", group="coordination.k8s.io")["spec"]
        assert not spec.get("holderIdentity") and spec["leaseDurationSeconds"] == 1
        async with elector(kubeconfig, clock, identity="next_2") as successor:
            await successor._elect_once()
            assert successor.is_leader(), "a released Lease is free at once"
