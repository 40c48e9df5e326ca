"""Which devices a DeviceTaintRule's selector or a ResourceSlicePatch's filter names.

Upstream's `ruleMatchesDevice` (pkg/controller/devicetainteviction): every
one of driver, pool and device that is set must equal the device's. The
class and CEL parts (the project's CRDs, and upstream's v1alpha3) look at
the device's attributes, so only a published device can match them; the
tracker evaluates those (tracker/views/patched.py), and the eviction plan
of a device whose slice is gone keeps only the rules that need none.
"""

from __future__ import annotations

from typing import Protocol

from allocator.types import DeviceID


class DeviceSelection(Protocol):
    """What `DeviceTaintSelector` and `DevicePatchFilter` share."""

    @property
    def driver(self) -> str | None: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def device_class_name(self) -> str | None: ...
    @property
    def selectors(self) -> tuple[str, ...]: ...


def names_device(selection: DeviceSelection, device: DeviceID) -> bool:
    """Driver, pool and device: each one set must equal the device's (an unset one matches any)."""
    return (
        (selection.driver is None or selection.driver == device.driver)
        and (selection.pool is None or selection.pool == device.pool)
        and (selection.device is None or selection.device == device.device)
    )


def reads_attributes(selection: DeviceSelection) -> bool:
    """A class or CEL selector: it needs the published device's attributes to match."""
    return selection.device_class_name is not None or bool(selection.selectors)
