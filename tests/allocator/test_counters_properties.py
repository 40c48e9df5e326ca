"""Property: over random allocations and deallocations on pools with shared counters and
shared devices, no counter and no capacity is ever over-committed, and every result
follows upstream's rules (a device whole or in shares, never both; a share never above
what the device's policy allows).

The allocated state is the tracker's own ledger (tracker.ledger), fed with the results
as the claim watch would feed it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.parse import parse_resource_slice
from allocator.types import DeviceID, Node
from tests.allocator.builders import claim, device_class, view
from tests.tiers import examples
from tracker.ledger import AllocationLedger

D = "gpu.example.com"
NODE = Node("node-1")
CEL = CelEnvironment()
CLASSES = {"gpu": device_class("gpu", f'device.driver == "{D}"')}
GI = 1024**3


@st.composite
def cluster(draw):
    """One pool: a counter set per GPU, partitions of it (some shared), and plain shared devices."""
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
    slices = [
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
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("alloc"), st.integers(1, 2), st.sampled_from([None, 5, 10, 15, 20, 30])),
                st.tuples(st.just("free"), st.integers(0, 50), st.none()),
            ),
            min_size=1,
            max_size=12,
        )
    )
    return slices, ops


def _claim(i: int, count: int, memory: int | None):
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": str(memory * GI)}}
    return claim(f"c{i}", {"name": "r", "exactly": exactly})


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster())
def test_counters_and_capacity_never_over_committed(data) -> None:
    raw_slices, ops = data
    parsed = [parse_resource_slice(s) for s in raw_slices]
    views = [view(s) for s in parsed]
    devices = {d.id: d for v in views for d in v.devices}
    counter_sets = {cs.name: {k: q.value for k, q in cs.counters.items()} for s in parsed for cs in s.shared_counters}
    ledger = AllocationLedger()
    live: dict[str, Any] = {}  # claim key -> allocation
    allocator = Allocator(CEL)
    for i, (op, a, b) in enumerate(ops):
        if op == "free":
            if live:
                key = sorted(live)[a % len(live)]
                for r in live.pop(key).results:
                    if r.share_id:
                        ledger.free_share(r.device_id, r.share_id, key)
                    else:
                        ledger.free(r.device_id, key)
            continue
        c = _claim(i, a, b)
        out = allocator.allocate(NODE, [c], views, CLASSES, ledger, pool_slices=lambda d, p: views)
        if not out.ok:
            continue
        result = out.allocations[c.key]
        picked = [r.device_id for r in result.results]
        assert len(picked) == len(set(picked)) or all(r.share_id for r in result.results), "one request took a device twice"
        for r in result.results:
            dev = devices[r.device_id]
            if r.share_id:
                assert dev.allow_multiple_allocations
                ledger.allocate_share(r.device_id, r.share_id, c.key, r.consumed_capacity)
            else:
                assert not dev.allow_multiple_allocations
                assert not ledger.is_allocated(r.device_id), f"{r.device_id} allocated twice"
                ledger.allocate(r.device_id, c.key)
        live[c.key] = result
        _check(ledger, devices, counter_sets)


def _check(ledger: AllocationLedger, devices, counter_sets) -> None:
    used: dict[tuple[str, str], Fraction] = {}
    for did, dev in devices.items():
        if not ledger.is_allocated(did):
            continue
        assert not (ledger.is_taken(did) and ledger.shares(did)), f"{did} is held whole and in shares"
        for use in dev.consumes_counters:
            for name, q in use.counters.items():
                used[(use.counter_set, name)] = used.get((use.counter_set, name), Fraction(0)) + q.value
        consumed = ledger.consumed_capacity(did) or {}
        for name, q in consumed.items():
            assert q.value <= dev.capacity[name].value, f"{did}: {name} over-committed: {q} of {dev.capacity[name]}"
    for (set_name, name), total in used.items():
        assert total <= counter_sets[set_name][name], f"counter {set_name}/{name} over-committed: {total}"


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
        r = out.allocations[c.key].results[0]
        ledger.allocate_share(r.device_id, r.share_id, c.key, r.consumed_capacity)  # type: ignore[arg-type]
    third = claim("c2", {"name": "r", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1"}}}})
    assert not Allocator(CEL).allocate(NODE, [third], views, CLASSES, ledger).ok
    assert ledger.consumed_capacity(DeviceID(D, "p", "d"))["gpu.example.com/memory"].value == 2  # type: ignore[index]
