"""The leadership gate: (Lease, --read-only, standalone) → may this process write now, and by a bind's deadline.

On a fake clock: a wait for a fresh Lease's hand-over is stepped, never slept
through. The Lease itself (tracker/apiserver/leadership.py) is tested in
test_leadership.py; here it is a FakeLease the row sets up.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kubesim.clock import FakeClock
from kubesim.lease import FakeLease
from tracker.leadership_gate import LEADERSHIP_RESERVE, LeadershipGate

BIND_BUDGET = 4.0  # a bind's deadline, from now (extender/bind/binder.py's DEFAULT_BIND_TIMEOUT)


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    lease: str | None  # None: no Lease (--standalone, --source); else the FakeLease's state, below
    read_only: bool
    may_write: bool  # now
    may_write_by: bool  # by the deadline, having waited if it will
    waited: float = 0.0  # fake seconds the bind waited
    reads: int = 0  # Lease reads the bind asked for
    budget: float = BIND_BUDGET


def lease_in(state: str, clock: FakeClock) -> FakeLease:
    lease = FakeLease(now=clock.now)
    match state:
        case "held":
            pass
        case "not held, a read finds nothing new":
            lease.held = False
        case "not held, a read finds another holder":
            lease.held, lease.on_read = False, (False, 0.0)
        case "not held, a read finds a fresh Lease whose wait ends in time":
            lease.held, lease.on_read = False, (True, 0.5)
        case "not held, a read finds a fresh Lease whose wait ends too late":
            lease.held, lease.on_read = False, (True, BIND_BUDGET - LEADERSHIP_RESERVE + 0.1)
        case "not held, a read fails":
            lease.held, lease.read_error = False, RuntimeError("get Lease kube-system/kube-scheduler: HTTP 500")
        case "in a fresh Lease's wait that ends in time":
            lease.active_from = clock.now() + 0.5
        case "in a fresh Lease's wait that ends too late":
            lease.active_from = clock.now() + BIND_BUDGET - LEADERSHIP_RESERVE + 0.1
        case _:
            raise AssertionError(state)
    return lease


ROWS = [
    Row("standalone: always", lease=None, read_only=False, may_write=True, may_write_by=True),
    Row("read-only without a Lease: never", lease=None, read_only=True, may_write=False, may_write_by=False),
    Row("read-only with a held Lease: never, and no Lease read", lease="held", read_only=True, may_write=False, may_write_by=False),
    Row(
        "read-only in a fresh Lease's wait: never waits",
        lease="in a fresh Lease's wait that ends in time",
        read_only=True,
        may_write=False,
        may_write_by=False,
    ),
    Row("Lease held", lease="held", read_only=False, may_write=True, may_write_by=True),
    Row(
        "Lease not held, nothing new at the bind's read",
        lease="not held, a read finds nothing new",
        read_only=False,
        may_write=False,
        may_write_by=False,
        reads=1,
    ),
    Row(
        "Lease not held, the bind's read finds another holder",
        lease="not held, a read finds another holder",
        read_only=False,
        may_write=False,
        may_write_by=False,
        reads=1,
    ),
    Row(
        "the bind's read finds a fresh Lease: waits out its hand-over",
        lease="not held, a read finds a fresh Lease whose wait ends in time",
        read_only=False,
        may_write=False,
        may_write_by=True,
        waited=0.5,
        reads=1,
    ),
    Row(
        "the bind's read finds a fresh Lease whose wait outlasts the deadline less the reserve",
        lease="not held, a read finds a fresh Lease whose wait ends too late",
        read_only=False,
        may_write=False,
        may_write_by=False,
        reads=1,
    ),
    Row(
        "the bind's read fails: not leading",
        lease="not held, a read fails",
        read_only=False,
        may_write=False,
        may_write_by=False,
        reads=1,
    ),
    Row(
        "no time left for a read within the reserve",
        lease="not held, a read finds a fresh Lease whose wait ends in time",
        read_only=False,
        may_write=False,
        may_write_by=False,
        budget=LEADERSHIP_RESERVE,
    ),
    Row(
        "already in a fresh Lease's wait: waits it out, no read",
        lease="in a fresh Lease's wait that ends in time",
        read_only=False,
        may_write=False,
        may_write_by=True,
        waited=0.5,
    ),
    Row(
        "already in a fresh Lease's wait that outlasts the deadline",
        lease="in a fresh Lease's wait that ends too late",
        read_only=False,
        may_write=False,
        may_write_by=False,
    ),
]


async def stepped(clock: FakeClock, coro: asyncio.Future[bool] | asyncio.Task[bool]) -> bool:
    """Run `coro` to its end, moving the fake clock to each deadline it waits for."""
    task = asyncio.ensure_future(coro)
    for _ in range(1000):
        await asyncio.sleep(0)
        if task.done():
            return task.result()
        deadline = clock.next_deadline()
        if deadline is not None:
            clock.advance_to(deadline)
    task.cancel()
    raise AssertionError("may_write_by did not finish")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_the_gate_combines_the_lease_read_only_and_standalone(row: Row) -> None:
    clock = FakeClock()
    lease = lease_in(row.lease, clock) if row.lease is not None else None
    gate = LeadershipGate(lease, read_only=row.read_only, clock=clock)
    assert gate.may_write() is row.may_write, row.name
    start = clock.now()
    assert await stepped(clock, asyncio.ensure_future(gate.may_write_by(start + row.budget))) is row.may_write_by, row.name
    assert clock.now() - start == pytest.approx(row.waited), row.name
    assert (lease.reads if lease is not None else 0) == row.reads, row.name


async def test_a_bind_waiting_out_a_hand_over_refuses_if_the_lease_moved_on_meanwhile() -> None:
    clock = FakeClock()
    lease = FakeLease(now=clock.now)
    lease.active_from = clock.now() + 0.5
    gate = LeadershipGate(lease, clock=clock)
    waiting = asyncio.ensure_future(gate.may_write_by(clock.now() + BIND_BUDGET))
    await asyncio.sleep(0)
    assert not waiting.done() and clock.next_deadline() == pytest.approx(clock.now() + 0.5)
    lease.held = False  # a poll saw another holder during the wait
    clock.advance(0.5)
    assert await waiting is False


@pytest.mark.parametrize(
    ("name", "gate", "may_write"),
    [
        ("always", LeadershipGate.always(), True),
        ("never", LeadershipGate.never(), False),
    ],
)
async def test_the_fixed_gates(name: str, gate: LeadershipGate, may_write: bool) -> None:
    assert gate.may_write() is may_write, name
    assert await gate.may_write_by(gate.clock.now() + BIND_BUDGET) is may_write, name
