"""Property: over random allocations, deallocations, pool republishes, restarts, foreign
claims reusing a shareID and negative amounts, on pools with shared counters and shared
devices, no counter and no capacity is ever over-committed by an allocation of ours, and
every result follows upstream's rules (a device whole or in shares, never both; a share
never above what the device's policy allows; a device with a negative amount never taken).

What a held device consumes is the most any version of its slice said while it was held, per
counter (docs/design.md, "Counters and shares as allocated"). A restart keeps what each claim of
ours recorded at /bind (the annotation allocator/counter_record.py reads back); a foreign claim
has no record, so for its devices only what their slices say since the restart counts. The
allocated state is the tracker's own ledger (tracker.ledger), fed with the results and records
as the claim watch would feed it and told of every published slice as the slice watch would
tell it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.device_view import DeviceView, SliceView
from allocator.parse import parse_resource_slice
from allocator.quantity import parse_quantity
from allocator.types import AllocationResult, CounterConsumption, DeviceID, Node
from tests.allocator.builders import claim, device_class, view
from tests.tiers import examples
from tracker.ledger import AllocationLedger

D = "gpu.example.com"
NODE = Node("node-1")
CEL = CelEnvironment()
CLASSES = {"gpu": device_class("gpu", f'device.driver == "{D}"')}
GI = 1024**3


def _pool(devices: list[dict[str, Any]], counters: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The pool `p` on node-1: a slice of devices and one of counter sets."""
    return [
        {
            "metadata": {"name": "devices"},
            "spec": {"driver": D, "nodeName": "node-1", "pool": {"name": "p", "resourceSliceCount": 2}, "devices": devices},
        },
        {
            "metadata": {"name": "counters"},
            "spec": {
                "driver": D,
                "nodeName": "node-1",
                "pool": {"name": "p", "resourceSliceCount": 2},
                "sharedCounters": [{"name": n, "counters": c} for n, c in counters.items()],
            },
        },
    ]


def _partition(name: str, counter_set: str, gi: int, *, shared: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "consumesCounters": [{"counterSet": counter_set, "counters": {"memory": {"value": str(gi * GI)}}}],
        "capacity": {"memory": {"value": str(gi * GI)}},
    }
    if shared:
        d["allowMultipleAllocations"] = True
    return d


def _gpus(*gi: int) -> dict[str, dict[str, Any]]:
    return {f"gpu-{g}": {"memory": {"value": str(size * GI)}} for g, size in enumerate(gi)}


# Examples always run (`@example`), each named by how it goes.
SHARE_OF_HELD = "another-share-of-a-held-shared-partition-after-a-republish-over-commits"
FIRST_SHARE = "first-share-of-a-shared-partition-after-a-republish-over-commits"
RAISED_THEN_LOWERED = "held-partitions-raised-then-lowered-keep-the-most"
LOWERED_ACROSS_A_RESTART = "held-partitions-lowered-then-a-restart-keep-what-they-were-allocated-with"
RAISED_LOWERED_RESTARTED = "a-restart-between-republishes-keeps-the-record-and-raises-again"
EXAMPLES = {
    # CI's falsifying example: g0-p0 whole, a 5Gi share of g0-p1, the pool republished with every consumption
    # doubled (20 + 80 of gpu-0's 80Gi: the republish over-commits it), then another 5Gi share of g0-p1. That
    # share adds no counter (a shared device is charged once, upstream skips its check), so it is given.
    SHARE_OF_HELD: (
        _pool(
            [_partition("g0-p0", "gpu-0", 10), _partition("g0-p1", "gpu-0", 40, shared=True), _partition("g1-p0", "gpu-1", 10)],
            _gpus(80, 40),
        ),
        [("alloc", 1, None), ("alloc", 1, 5), ("republish", 0, 4), ("alloc", 1, 5)],
    ),
    # The same over-commit, but the shared partition asked for last is not held yet: its counters are checked,
    # so the pool refuses it.
    FIRST_SHARE: (
        _pool(
            [_partition("g0-p0", "gpu-0", 10), _partition("g0-p1", "gpu-0", 40), _partition("g0-p2", "gpu-0", 10, shared=True)], _gpus(80)
        ),
        [("alloc", 1, None), ("alloc", 1, None), ("republish", 0, 4), ("alloc", 1, 5)],
    ),
    # g0-p0 and g0-p1 held (10 + 10 of 40), republished at 20 each (40 of 40), then at 5 each: they are still
    # charged 20 each, so g0-p2 (5) does not fit.
    RAISED_THEN_LOWERED: (
        _pool([_partition(f"g0-p{p}", "gpu-0", 10) for p in range(3)], _gpus(40)),
        [("alloc", 2, None), ("republish", 0, 4), ("republish", 0, 1), ("alloc", 1, None)],
    ),
    # g0-p0 and g0-p1 held (20 + 20 of 40), republished at half (10 each), the extender restarts: their claims'
    # records still say 20 each, so g0-p2 (now 5) does not fit (before records: 45 of 40 promised).
    LOWERED_ACROSS_A_RESTART: (
        _pool([_partition("g0-p0", "gpu-0", 20), _partition("g0-p1", "gpu-0", 20), _partition("g0-p2", "gpu-0", 10)], _gpus(40)),
        [("alloc", 2, None), ("republish", 0, 1), ("restart", None, None), ("alloc", 1, None)],
    ),
    # Restarts between republishes: lowered (record kept), raised (the larger counts), lowered again, restarted again.
    RAISED_LOWERED_RESTARTED: (
        _pool([_partition("g0-p0", "gpu-0", 10), _partition("g0-p1", "gpu-0", 10), _partition("g0-p2", "gpu-0", 20)], _gpus(40)),
        [
            ("alloc", 1, None),
            ("republish", 0, 1),
            ("restart", None, None),
            ("republish", 0, 4),
            ("restart", None, None),
            ("republish", 0, 1),
            ("restart", None, None),
            ("alloc", 2, None),
        ],
    ),
}


@st.composite
def cluster(draw):
    """One pool: a counter set per GPU, partitions of it (some shared), plain shared devices, maybe a negative one."""
    gpus = draw(st.integers(1, 2))
    counters = {f"gpu-{g}": {"memory": {"value": str(draw(st.sampled_from([40, 80])) * GI)}} for g in range(gpus)}
    devices: list[dict[str, Any]] = []
    for g in range(gpus):
        for p in range(draw(st.integers(1, 4))):
            size = draw(st.sampled_from([10, 20, 40]))
            d: dict[str, Any] = {
                "name": f"g{g}-p{p}",
                "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": str(size * GI)}}}],
                "capacity": {"memory": {"value": str(size * GI)}},
            }
            if draw(st.booleans()):
                d["allowMultipleAllocations"] = True
            devices.append(d)
    for s in range(draw(st.integers(0, 2))):
        devices.append(
            {
                "name": f"shared-{s}",
                "allowMultipleAllocations": True,
                "capacity": {
                    "memory": {
                        "value": str(40 * GI),
                        "requestPolicy": {"default": str(10 * GI), "validRange": {"min": str(10 * GI), "step": str(10 * GI)}},
                    }
                },
            }
        )
    negative = draw(st.sampled_from([None, "consumes", "capacity", "step"]))
    if negative == "consumes":  # a partition that would give counters back
        devices.append({"name": "neg", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": str(-40 * GI)}}}]})
    elif negative == "capacity":
        devices.append({"name": "neg", "allowMultipleAllocations": True, "capacity": {"memory": {"value": str(-40 * GI)}}})
    elif negative == "step":
        devices.append(
            {
                "name": "neg",
                "allowMultipleAllocations": True,
                "capacity": {
                    "memory": {
                        "value": str(40 * GI),
                        "requestPolicy": {"default": str(10 * GI), "validRange": {"min": str(10 * GI), "step": str(-10 * GI)}},
                    }
                },
            }
        )
    slices = _pool(devices, counters)
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("alloc"), st.integers(1, 2), st.sampled_from([None, 5, 10, 15, 20, 30, -20])),
                st.tuples(st.just("free"), st.integers(0, 50), st.none()),
                # drop devices (bit mask) and scale every remaining partition's consumption (x1/2, x1, x2)
                st.tuples(st.just("republish"), st.integers(0, 255), st.sampled_from([1, 2, 4])),
                st.tuples(st.just("restart"), st.none(), st.none()),
                # a foreign claim taking another share of a shared device under an existing shareID
                st.tuples(st.just("duplicate"), st.integers(0, 50), st.sampled_from([5, 10, 20])),
            ),
            min_size=1,
            max_size=14,
        )
    )
    return slices, ops


def _claim(i: int, count: int, memory: int | None):
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": str(memory * GI)}}
    return claim(f"c{i}", {"name": "r", "exactly": exactly})


def _republish(raw: list[dict], generation: int, drop: int, scale: int) -> list[dict]:
    """The pool at a new generation without the devices whose bit is set in `drop`, partitions consuming x scale/2."""
    out = copy.deepcopy(raw)
    for s in out:
        s["spec"]["pool"]["generation"] = generation
    spec = out[0]["spec"]
    kept = []
    for i, d in enumerate(spec["devices"]):
        if drop & (1 << (i % 8)):
            continue
        for use in d.get("consumesCounters", []):
            for c in use["counters"].values():
                c["value"] = str(int(c["value"]) * scale // 2)
        kept.append(d)
    spec["devices"] = kept
    return out


class World:
    """The published pool, the claims held, and the ledger that reads the published views."""

    def __init__(self, raw: list[dict]) -> None:
        self.raw = raw
        self.generation = 0
        self.claims: dict[str, AllocationResult] = {}  # claim key -> allocation (ours and foreign)
        # claim key -> what /bind recorded its devices were charged (ours only: a foreign claim has none)
        self.records: dict[str, dict[DeviceID, tuple[CounterConsumption, ...]]] = {}
        # device -> the largest consumption (counter set, counter) -> amount any of its published versions
        # had while it was held (since the last restart): what the allocator must assume it takes
        self.promised: dict[DeviceID, dict[tuple[str, str], Fraction]] = {}
        self.publish(raw)
        self.ledger = self._new_ledger()

    def publish(self, raw: list[dict]) -> None:
        self.raw = raw
        self.parsed = [parse_resource_slice(s) for s in raw]
        self.views: list[SliceView] = [view(s) for s in self.parsed]
        self.devices: dict[DeviceID, DeviceView] = {d.id: d for v in self.views for d in v.devices}
        self.counter_sets = {cs.name: {k: q.value for k, q in cs.counters.items()} for s in self.parsed for cs in s.shared_counters}
        for did in list(self.promised):
            self._promise(did)
        ledger: AllocationLedger | None = getattr(self, "ledger", None)
        if ledger is not None:  # as the slice watch tells it of every version
            for did, d in self.devices.items():
                ledger.learn(did, d.consumes_counters)

    def published(self, did: DeviceID) -> tuple[CounterConsumption, ...] | None:
        d = self.devices.get(did)
        return d.consumes_counters if d is not None else None

    def _new_ledger(self) -> AllocationLedger:
        ledger = AllocationLedger(lookup=self.published)
        for key, alloc in self.claims.items():
            ledger.set_claim(key, alloc.results, self.records.get(key))
        return ledger

    def restart(self) -> None:
        """A new ledger from the claims listed again, with their records: a device a record of ours names is
        assumed to take the larger of the record and its slice; any other only what its slice says now."""
        self.ledger = self._new_ledger()
        self.promised = {did: {} for did in self.promised}
        for record in self.records.values():
            for did, consumption in record.items():
                self._promise_amounts(did, consumption)
        for did in self.promised:
            self._promise(did)

    def hold(self, key: str, alloc: AllocationResult, *, ours: bool = True) -> None:
        """As /bind: the devices reserved (each charged its record, or its slice if not held), that charge
        recorded on the claim, then the claim as the watch brings it."""
        if ours:
            record = {}
            for r in alloc.results:
                charged = (
                    self.ledger.recorded_counters(r.device_id) if self.ledger.is_allocated(r.device_id) else self.published(r.device_id)
                )
                if charged:
                    record[r.device_id] = charged
            self.records[key] = record
        self.claims[key] = alloc
        self.ledger.set_claim(key, alloc.results, self.records.get(key))
        for r in alloc.results:
            self._promise(r.device_id)

    def free(self, key: str) -> None:
        self.claims.pop(key)
        self.records.pop(key, None)
        self.ledger.set_claim(key, ())
        held = {r.device_id for a in self.claims.values() for r in a.results}
        for did in list(self.promised):
            if did not in held:
                del self.promised[did]

    def _promise(self, did: DeviceID) -> None:
        d = self.devices.get(did)
        self._promise_amounts(did, d.consumes_counters if d is not None else ())

    def _promise_amounts(self, did: DeviceID, consumption: tuple[CounterConsumption, ...]) -> None:
        seen = self.promised.setdefault(did, {})
        for use in consumption:
            for name, q in use.counters.items():
                key = (use.counter_set, name)
                seen[key] = max(seen.get(key, Fraction(0)), q.value)

    def capacity_used(self) -> dict[DeviceID, dict[str, Fraction]]:
        """What every result on a device consumes, summed (a duplicated shareID counts twice), negatives as zero."""
        per_device: dict[DeviceID, dict[str, Fraction]] = {}
        for alloc in self.claims.values():
            for r in alloc.results:
                for name, q in (r.consumed_capacity or {}).items():
                    used = per_device.setdefault(r.device_id, {})
                    used[name] = used.get(name, Fraction(0)) + max(q.value, Fraction(0))
        return per_device

    def counters_promised(self) -> dict[tuple[str, str], Fraction]:
        """(counter set, counter) -> what the held devices take of it, each device once, at its largest."""
        used: dict[tuple[str, str], Fraction] = {}
        for amounts in self.promised.values():
            for key, v in amounts.items():
                used[key] = used.get(key, Fraction(0)) + v
        return used

    def check(self, ours: AllocationResult, before: dict[tuple[str, str], Fraction]) -> None:
        """After an allocation of ours: nothing it touches over-committed by it, counting each held device at its largest.

        A republish (or a foreign claim) may over-commit a pool by itself; an
        allocation of ours never adds to it. Another share of a shared device
        already held adds nothing: its counters are charged once (upstream
        skips their check), so it may still be given in such a pool.
        `before` is `counters_promised()` before `ours` was held.
        """
        used = self.counters_promised()
        touched = {key for r in ours.results for key in self.promised.get(r.device_id, {})}
        for set_name, name in touched:
            total, was = used[(set_name, name)], before.get((set_name, name), Fraction(0))
            assert total <= self.counter_sets[set_name][name] or total <= was, (
                f"counter {set_name}/{name} over-committed: {total} (was {was})"
            )
        per_device = self.capacity_used()
        for did in {r.device_id for r in ours.results if r.consumed_capacity}:
            dev = self.devices[did]
            for name, total in per_device.get(did, {}).items():
                assert total <= dev.capacity[name].value, f"{did}: {name} over-committed: {total} of {dev.capacity[name]}"


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster())
@example(EXAMPLES[SHARE_OF_HELD]).via(SHARE_OF_HELD)
@example(EXAMPLES[FIRST_SHARE]).via(FIRST_SHARE)
@example(EXAMPLES[RAISED_THEN_LOWERED]).via(RAISED_THEN_LOWERED)
@example(EXAMPLES[LOWERED_ACROSS_A_RESTART]).via(LOWERED_ACROSS_A_RESTART)
@example(EXAMPLES[RAISED_LOWERED_RESTARTED]).via(RAISED_LOWERED_RESTARTED)
def test_counters_and_capacity_never_over_committed(data) -> None:
    raw_slices, ops = data
    world = World(raw_slices)
    allocator = Allocator(CEL)
    for i, (op, a, b) in enumerate(ops):
        if op == "free":
            if world.claims:
                world.free(sorted(world.claims)[a % len(world.claims)])
            continue
        if op == "republish":
            world.generation += 1
            world.publish(_republish(raw_slices, world.generation, a, b))
            continue
        if op == "restart":
            world.restart()
            continue
        if op == "duplicate":
            shares = [(k, r) for k, alloc in sorted(world.claims.items()) for r in alloc.results if r.share_id]
            if shares:
                _key, r = shares[a % len(shares)]
                consumed = {name: parse_quantity(str(b * GI)) for name in (r.consumed_capacity or {})}
                foreign = replace(r, consumed_capacity=consumed or None)  # the same shareID, another claim's result
                world.hold(f"foreign-{i}", AllocationResult(results=(foreign,)), ours=False)
            continue
        c = _claim(i, a, b)
        views = world.views
        out = allocator.allocate(NODE, [c], views, CLASSES, world.ledger, pool_slices=lambda d, p, views=views: views)
        if b is not None and b < 0:
            assert not out.ok, "a negative capacity request was allocated"
            continue
        if not out.ok:
            continue
        result = out.allocations[c.key]
        picked = [r.device_id for r in result.results]
        assert len(picked) == len(set(picked)) or all(r.share_id for r in result.results), "one request took a device twice"
        for r in result.results:
            dev = world.devices[r.device_id]
            assert not dev.refused, f"{r.device_id} is refused ({dev.refused}) but was allocated"
            if r.share_id:
                assert dev.allow_multiple_allocations
            else:
                assert not dev.allow_multiple_allocations
                assert not world.ledger.is_allocated(r.device_id), f"{r.device_id} allocated twice"
        before = world.counters_promised()
        world.hold(c.key, result)
        _check_ledger(world.ledger, world.devices)
        world.check(result, before)
    held = {r.device_id for alloc in world.claims.values() for r in alloc.results}
    for did in {*world.devices, *held}:
        assert world.ledger.is_allocated(did) == (did in held), f"{did}: the ledger and the claims disagree"
    for key in list(world.claims):
        world.free(key)
    assert not world.ledger.counters_held(D, "p"), "every record goes with its last holder"


def _check_ledger(ledger: AllocationLedger, devices) -> None:
    for did in devices:
        if ledger.is_allocated(did):
            assert not (ledger.is_taken(did) and ledger.shares(did)), f"{did} is held whole and in shares"


def test_shares_are_counted_once_per_device() -> None:
    """Two shares of one partition spend its counters once (upstream charges a shared device once)."""
    raw = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": D,
            "nodeName": "node-1",
            "pool": {"name": "p", "resourceSliceCount": 1},
            "devices": [{"name": "d", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "2"}}}],
        },
    }
    views = [view(parse_resource_slice(raw))]
    ledger = AllocationLedger()
    for i in range(2):
        c = claim(f"c{i}", {"name": "r", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1"}}}})
        out = Allocator(CEL).allocate(NODE, [c], views, CLASSES, ledger)
        assert out.ok, out.failure
        ledger.set_claim(c.key, out.allocations[c.key].results)
    third = claim("c2", {"name": "r", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1"}}}})
    assert not Allocator(CEL).allocate(NODE, [third], views, CLASSES, ledger).ok
    assert ledger.consumed_capacity(DeviceID(D, "p", "d"))["gpu.example.com/memory"].value == 2  # type: ignore[index]
