"""/debug/devices and `kubectl dra devices` show one row per device (tracker/device_rows.py): same holder, same attributes."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.cel import CelEnvironment
from allocator.types import AllocationResult, DeviceID, DeviceRequestAllocationResult
from extender.debug_views import device_page
from kubectl_dra.views import device_rows
from tracker import events as ev
from tracker.state import ClusterState

D = "gpu.example.com"


def _device(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "model": {"string": "a100"},
            "cores": {"int": 108},
            "ecc": {"bool": True},
            "driverVersion": {"version": "1.2.3-rc.1"},
        },
    }


def _state() -> ClusterState:
    state = ClusterState(CelEnvironment())
    devices = [_device("idle"), _device("allocated"), _device("binding")]
    slice_ = {
        "metadata": {"name": "s1"},
        "spec": {"driver": D, "nodeName": "n1", "pool": {"name": "p1", "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "s1", slice_))
    claim = {
        "metadata": {"name": "done", "namespace": "default", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": D, "pool": "p1", "device": "allocated"}]}}},
    }
    state.apply(ev.ObjectEvent("ADDED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "default/done", claim))
    return state


@pytest.mark.parametrize(
    ("device", "holder"),
    [
        pytest.param("idle", None, id="free"),
        pytest.param("allocated", "default/done", id="allocated-in-the-claim-status"),
        # A /bind chose it and holds it in the ledger; the claim write has not landed yet.
        pytest.param("binding", "default/in-flight", id="bind-in-flight"),
    ],
)
def test_debug_devices_and_kubectl_devices_agree(device: str, holder: str | None) -> None:
    state = _state()
    result = DeviceRequestAllocationResult(request="r", driver=D, pool="p1", device="binding")
    hold = state.reserve({"default/in-flight": AllocationResult(results=(result,))})
    try:
        debug = {d["device"]: d for d in device_page(state, "", "", "", "", 100, "")["items"]}[device]
        kubectl = {d["device"]: d for d in device_rows(state)}[device]
    finally:
        hold.release()
    assert debug["allocatedTo"] == holder
    assert kubectl["allocatedTo"] == (holder or "")
    assert debug["attributes"]["effective"] == kubectl["attributes"]
    assert kubectl["attributes"] == {
        f"{D}/cores": 108,
        f"{D}/driverVersion": "1.2.3-rc.1",
        f"{D}/ecc": True,
        f"{D}/model": "a100",
    }
    assert list(debug["attributes"]["effective"]) == sorted(debug["attributes"]["effective"]), "one order: by name"


def test_a_device_held_in_flight_is_freed_on_both_surfaces_once_released() -> None:
    state = _state()
    result = DeviceRequestAllocationResult(request="r", driver=D, pool="p1", device="binding")
    state.reserve({"default/in-flight": AllocationResult(results=(result,))}).release()
    debug = {d["device"]: d["allocatedTo"] for d in device_page(state, "", "", "", "", 100, "")["items"]}
    kubectl = {d["device"]: d["allocatedTo"] or None for d in device_rows(state)}
    assert debug == kubectl == {"idle": None, "allocated": "default/done", "binding": None}
    assert DeviceID(D, "p1", "binding") not in state.inflight
