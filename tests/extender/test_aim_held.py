"""Which devices of a pod aimed at a node count as held when later pods are scored there (docs/scoring.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from allocator.device_view import DeviceView
from allocator.types import DeviceID, DeviceRequest, ExactRequest, ObjectMeta, ResourceClaim
from extender.prioritize.scores import Aim


def _device(name: str, *, shared: bool = False) -> DeviceView:
    return DeviceView(DeviceID("gpu.example.com", "pool", name), cel_key=name, allow_multiple_allocations=shared)


def _claim(*, admin: bool = False, first_available: bool = False) -> ResourceClaim:
    exact = ExactRequest("r", "gpu", admin_access=admin)
    request = DeviceRequest("r", first_available=(exact,)) if first_available else DeviceRequest("r", exactly=exact)
    return ResourceClaim(ObjectMeta("c", "default"), requests=(request,))


@dataclass(frozen=True)
class Row:
    name: str
    claims: tuple[ResourceClaim, ...]
    devices: tuple[DeviceView, ...]
    held: list[str]


ROWS = [
    Row("devices taken whole are held", (_claim(),), (_device("gpu-0"), _device("gpu-1")), ["gpu-0", "gpu-1"]),
    Row("a device that allows several allocations is not", (_claim(),), (_device("gpu-0"), _device("nic", shared=True)), ["gpu-0"]),
    Row("nothing when a claim asks for admin access", (_claim(), _claim(admin=True)), (_device("gpu-0"),), []),
    Row("admin access in a firstAvailable subrequest too", (_claim(admin=True, first_available=True),), (_device("gpu-0"),), []),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_what_an_aim_holds(row: Row) -> None:
    aim = Aim("n0", row.claims, row.devices, 0.0)
    assert [d.name for d in aim.held] == row.held
