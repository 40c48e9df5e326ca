"""What an allocation's devices consume of their pools' counters, as recorded on the claim at /bind.

The ledger's records of held devices (tracker/ledger.py) otherwise live only
in memory: a driver that lowers a held device's `consumesCounters` while no
extender runs would, after the restart, free counters a promise still holds.
So /bind writes the figures it charged into the claim's annotation
`resource.dra-extender.io/allocated-counters` (in the metadata write that
adds the delete-protection finalizer, before the allocation itself), and the
next process reads them back. The record names the allocation it belongs to
by its `allocationTimestamp`: a record left by a bind that was undone, or
under an allocation someone else wrote later, is not this allocation's and
is ignored (docs/design.md, "Counters and shares as allocated").

Format (JSON): `{"allocationTimestamp": "...", "devices": [{"driver", "pool",
"device", "consumesCounters": [<as in a ResourceSlice>]}]}`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from allocator.parse.reader import ValidationError, _Reader
from allocator.parse.slices import _parse_consumptions
from allocator.types import CounterConsumption, DeviceID, ResourceClaim

COUNTERS_ANNOTATION: Final = "resource.dra-extender.io/allocated-counters"

Consumption = tuple[CounterConsumption, ...]


@dataclass(frozen=True, slots=True)
class CounterRecord:
    """A claim's record, read fail-closed.

    `devices`: what each recorded device consumed when allocated (a device
    the record does not name, or names malformed, is absent). `problem`: why
    the annotation (or part of it) could not be used, "" when it could.
    """

    devices: Mapping[DeviceID, Consumption] = field(default_factory=dict)
    problem: str = ""


def format_counter_record(allocation_timestamp: str, devices: Mapping[DeviceID, Consumption]) -> str:
    """The annotation's value for an allocation whose counter-consuming devices consume `devices`."""
    return json.dumps(
        {
            "allocationTimestamp": allocation_timestamp,
            "devices": [
                {
                    "driver": did.driver,
                    "pool": did.pool,
                    "device": did.device,
                    "consumesCounters": [
                        {"counterSet": use.counter_set, "counters": {name: {"value": str(q)} for name, q in sorted(use.counters.items())}}
                        for use in consumption
                    ],
                }
                for did, consumption in sorted(devices.items(), key=lambda kv: str(kv[0]))
            ],
        },
        separators=(",", ":"),
    )


def counter_record(claim: ResourceClaim) -> CounterRecord | None:
    """The record of the claim's current allocation; None when it has none (allocated before records, by
    another allocator, or the annotation belongs to another allocation).

    A malformed annotation, or a malformed device entry, counts as no record
    for what it cannot say, with `problem` set: the ledger then charges what
    the slice says, as for a claim without a record, and warns.
    """
    raw = claim.meta.annotations.get(COUNTERS_ANNOTATION)
    if raw is None or claim.allocation is None:
        return None
    path = f"metadata.annotations[{COUNTERS_ANNOTATION}]"
    r = _Reader(f"ResourceClaim {claim.key}")
    try:
        body = r.mapping(_json(r, raw, path), path, required=True)
        timestamp = r.string(body.get("allocationTimestamp"), f"{path}.allocationTimestamp")
        entries = r.seq(body.get("devices"), f"{path}.devices", required=True)
    except ValidationError as err:
        return CounterRecord(problem=str(err))
    if timestamp != claim.allocation.allocation_timestamp:
        return None  # another allocation's record: this one has none
    held = {result.device_id for result in claim.allocation.results}
    devices: dict[DeviceID, Consumption] = {}
    problems: list[str] = []
    for i, entry in enumerate(entries):
        ep = f"{path}.devices[{i}]"
        try:
            m = r.mapping(entry, ep, required=True)
            did = DeviceID(
                r.string(m.get("driver"), f"{ep}.driver", required=True),
                r.string(m.get("pool"), f"{ep}.pool", required=True),
                r.string(m.get("device"), f"{ep}.device", required=True),
            )
            consumption = _parse_consumptions(r, m.get("consumesCounters"), f"{ep}.consumesCounters")
        except ValidationError as err:
            problems.append(str(err))
            continue
        if did in held:
            devices[did] = consumption
    return CounterRecord(devices, "; ".join(problems))


def _json(r: _Reader, raw: str, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise r.fail(path, f"not valid JSON: {e}") from None
