"""tracker/foreground.py: when the state's optional background work may run between the scheduler's verbs.

`delay` is pure over a given clock (one named row per case). `quiet()` is
checked with real time but only for order and lower bounds, with upper
bounds far above them, so that a loaded machine cannot fail it.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import pytest

from tracker.foreground import Foreground

GAP = 0.005


@dataclass(frozen=True)
class DelayRow:
    name: str
    begins: int
    ends: int
    ended_at: float | None  # the clock at the ends
    now: float
    delay: float


DELAY_ROWS = [
    DelayRow("no verb yet: quiet", 0, 0, None, 100.0, 0.0),
    DelayRow("a verb in flight: wait a gap and look again", 1, 0, None, 100.0, GAP),
    DelayRow("two in flight, one answered: still in flight", 2, 1, 99.0, 100.0, GAP),
    DelayRow("just answered: the rest of the gap", 1, 1, 100.0, 100.002, GAP - 0.002),
    DelayRow("answered a gap ago: quiet", 1, 1, 100.0, 100.0 + GAP, 0.0),
    DelayRow("answered long ago: quiet", 3, 3, 50.0, 100.0, 0.0),
]


@pytest.mark.parametrize("row", DELAY_ROWS, ids=[r.name for r in DELAY_ROWS])
def test_delay(row: DelayRow) -> None:
    clock = [0.0]
    fg = Foreground(gap=GAP, clock=lambda: clock[0])
    for _ in range(row.begins):
        fg.begin()
    clock[0] = row.ended_at if row.ended_at is not None else 0.0
    for _ in range(row.ends):
        fg.end()
    assert math.isclose(fg.delay(row.now), row.delay, abs_tol=1e-9)


async def test_quiet_returns_at_once_without_verbs() -> None:
    fg = Foreground(gap=10.0, max_defer=10.0)
    await asyncio.wait_for(fg.quiet(), 5)


async def test_quiet_waits_for_the_verb_in_flight_then_the_gap() -> None:
    gap = 0.05
    fg = Foreground(gap=gap, max_defer=60.0)
    fg.begin()
    waiting = asyncio.create_task(fg.quiet())
    await asyncio.sleep(0.1)
    assert not waiting.done(), "background work ran while a verb was in flight"
    ended = time.monotonic()
    fg.end()
    await asyncio.wait_for(waiting, 30)
    assert time.monotonic() - ended >= gap, "background work ran within the gap after a verb"


async def test_quiet_goes_on_after_the_longest_deferral_under_verbs_that_never_stop() -> None:
    fg = Foreground(gap=0.01, max_defer=0.2)
    fg.begin()  # never ended: a scheduler that never pauses
    start = time.monotonic()
    await asyncio.wait_for(fg.quiet(), 30)
    assert time.monotonic() - start >= 0.2


async def test_quiet_returns_when_work_that_must_not_wait_arrives() -> None:
    fg = Foreground(gap=0.01, max_defer=60.0)
    fg.begin()
    arrived = False
    waiting = asyncio.create_task(fg.quiet(lambda: arrived))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    arrived = True
    await asyncio.wait_for(waiting, 30)
