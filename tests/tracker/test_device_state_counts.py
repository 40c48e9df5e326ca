"""`dra_extender_devices` by state, counted from the allocations and the blocked devices, not from every view.

Each row applies steps to a state and checks the counts after every step,
both against the row's own figures and against a pass over every view (the
definition: allocated, else tainted by a taint that blocks allocation, else
free).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from allocator.cel import CelEnvironment
from allocator.tolerations import blocks_allocation
from tests.tracker.test_state import D, add_rule, claim_obj, gpu, rule, slice_obj
from tracker import events as ev
from tracker.state import ClusterState

Step = Callable[[ClusterState], None]


def _slice(name: str, pool: str, devices: list[dict], node: str = "n1") -> Step:
    return lambda s: s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, name, slice_obj(name, pool, devices, node)))


def _drop_slice(name: str) -> Step:
    return lambda s: s.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, name, {}))


def _rule(name: str, selector: dict, effect: str = "NoSchedule") -> Step:
    return lambda s: add_rule(s, rule(name, selector, effect))


def _drop_rule(name: str) -> Step:
    return lambda s: s.apply(ev.ObjectEvent("DELETED", ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, name, {"metadata": {"name": name}}))


def _claim(name: str, devices: list[str], rv: str) -> Step:
    return lambda s: s.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"default/{name}", claim_obj(name, devices, rv)))


def _drop_claim(name: str) -> Step:
    return lambda s: s.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"default/{name}", {}))


NO_SCHEDULE = [{"key": "drv", "effect": "NoSchedule"}]
NO_EXECUTE = [{"key": "drv", "effect": "NoExecute"}]
NONE_EFFECT = [{"key": "drv", "effect": "None"}]


@dataclass(frozen=True)
class Row:
    name: str
    steps: list[tuple[Step, dict[str, int]]]  # each step and the counts after it


ROWS = [
    Row("untainted devices are free", [(_slice("s1", "p1", [gpu("g0"), gpu("g1")]), {"free": 2, "allocated": 0, "tainted": 0})]),
    Row(
        "a slice's NoSchedule and NoExecute taints count, a None one does not",
        [
            (
                _slice("s1", "p1", [gpu("g0", taints=NO_SCHEDULE), gpu("g1", taints=NO_EXECUTE), gpu("g2", taints=NONE_EFFECT)]),
                {"free": 1, "allocated": 0, "tainted": 2},
            )
        ],
    ),
    Row(
        "a rule taints, its removal untaints",
        [
            (_slice("s1", "p1", [gpu("g0"), gpu("g1")]), {"free": 2, "allocated": 0, "tainted": 0}),
            (_rule("r", {"driver": D, "pool": "p1", "device": "g1"}), {"free": 1, "allocated": 0, "tainted": 1}),
            (_drop_rule("r"), {"free": 2, "allocated": 0, "tainted": 0}),
        ],
    ),
    Row(
        "a rule with effect None does not count",
        [
            (_slice("s1", "p1", [gpu("g0")]), {"free": 1, "allocated": 0, "tainted": 0}),
            (_rule("r", {"driver": D}, "None"), {"free": 1, "allocated": 0, "tainted": 0}),
        ],
    ),
    Row(
        "an allocated tainted device counts as allocated, and as tainted once freed",
        [
            (_slice("s1", "p1", [gpu("g0"), gpu("g1")]), {"free": 2, "allocated": 0, "tainted": 0}),
            (_claim("c", ["g0"], "10"), {"free": 1, "allocated": 1, "tainted": 0}),
            (_rule("r", {"driver": D}), {"free": 0, "allocated": 1, "tainted": 1}),
            (_drop_claim("c"), {"free": 0, "allocated": 0, "tainted": 2}),
        ],
    ),
    Row(
        "an allocation of a device not published is not counted",
        [
            (_slice("s1", "p1", [gpu("g0")]), {"free": 1, "allocated": 0, "tainted": 0}),
            (_claim("c", ["g9"], "10"), {"free": 1, "allocated": 0, "tainted": 0}),
        ],
    ),
    Row(
        "a slice's devices go with it, tainted and allocated ones too",
        [
            (_slice("s1", "p1", [gpu("g0", taints=NO_SCHEDULE), gpu("g1"), gpu("g2")]), {"free": 2, "allocated": 0, "tainted": 1}),
            (_claim("c", ["g1"], "10"), {"free": 1, "allocated": 1, "tainted": 1}),
            (_drop_slice("s1"), {"free": 0, "allocated": 0, "tainted": 0}),
        ],
    ),
    Row(
        "a slice republished without its taint",
        [
            (_slice("s1", "p1", [gpu("g0", taints=NO_SCHEDULE)]), {"free": 0, "allocated": 0, "tainted": 1}),
            (_slice("s1", "p1", [gpu("g0")]), {"free": 1, "allocated": 0, "tainted": 0}),
        ],
    ),
]


def _by_every_view(state: ClusterState) -> dict[str, int]:
    counts = {"free": 0, "allocated": 0, "tainted": 0}
    for did, view in state.devices.items():
        if did in state.allocated_state.allocated:
            counts["allocated"] += 1
        elif any(blocks_allocation(t) for t in view.taints):
            counts["tainted"] += 1
        else:
            counts["free"] += 1
    return counts


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_device_state_counts(row: Row) -> None:
    state = ClusterState(CelEnvironment())
    for i, (step, expected) in enumerate(row.steps):
        step(state)
        counts = state.queries.device_state_counts()
        assert counts == expected, (row.name, i, counts)
        assert counts == _by_every_view(state), (row.name, i)
