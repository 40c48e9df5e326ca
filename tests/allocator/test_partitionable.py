"""Partitionable devices and consumable capacity: one row per upstream allocator case, run through
every path of the allocator (tests/allocator/paths.py).

Each row names the case of upstream's shared allocator test suite
(`dynamic-resource-allocation/structured/internal/allocatortesting`) whose
objects and outcome it mirrors; rows without one pin a quirk or an edge of
ours. Results are compared as (request, device, consumed capacity, shared).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.device_view import SliceView
from allocator.features import Features
from allocator.parse import parse_resource_slice
from allocator.quantity import Quantity, parse_quantity
from allocator.types import DeviceID, Node, NodeSelector
from tests.allocator.builders import claim, device_class, exactly, first_available, req, view
from tests.allocator.paths import PATHS, SPREAD_ORDER, allocator_for

D = "driver-a"
NODE1 = Node("node-1", {"region": "region-1"})
NODE2 = Node("node-2", {"region": "region-2"})
CLASSES = {"class-a": device_class("class-a", f'device.driver == "{D}"')}
GE = 'device.capacity["driver-a"].memory.compareTo(quantity("{}")) >= 0'
RANGE_POLICY = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}


def device(
    name: str, *, memory: str | None = None, consumes: dict[str, str] | None = None, counter_set: str = "counter-set-1", **extra: Any
) -> dict:
    d: dict[str, Any] = {"name": name, **extra}
    if memory is not None:  # upstream's "fromCounters": the device's capacity is what it consumes
        d.setdefault("capacity", {})["memory"] = {"value": memory}
    if consumes is not None:
        d["consumesCounters"] = [{"counterSet": counter_set, "counters": {k: {"value": v} for k, v in consumes.items()}}]
    return d


def shared(name: str, capacity: dict[str, dict] | None = None, **extra: Any) -> dict:
    d = {"name": name, "allowMultipleAllocations": True, **extra}
    if capacity:
        d["capacity"] = capacity
    return d


def rng(value: str) -> dict:
    """upstream withCapacityRequestPolicyRange: default 2, min 2, step 2, max 4."""
    return {"value": value, "requestPolicy": RANGE_POLICY}


def slice_raw(
    name: str, *, node: str | None = "node-1", pool: str = "pool-1", count: int = 1, devices=None, counters=None, per_device: bool = False
) -> dict:
    spec: dict[str, Any] = {"driver": D, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}
    if per_device:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = node
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = [{"name": n, "counters": {k: {"value": v} for k, v in c.items()}} for n, c in counters.items()]
    return {"metadata": {"name": name}, "spec": spec}


def cap_req(name: str, amount: str, cls: str = "class-a", **kw: Any) -> dict:
    r = req(name, cls, **kw)
    r["exactly"]["capacity"] = {"requests": {"capacity-0": amount}}
    return r


class State:
    """Allocated state as the tracker's ledger answers it."""

    def __init__(self, dedicated=(), shares: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.dedicated = {DeviceID(D, "pool-1", d) for d in dedicated}
        self.shares = {DeviceID(D, "pool-1", d): {f"{D}/{k}": parse_quantity(v) for k, v in c.items()} for d, c in (shares or {}).items()}

    def is_taken(self, did: DeviceID) -> bool:
        return did in self.dedicated

    def is_allocated(self, did: DeviceID) -> bool:
        return did in self.dedicated or did in self.shares

    def consumed_capacity(self, did: DeviceID) -> Mapping[str, Quantity] | None:
        return self.shares.get(did) or None

    def counters_held(self, driver: str, pool: str) -> Mapping[DeviceID, None]:
        return {}  # nothing recorded: the current slices say what allocated devices consume


@dataclass
class Case:
    name: str
    upstream: str  # the upstream test case mirrored ("" for ours)
    slices: list[dict]
    claims: list[Any]
    want: list[list[tuple]] | None  # per claim: (request, device[, consumed capacity {name: value}]); None: no fit
    spread: list[list[tuple]] | None = None  # the picks under spread, where its order differs from `want`
    state: State = field(default_factory=State)
    features: Features = field(default_factory=Features)
    node: Node = NODE1
    fail: str = ""  # a substring of the failure message
    selector: str = ""  # "local": matchFields metadata.name In [node]


def c(name: str, *requests: dict, constraints=None) -> Any:
    return claim(name, *requests, constraints=constraints)


MEM_DEVICES = [
    device("device-1", memory="4Gi", consumes={"memory": "4Gi"}),
    device("device-2", memory="6Gi", consumes={"memory": "6Gi"}),
    device("device-3", memory="4Gi", consumes={"memory": "4Gi"}),
]
SUBS = first_available(
    "req-1", ("subReq-0", exactly("class-a", selectors=[GE.format("6Gi")])), ("subReq-1", exactly("class-a", selectors=[GE.format("4Gi")]))
)

CASES = [
    Case(
        "single-device",
        "partitionable-devices-single-device",
        [
            slice_raw("slice-1", count=2, devices=[device("device-1", consumes={"memory": "4Gi"})]),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "8Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        [[("req-0", "device-1")]],
        selector="local",
    ),
    Case(
        "multiple-devices",
        "partitionable-devices-multiple-devices",
        [slice_raw("slice-1", count=2, devices=MEM_DEVICES), slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "8Gi"}})],
        [c("claim-0", req("req-0", "class-a"), req("req-1", "class-a"))],
        [[("req-0", "device-1"), ("req-1", "device-3")]],
    ),
    Case(
        "prioritized-list",
        "partitionable-devices-prioritized-list",
        [slice_raw("slice-1", count=2, devices=MEM_DEVICES), slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "8Gi"}})],
        [c("claim-0", req("req-0", "class-a"), SUBS)],
        [[("req-0", "device-1"), ("req-1/subReq-1", "device-3")]],
    ),
    Case(
        "multiple-counters",
        "partitionable-devices-multiple-counters",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[
                    device("device-1", consumes={"memory": "4Gi", "cores": "8"}),
                    device("device-2", consumes={"memory": "2Gi", "cores": "8"}),
                    device("device-3", consumes={"memory": "2Gi", "cores": "4"}),
                ],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "8Gi", "cores": "12"}}),
        ],
        [c("claim-0", req("req-0", "class-a"), req("req-1", "class-a"))],
        [[("req-0", "device-1"), ("req-1", "device-3")]],
    ),
    Case(
        "no-counters-available",
        "partitionable-devices-no-capacity-available",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[device("device-1", consumes={"memory": "4Gi"}), device("device-2", consumes={"memory": "16Gi"})],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        state=State(dedicated=["device-2"]),
        fail="short of shared counters",
    ),
    Case(
        "over-committed-pool-blocks-everything",
        "partitionable-devices-overallocated-capacity-pool",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[device("device-1", consumes={"memory": "4Gi"}), device("device-2", consumes={"memory": "20Gi"})],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        state=State(dedicated=["device-2"]),
        fail="over-committed",
    ),
    Case(
        "gate-off-device-consuming-counters",
        "partitionable-devices-disabled-device-consumes-counters",
        [
            slice_raw("slice-1", count=2, devices=[device("device-1", consumes={"memory": "4Gi"})]),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        features=Features(partitionable_devices=False),
    ),
    Case(
        "gate-off-other-device",
        "partitionable-devices-disabled-other-device-do-not-consume-counters",
        [
            slice_raw("slice-1", count=2, devices=[device("device-1", consumes={"memory": "4Gi"}), device("device-2")]),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        [[("req-0", "device-2")]],
        features=Features(partitionable_devices=False),
    ),
    Case(
        "gate-off-per-device-node-selection",
        "partitionable-devices-disabled-per-device-node-selection",
        [slice_raw("slice-1", per_device=True, devices=[device("device-2", nodeName="node-1")])],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        features=Features(partitionable_devices=False),
    ),
    Case(
        "per-device-node-name",
        "partitionable-devices-per-device-node-selection-nodename",
        [
            slice_raw(
                "slice-1",
                per_device=True,
                count=2,
                devices=[
                    device("device-1", memory="4Gi", consumes={"memory": "4Gi"}, nodeName="node-1"),
                    device("device-2", memory="6Gi", consumes={"memory": "6Gi"}, nodeName="node-2"),
                ],
            ),
            slice_raw("slice-2", per_device=True, count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [
            c(
                "claim-0",
                first_available(
                    "req-0",
                    ("subReq-0", exactly("class-a", selectors=[GE.format("6Gi")])),
                    ("subReq-1", exactly("class-a", selectors=[GE.format("4Gi")])),
                ),
            )
        ],
        [[("req-0/subReq-1", "device-1")]],
        selector="local",
    ),
    Case(
        "per-device-node-selector",
        "partitionable-devices-per-device-node-selection-node-selector",
        [
            slice_raw(
                "slice-1",
                per_device=True,
                count=2,
                devices=[
                    device(
                        "device-1",
                        memory="4Gi",
                        consumes={"memory": "4Gi"},
                        nodeSelector={
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["region-1"]}]}]
                        },
                    )
                ],
            ),
            slice_raw("slice-2", per_device=True, count=2, counters={"counter-set-1": {"memory": "18Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        [[("req-0", "device-1")]],
        selector="region",
    ),
    Case(
        "same-counter-set-name-in-two-slices",
        "partitionable-devices-same-counter-set-name-in-different-resource-slices",
        [
            slice_raw("slice-1", count=4, devices=[device("device-1")]),
            slice_raw("slice-2", count=4, counters={"counter-set-1": {"memory": "1"}}),
            slice_raw("slice-3", count=4, devices=[device("device-2")]),
            slice_raw("slice-4", count=4, counters={"counter-set-1": {"memory": "1"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        fail="invalid resource pools were encountered",
    ),
    Case(
        "unknown-counter-set",
        "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
        [
            slice_raw("slice-1", count=2, devices=[device("device-1", consumes={"memory": "1"}, counter_set="counter-set-2")]),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "1"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        fail="invalid resource pools were encountered (driver-a/pool-1: counter set counter-set-2 not found)",
    ),
    Case(
        "unknown-counter-in-set",
        "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set",
        [
            slice_raw("slice-1", count=2, devices=[device("device-1", consumes={"memory": "8Gi"})]),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"other-memory": "8Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        fail="counter memory not found in counter set counter-set-1",
    ),
    Case(
        "devices-on-different-nodes-share-counters",
        "partitionable-devices-devices-on-different-nodes-consume-same-counter-set",
        [
            slice_raw("slice-1", count=3, counters={"counter-set-1": {"memory": "8Gi"}}),
            slice_raw(
                "slice-2",
                count=3,
                devices=[
                    device("device-1", memory="6Gi", consumes={"memory": "6Gi"}),
                    device("device-2", memory="2Gi", consumes={"memory": "2Gi"}),
                ],
            ),
            slice_raw("slice-3", node="node-2", count=3, devices=[device("device-3", consumes={"memory": "6Gi"})]),
        ],
        [
            c(
                "claim-0",
                first_available(
                    "req-0",
                    ("subReq-0", exactly("class-a", selectors=[GE.format("6Gi")])),
                    ("subReq-1", exactly("class-a", selectors=[GE.format("2Gi")])),
                ),
            )
        ],
        [[("req-0/subReq-1", "device-2")]],
        state=State(dedicated=["device-3"]),
    ),
    Case(
        # Ours: upstream charges counters before it checks taints and never gives them back
        # in that call, so a tainted 40Gi device ahead of a free half leaves the half no counters.
        "tainted-device-charges-counters-first",
        "",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[
                    device("full", consumes={"memory": "40Gi"}, taints=[{"key": "k", "effect": "NoSchedule"}]),
                    device("half", consumes={"memory": "20Gi"}),
                ],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "40Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
    ),
    Case(
        # docs/design.md#partitionable-devices-and-consumable-capacity: `full` allocated, a half must not be promised.
        "full-taken-halves-refused",
        "",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[
                    device("full", consumes={"memory": "40Gi"}),
                    device("half-a", consumes={"memory": "20Gi"}),
                    device("half-b", consumes={"memory": "20Gi"}),
                ],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "40Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"))],
        None,
        state=State(dedicated=["full"]),
        fail="counter-set-1/memory: 0 left, 20Gi needed",
    ),
    # ----------------------------------------------------------------- consumable capacity
    Case(
        "capacity-gate-off",
        "consumable-capacity-disabled-feature",
        [slice_raw("slice-1", devices=[device("device-1")])],
        [c("claim-0", cap_req("req-0", "1"))],
        None,
        features=Features(consumable_capacity=False),
        fail="claim default/claim-0, request req-0: has capacity requests, but the DRAConsumableCapacity feature is disabled",
    ),
    Case(
        "capacity-gate-off-subrequest",
        "consumable-capacity-disabled-feature-with-prioritized-list",
        [slice_raw("slice-1", devices=[device("device-1")])],
        [
            c(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {"name": "subReq-0", "deviceClassName": "class-a", "capacity": {"requests": {"capacity-0": "1"}}},
                        {"name": "subReq-1", "deviceClassName": "class-a", "capacity": {"requests": {"capacity-0": "1"}}},
                    ],
                },
            )
        ],
        None,
        features=Features(consumable_capacity=False),
        fail="claim default/claim-0, subrequest subReq-0: has capacity requests, but the DRAConsumableCapacity feature is disabled",
    ),
    Case(
        "missing-capacity",
        "consumable-capacity-multi-allocatable-device-with-missing-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-1": {"value": "1"}})])],
        [c("claim-0", cap_req("req-0", "1"))],
        None,
    ),
    Case(
        "two-claims-share-a-device-without-capacity",
        "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1")])],
        [c("claim-0", req("req-0", "class-a")), c("claim-1", req("req-0", "class-a"))],
        [[("req-0", "device-1", None)], [("req-0", "device-1", None)]],
    ),
    Case(
        "no-policy-no-request-takes-all",
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request",
        [
            slice_raw(
                "slice-1", devices=[shared("device-1", {"capacity-0": {"value": "1"}}), shared("device-2", {"capacity-0": {"value": "1"}})]
            )
        ],
        [c("claim-0", req("req-0", "class-a")), c("claim-1", req("req-0", "class-a"))],
        [[("req-0", "device-1", {"capacity-0": "1"})], [("req-0", "device-2", {"capacity-0": "1"})]],
    ),
    Case(
        "no-policy-no-request-blocks",
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": {"value": "2"}})])],
        [c("claim-0", req("req-0", "class-a")), c("claim-1", req("req-0", "class-a"))],
        None,
    ),
    Case(
        "no-policy-with-requests",
        "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": {"value": "2"}})])],
        [c("claim-0", cap_req("req-0", "1")), c("claim-1", cap_req("req-0", "1"))],
        [[("req-0", "device-1", {"capacity-0": "1"})], [("req-0", "device-1", {"capacity-0": "1"})]],
    ),
    Case(
        "policy-default-without-request",
        "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("4")})])],
        [c("claim-0", req("req-0", "class-a")), c("claim-1", req("req-0", "class-a"))],
        [[("req-0", "device-1", {"capacity-0": "2"})], [("req-0", "device-1", {"capacity-0": "2"})]],
    ),
    Case(
        "zero-request-policy",
        "consumable-capacity-multi-allocatable-device-with-zero-request-policy",
        [
            slice_raw(
                "slice-1",
                devices=[shared("device-1", {"capacity-0": {"value": "1", "requestPolicy": {"default": "0", "validValues": ["0"]}}})],
            )
        ],
        [c("claim-0", req("req-0", "class-a")), c("claim-1", req("req-0", "class-a"))],
        [[("req-0", "device-1", {"capacity-0": "0"})], [("req-0", "device-1", {"capacity-0": "0"})]],
    ),
    Case(
        "violates-zero-request-policy",
        "consumable-capacity-multi-allocatable-device-violates-zero-request-policy",
        [
            slice_raw(
                "slice-1",
                devices=[shared("device-1", {"capacity-0": {"value": "1", "requestPolicy": {"default": "0", "validValues": ["0"]}}})],
            )
        ],
        [c("claim-0", cap_req("req-0", "1"))],
        None,
    ),
    Case(
        "range-rounds-up-to-min",
        "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("4")})])],
        [c("claim-0", cap_req("req-0", "1")), c("claim-1", cap_req("req-0", "1"))],
        [[("req-0", "device-1", {"capacity-0": "2"})], [("req-0", "device-1", {"capacity-0": "2"})]],
    ),
    Case(
        "range-rounds-up-by-step",
        "consumable-capacity-multi-allocatable-device-with-range-policy-step",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("4")})])],
        [c("claim-0", cap_req("req-0", "3"))],
        [[("req-0", "device-1", {"capacity-0": "4"})]],
    ),
    Case(
        "valid-values",
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy",
        [
            slice_raw(
                "slice-1",
                devices=[shared("device-1", {"capacity-0": {"value": "4", "requestPolicy": {"default": "1", "validValues": ["1", "2"]}}})],
            )
        ],
        [c("claim-0", cap_req("req-0", "2"))],
        [[("req-0", "device-1", {"capacity-0": "2"})]],
    ),
    Case(
        "valid-values-round-up",
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up",
        [
            slice_raw(
                "slice-1",
                devices=[shared("device-1", {"capacity-0": {"value": "3", "requestPolicy": {"default": "1", "validValues": ["1", "3"]}}})],
            )
        ],
        [c("claim-0", cap_req("req-0", "2"))],
        [[("req-0", "device-1", {"capacity-0": "3"})]],
    ),
    Case(
        "exceeded-capacity",
        "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("2")})])],
        [c("claim-0", cap_req("req-0", "1")), c("claim-1", cap_req("req-0", "2"))],
        None,
    ),
    Case(
        "request-over-policy-max",
        "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("10")})])],
        [c("claim-0", cap_req("req-0", "6"))],
        None,
    ),
    Case(
        "allocated-capacity-use-remaining",
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("4")})])],
        [c("claim-0", cap_req("req-0", "2"))],
        [[("req-0", "device-1", {"capacity-0": "2"})]],
        state=State(shares={"device-1": {"capacity-0": "2"}}),
    ),
    Case(
        "allocated-capacity-next-device",
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("2")}), shared("device-2", {"capacity-0": rng("2")})])],
        [c("claim-0", cap_req("req-0", "2"))],
        [[("req-0", "device-2", {"capacity-0": "2"})]],
        state=State(shares={"device-1": {"capacity-0": "2"}}),
        fail="",
    ),
    Case(
        "backtrack-over-shares",
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        [
            slice_raw(
                "slice-1",
                devices=[
                    shared("device-2", {"capacity-0": rng("2")}, attributes={"stringAttribute": {"string": "v1"}}),
                    shared("device-1", {"capacity-0": rng("4")}, attributes={"stringAttribute": {"string": "v2"}}),
                ],
            )
        ],
        [
            c("claim-0", cap_req("req-0", "2"), cap_req("req-1", "2"), constraints=[{"matchAttribute": f"{D}/stringAttribute"}]),
            c("claim-1", cap_req("req-0", "2")),
        ],
        [
            [("req-0", "device-1", {"capacity-0": "2"}), ("req-1", "device-1", {"capacity-0": "2"})],
            [("req-0", "device-2", {"capacity-0": "2"})],
        ],
    ),
    Case(
        "shares-with-partitionable-device",
        "allow-multiple-allocations-with-partitionable-device",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[
                    device("device-1", memory="4Gi", consumes={"memory": "4Gi"}, allowMultipleAllocations=True),
                    device("device-2", memory="6Gi", consumes={"memory": "6Gi"}, allowMultipleAllocations=True),
                    device("device-3", memory="4Gi", consumes={"memory": "4Gi"}, allowMultipleAllocations=True),
                ],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"memory": "8Gi"}}),
        ],
        [c("claim-0", req("req-0", "class-a"), SUBS)],
        [[("req-0", "device-1", {"memory": "4Gi"}), ("req-1/subReq-1", "device-3", {"memory": "4Gi"})]],
    ),
    Case(
        "shared-device-counters-cross-cycle",
        "allow-multiple-allocations-with-shared-device-counter-cross-cycle",
        [
            slice_raw(
                "slice-1",
                count=2,
                devices=[
                    device(
                        "device-1",
                        consumes={"capacity-0": "1"},
                        allowMultipleAllocations=True,
                        attributes={"mode": {"string": "a"}},
                        capacity={"capacity-0": {"value": "1"}},
                    ),
                    device(
                        "device-2",
                        consumes={"capacity-0": "1"},
                        allowMultipleAllocations=True,
                        attributes={"mode": {"string": "b"}},
                        capacity={"capacity-0": {"value": "1"}},
                    ),
                ],
            ),
            slice_raw("slice-2", count=2, counters={"counter-set-1": {"capacity-0": "1"}}),
        ],
        [c("claim-0", cap_req("req-0", "1", selectors=['device.attributes["driver-a"].mode == "b"']))],
        None,
        state=State(shares={"device-1": {"capacity-0": "1"}}),
    ),
    Case(
        "distinct-forces-different-shares",
        "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
        [slice_raw("slice-1", devices=[shared("device-1", {"capacity-0": rng("2")}, attributes={"stringAttribute": {"string": "v"}})])],
        [c("claim-0", cap_req("req-0", "1"), cap_req("req-1", "1"), constraints=[{"distinctAttribute": f"{D}/stringAttribute"}])],
        None,
    ),
    Case(
        # docs/design.md#partitionable-devices-and-consumable-capacity: three 20Gi shares of a 40Gi device, two fit.
        "two-of-three-shares-fit",
        "",
        [slice_raw("slice-1", devices=[shared("gpu", {"memory": {"value": "40Gi"}})])],
        [c("claim-0", cap_req("r", "20Gi") | {}), c("claim-1", cap_req("r", "20Gi")), c("claim-2", cap_req("r", "20Gi"))],
        None,
    ),
]


def _fix_capacity_names(case: Case) -> None:
    """cap_req asks for `capacity-0`; the two-of-three-shares case asks for `memory`."""
    if case.name == "two-of-three-shares-fit":
        case.claims = [
            c(f"claim-{i}", {"name": "r", "exactly": {"deviceClassName": "class-a", "capacity": {"requests": {"memory": "20Gi"}}}})
            for i in range(3)
        ]


for _case in CASES:
    _fix_capacity_names(_case)


def _pool_slices(views: list[SliceView]):
    return lambda driver, pool: [v for v in views if v.driver == driver and v.pool == pool]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_partitionable_and_consumable(case: Case, path: str) -> None:
    views = [view(parse_resource_slice(s)) for s in case.slices]
    allocator = allocator_for(path, CelEnvironment(), case.features)
    out = allocator.allocate(case.node, case.claims, views, CLASSES, case.state, pool_slices=_pool_slices(views))
    wants = case.spread if path == SPREAD_ORDER and case.spread is not None else case.want
    if wants is None:
        assert not out.ok, f"expected no fit, got {out.allocations}"
        if case.fail:
            assert case.fail in out.failure.message, out.failure.message  # type: ignore[union-attr]
        return
    assert out.ok, out.failure
    for claim_obj, want in zip(case.claims, wants, strict=True):
        result = out.allocations[claim_obj.key]
        got = []
        for r in result.results:
            if len(want[0]) == 2:
                got.append((r.request, r.device))
            else:
                consumed = None if r.consumed_capacity is None else {k.rpartition("/")[2]: str(v) for k, v in r.consumed_capacity.items()}
                got.append((r.request, r.device, consumed))
                assert r.share_id is not None and len(r.share_id) == 36, "a shared device's result carries a UUID shareID"
        want_norm = [
            w if len(w) == 2 else (w[0], w[1], None if w[2] is None else {k: str(parse_quantity(v)) for k, v in w[2].items()}) for w in want
        ]
        got_norm = [
            g if len(g) == 2 else (g[0], g[1], None if g[2] is None else {k: str(parse_quantity(v)) for k, v in g[2].items()}) for g in got
        ]
        assert got_norm == want_norm
        if case.selector == "local":
            assert result.node_selector is not None
            assert result.node_selector.to_api() == {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [case.node.name]}]}]
            }
        elif case.selector == "region":
            assert isinstance(result.node_selector, NodeSelector)
            assert result.node_selector.to_api() == {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["region-1"]}]}]
            }
    shares = [r.share_id for a in out.allocations.values() for r in a.results if r.share_id]
    assert len(shares) == len(set(shares)), "every share has its own shareID"
