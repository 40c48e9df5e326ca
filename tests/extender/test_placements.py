"""The placement gate: a /filter waits for the /bind of pods placed before it, within bounds."""

from __future__ import annotations

import asyncio
import time

from extender.placements import STREAK_OFF, PlacementGate


async def test_filter_waits_until_the_earlier_bind_decides() -> None:
    gate = PlacementGate(timeout=2.0, armed=True)
    gate.expect_bind("a")
    asyncio.get_running_loop().call_later(0.05, gate.decided, "a")
    waited, expired = await gate.wait("b")
    assert 0.03 < waited < 1.0 and expired == 0


async def test_a_bind_that_never_comes_costs_one_bounded_wait() -> None:
    gate = PlacementGate(timeout=0.1, armed=True)
    gate.expect_bind("a")
    waited, expired = await gate.wait("b")
    assert expired == 1 and 0.08 < waited < 0.5
    assert (await gate.wait("c")) == (0.0, 0), "the expired expectation is gone"


async def test_a_pod_back_in_filter_does_not_wait_for_itself() -> None:
    gate = PlacementGate(timeout=5.0, armed=True)
    gate.expect_bind("a")
    start = time.monotonic()
    assert (await gate.wait("a")) == (0.0, 0)
    assert time.monotonic() - start < 0.1


async def test_filters_without_binds_turn_the_wait_off_until_a_bind_arrives() -> None:
    gate = PlacementGate(timeout=0.05, armed=True)
    for i in range(STREAK_OFF):
        gate.expect_bind(f"p{i}")
        assert (await gate.wait(f"q{i}"))[1] == 1
    assert not gate.waiting
    gate.expect_bind("x")
    assert (await gate.wait("y")) == (0.0, 0), "no wait while binds do not come"
    await asyncio.sleep(0.06)  # x's bind never comes either
    gate.expect_bind("z")
    gate.decided("z")  # a bind arrives: the scheduler binds after all
    assert gate.waiting
    gate.expect_bind("w")
    asyncio.get_running_loop().call_later(0.01, gate.decided, "w")
    waited, expired = await gate.wait("v")
    assert expired == 0 and waited > 0


async def test_off_wait_is_zero() -> None:
    gate = PlacementGate(timeout=0, armed=True)
    gate.expect_bind("a")
    assert (await gate.wait("b")) == (0.0, 0)


async def test_the_gate_starts_off_and_turns_on_with_the_first_bind() -> None:
    gate = PlacementGate(timeout=1.0)
    gate.expect_bind("a", frozenset({"n1"}), ("ns/c-a",))
    assert not gate.waiting and gate.in_flight() == [], "a client that only filters sees every node that fits"
    assert (await gate.wait("b")) == (0.0, 0)
    gate.decided("a")  # a scheduler: it binds the pods it filtered
    assert gate.waiting
    gate.expect_bind("c", frozenset({"n1"}), ("ns/c-c",))
    [placed] = gate.in_flight()
    assert placed.nodes == frozenset({"n1"}) and placed.claims == ("ns/c-c",)
    gate.forget("c")
    assert gate.in_flight() == []
