"""A device's ladder state stays bounded whatever the alert traffic, with the ladder's answers unchanged (issue 39, row 2).

The pure rows drive `ladder.apply` with more signals and occurrences than a
state keeps, the upgrade rows read back annotations of the previous version,
and the end-to-end rows send the storm as found through the receiver to the
fake API server, which refuses annotations over 256 KiB as a real one does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from allocator.types import DeviceID
from controllers.health import ladder
from controllers.health.alerts import alert_key
from controllers.health.ladder import ACTIVE_KEPT, OCCURRENCES_KEPT, DeviceState, effect_of
from controllers.health.rules import STATE, decode, encode_state, rule_name, rule_object
from kubesim.objects import node
from tests.eviction.harness import CRD, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule
from tests.health.test_ladder import make_rule, restart, run

T0 = 1_764_633_600.123456  # a real clock's time: floats as long as they get
STATE_LIMIT = 32 * 1024  # the most a rule's state annotation may take


def fp(i: int) -> str:
    return f"{i:016x}"  # Alertmanager's fingerprints: 16 hex digits


def fired(state: DeviceState | None, keys: range, now: float) -> DeviceState | None:
    return ladder.apply(state, [(alert_key(fp(i)), "c") for i in keys], now)[0]


def resolved(state: DeviceState | None, keys: range, now: float) -> DeviceState | None:
    return ladder.apply(state, [(alert_key(fp(i)), None) for i in keys], now)[0]


# ---------------------------------------------------------------------- signals past the cap


@dataclass(frozen=True)
class SignalRow:
    name: str
    steps: tuple[tuple[str, range], ...]  # (fire|resolve, fingerprints), one instant each
    firing: bool
    overflow: int


SIGNAL_ROWS = [
    SignalRow("10,000 fingerprints: 128 tracked, the rest counted", (("fire", range(10_000)),), True, 10_000 - ACTIVE_KEPT),
    SignalRow("all 10,000 resolve: the hold-down starts", (("fire", range(10_000)), ("resolve", range(10_000))), False, 0),
    SignalRow("resolved in another order: the same", (("fire", range(10_000)), ("resolve", range(9_999, -1, -1))), False, 0),
    SignalRow(
        "the tracked ones resolve, one beyond the cap still fires",
        (("fire", range(ACTIVE_KEPT + 1)), ("resolve", range(ACTIVE_KEPT))),
        True,
        1,
    ),
    SignalRow(
        "a tracked one's resolution delivered twice drains nothing",
        (("fire", range(ACTIVE_KEPT + 1)), ("resolve", range(ACTIVE_KEPT)), ("resolve", range(ACTIVE_KEPT))),
        True,
        1,
    ),
    SignalRow(
        "one beyond the cap resolves first, then the tracked ones",
        (("fire", range(ACTIVE_KEPT + 1)), ("resolve", range(ACTIVE_KEPT, ACTIVE_KEPT + 1)), ("resolve", range(ACTIVE_KEPT))),
        False,
        0,
    ),
    SignalRow("a resolution nobody fired, with nothing beyond the cap: nothing", (("fire", range(3)), ("resolve", range(5, 6))), True, 0),
    SignalRow(
        "2,000 more fire and resolve over 10,000: still firing",
        (("fire", range(10_000)), ("fire", range(10_000, 12_000)), ("resolve", range(10_000, 12_000))),
        True,
        10_000 - ACTIVE_KEPT,
    ),
]


@pytest.mark.parametrize("row", SIGNAL_ROWS, ids=[r.name for r in SIGNAL_ROWS])
def test_signals_past_the_cap_are_counted_and_the_device_fires_while_any_does(row: SignalRow) -> None:
    state: DeviceState | None = None
    for i, (op, keys) in enumerate(row.steps):
        state = fired(state, keys, T0 + i) if op == "fire" else resolved(state, keys, T0 + i)
        assert state is not None
        assert len(state.active) + len(state.retired) <= ACTIVE_KEPT
        assert len(state.occurrences) <= OCCURRENCES_KEPT
        assert len(encode_state(state, "node-a").encode()) <= STATE_LIMIT
        assert through_annotation(state) == state  # a restart reads back the same
    assert state is not None
    assert (state.firing, state.overflow) == (row.firing, row.overflow)
    assert (state.resolved_at is None) == row.firing


# ---------------------------------------------------------------------- occurrences past the cap

RULE_1000 = make_rule(steps=[{"effect": "NoSchedule"}, {"effect": "NoExecute", "occurrences": 1000, "within": "1h"}])


@dataclass(frozen=True)
class CountRow:
    name: str
    before: int  # firings more than an hour before the decision
    within: int  # firings in the last hour
    effect: str


COUNT_ROWS = [
    CountRow("1,000 within the hour, 3,000 before: reached", 3000, 1000, "NoExecute"),
    CountRow("999 within the hour, 3,000 before: not reached", 3000, 999, "NoSchedule"),
    CountRow("5,000 within the hour: reached", 0, 5000, "NoExecute"),
]


@pytest.mark.parametrize("row", COUNT_ROWS, ids=[r.name for r in COUNT_ROWS])
def test_the_count_of_firings_within_a_window_stays_exact_past_the_cap(row: CountRow) -> None:
    """Each firing resolves before the next (a flapping device): the newest OCCURRENCES_KEPT decide every step a policy can have."""
    state: DeviceState | None = None
    now = T0
    times = [T0 + i for i in range(row.before)] + [T0 + 7200 + i * 0.5 for i in range(row.within)]
    for i, t in enumerate(times):
        state = fired(state, range(i, i + 1), t)
        if i < len(times) - 1:  # the last one still fires (a count reached while resolved does not escalate)
            state = resolved(state, range(i, i + 1), t)
        now = t
    assert state is not None and len(state.occurrences) <= OCCURRENCES_KEPT
    got = run({"n/gpu-0": through_annotation(state)}, now + 1, rule=RULE_1000).states["n/gpu-0"]
    assert effect_of(RULE_1000, got.step) == row.effect


def test_the_crd_allows_no_more_occurrences_than_a_state_keeps() -> None:
    """The exact count above needs every policy's `occurrences` <= OCCURRENCES_KEPT: the schema says so."""
    import yaml

    crd = yaml.safe_load(Path("deploy/crds/devicehealthpolicies.resource.dra-extender.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    step = schema["properties"]["spec"]["properties"]["rules"]["items"]["properties"]["steps"]["items"]
    assert step["properties"]["occurrences"]["maximum"] == OCCURRENCES_KEPT


def test_a_state_at_every_bound_encodes_within_32_kib() -> None:
    """The largest state there is: 128 signals of the longest key, 1,000 occurrences of full-length floats, the longest cause and node."""
    long_fp = "f" * 64  # the longest fingerprint kept as is
    state = ladder.apply(None, [(alert_key(f"{i:03d}{long_fp[3:]}"), "x" * 10_000) for i in range(5000)], T0)[0]
    assert state is not None
    state = ladder.apply(state, [(alert_key(f"{i:03d}{long_fp[3:]}"), None) for i in range(ACTIVE_KEPT // 2)], T0 + 1)[0]
    assert state is not None and state.retired
    for i in range(OCCURRENCES_KEPT):
        state = ladder.apply(state, [(alert_key(f"r{i}"), "c" * 1000)], T0 + 2 + i * 1.0000001)[0]
    assert state is not None and len(state.occurrences) == OCCURRENCES_KEPT
    state = ladder.apply(state, [(alert_key("z" * 100_000), "y" * 100_000)], T0 + 5000.0000001)[0]
    assert state is not None
    state = replace(state, no_execute_at=T0 + 0.1234567, step=2)
    size = len(encode_state(state, "n" * 253).encode())
    assert size <= STATE_LIMIT, size


# ---------------------------------------------------------------------- the previous version's annotations


def old_rule(active: list[str], occurrences: list[float], *, t0: float = T0) -> dict[str, Any]:
    """A rule as the previous version wrote it: every signal and every occurrence of 24 h."""
    did = DeviceID("gpu.example.com", "node-a", "gpu-0")
    obj = rule_object(
        policy="gpu-health",
        policy_uid="u",
        rule="xid-79",
        did=did,
        node="node-a",
        key="health.example.com/xid",
        value="79",
        effect="NoExecute",
        state=DeviceState(first_seen=T0),
    )
    obj["metadata"]["annotations"][STATE] = orjson.dumps(
        {
            "node": "node-a",
            "firstSeen": t0,
            "active": active,
            "occurrences": occurrences,
            "step": 1,
            "resolvedAt": None,
            "noExecuteAt": t0 + 300,
            "cause": "GPUXid xid=79",
            "lastSignal": occurrences[-1] if occurrences else t0,
        }
    ).decode()
    return obj


@dataclass(frozen=True)
class UpgradeRow:
    name: str
    active: int
    occurrences: int
    overflow: int


UPGRADE_ROWS = [
    UpgradeRow("12,000 signals, 24,000 occurrences", 12_000, 24_000, 12_000 - ACTIVE_KEPT),
    UpgradeRow("a handful, as most devices have", 3, 5, 0),
    UpgradeRow("exactly the cap", ACTIVE_KEPT, OCCURRENCES_KEPT, 0),
]


@pytest.mark.parametrize("row", UPGRADE_ROWS, ids=[r.name for r in UPGRADE_ROWS])
def test_an_annotation_of_the_previous_version_reads_back_bounded_without_losing_state(row: UpgradeRow) -> None:
    times = [T0 + i * 0.25 for i in range(row.occurrences)]
    owned = decode(old_rule([alert_key(fp(i)) for i in range(row.active)], times))
    assert owned is not None
    s = owned.state
    assert s.firing and s.step == 1 and s.no_execute_at == T0 + 300 and s.first_seen == T0
    assert len(s.active) == min(row.active, ACTIVE_KEPT) and s.overflow == row.overflow
    assert s.occurrences == tuple(times[-OCCURRENCES_KEPT:])  # the newest: every count a policy can ask stays exact
    assert len(encode_state(s, owned.node).encode()) <= STATE_LIMIT
    # Every one of them resolving resolves the device, whichever were tracked.
    after = resolved(s, range(row.active), T0 + 10**5)
    assert after is not None and not after.firing and after.resolved_at == T0 + 10**5


def test_a_long_fingerprint_the_previous_version_kept_whole_still_resolves() -> None:
    long = "x" * 300
    owned = decode(old_rule(["alert:" + long], [T0]))
    assert owned is not None and owned.state.active == frozenset({alert_key(long)})
    after = ladder.resolve(owned.state, alert_key(long), T0 + 1)
    assert after is not None and not after.firing


def through_annotation(state: DeviceState) -> DeviceState:
    """What a restart reads back."""
    return restart({"n/gpu-0": state})["n/gpu-0"]


# ---------------------------------------------------------------------- the storm as found, end to end

UUID = "GPU-node-a-0"
HOLD_DOWN = 15 * 60


def storm(keys: range, status: str = "firing") -> dict[str, Any]:
    return delivery(*(alert(UUID, fingerprint=fp(i), status=status) for i in keys))


def the_rule(cluster: HealthCluster) -> dict[str, Any] | None:
    name = rule_name("gpu-health", "xid-79", DeviceID("gpu.example.com", "node-a", "gpu-0"))
    return cluster.api.get("devicetaintrules", None, name, group=CRD)


def state_bytes(cluster: HealthCluster) -> int:
    obj = the_rule(cluster)
    assert obj is not None
    return len(obj["metadata"]["annotations"][STATE].encode())


async def test_10000_fingerprints_then_2000_that_fire_and_resolve_keep_the_rule_small_and_written(cluster: HealthCluster) -> None:
    """As found: the annotation grew to 580,185 and 618,185 bytes, past what a real API server stores."""
    seed(cluster.api, node("node-a"), uuid_slice(8), policy("gpu-health", xid_rule()))
    await cluster.start()
    assert await cluster.post(storm(range(10_000))) == (200, {"alerts": {"firing": 10_000}})
    await cluster.advance(1)
    assert state_bytes(cluster) <= STATE_LIMIT
    assert await cluster.post(storm(range(10_000, 12_000))) == (200, {"alerts": {"firing": 2_000}})
    assert await cluster.post(storm(range(10_000, 12_000), "resolved")) == (200, {"alerts": {"resolved": 2_000}})
    await cluster.advance(1)
    assert state_bytes(cluster) <= STATE_LIMIT
    obj = the_rule(cluster)
    assert obj is not None and obj["spec"]["taint"]["effect"] == "NoExecute"  # 3 firings within the hour, as before
    assert cluster.health is not None and cluster.health.failing is None
    # Every one resolves: the hold-down, then the rule goes; until then it stays.
    assert await cluster.post(storm(range(10_000), "resolved")) == (200, {"alerts": {"resolved": 10_000}})
    await cluster.advance(HOLD_DOWN - 10)
    assert the_rule(cluster) is not None
    await cluster.advance(20)
    assert the_rule(cluster) is None


async def test_a_rule_the_previous_version_wrote_resumes_and_is_rewritten_bounded(cluster: HealthCluster) -> None:
    """5,000 signals in an old annotation (150 KB): the device keeps its rung, the next pass writes it bounded, and all resolving clears it."""
    t0 = cluster.clock.now() - 600
    seed(
        cluster.api,
        node("node-a"),
        uuid_slice(8),
        policy("gpu-health", xid_rule()),
        old_rule([alert_key(fp(i)) for i in range(5000)], [t0 + i * 0.1 for i in range(5000)], t0=t0),
    )
    assert state_bytes(cluster) > 100_000
    await cluster.start()
    await cluster.advance(1)
    assert state_bytes(cluster) <= STATE_LIMIT
    obj = the_rule(cluster)
    assert obj is not None and obj["spec"]["taint"]["effect"] == "NoExecute"
    assert await cluster.post(storm(range(5000), "resolved")) == (200, {"alerts": {"resolved": 5000}})
    await cluster.advance(HOLD_DOWN - 10)
    assert the_rule(cluster) is not None
    await cluster.advance(20)
    assert the_rule(cluster) is None
