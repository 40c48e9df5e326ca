"""A lone request is answered as upstream's allocateOne does: devices in pool order, selectors one device at a time."""

from __future__ import annotations

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.types import DeviceID, Node
from tests.allocator.builders import DRIVER, claim, dev, device_class, req, slice_, view

GPU = device_class("gpu", f'device.driver == "{DRIVER}"')
NODE = Node("node-1")
# `model` is missing on gpu-2: reading it is a CEL runtime error there.
BIG = f'device.attributes["{DRIVER}"].model == "big"'


def devices(n: int = 8, missing_model: tuple[int, ...] = ()) -> list[dict]:
    return [dev(f"gpu-{i}", {} if i in missing_model else {"model": "big"}) for i in range(n)]


@pytest.mark.parametrize(
    ("name", "count", "missing", "allocated", "want", "fail"),
    [
        ("first-device", 1, (), set(), ["gpu-0"], None),
        ("first-two", 2, (), set(), ["gpu-0", "gpu-1"], None),
        ("skips-in-use", 1, (), {"gpu-0"}, ["gpu-1"], None),
        # Upstream never evaluates a device after the request is satisfied: an error there is not seen.
        ("error-after-the-picks-is-not-seen", 2, (2,), set(), ["gpu-0", "gpu-1"], None),
        # ... nor on a device in use (checked first, as upstream's "cheap" in-use test).
        ("error-on-a-device-in-use-is-not-seen", 1, (0,), {"gpu-0"}, ["gpu-1"], None),
        # An error before enough devices are found fails the node, with the full pass's message.
        ("error-before-the-picks-fails", 2, (1,), set(), None, "gpu-1: CEL expression"),
        ("too-few-explained-by-the-full-pass", 9, (), set(), None, "8 of 9 devices available"),
    ],
)
def test_lone_request(
    name: str, count: int, missing: tuple[int, ...], allocated: set[str], want: list[str] | None, fail: str | None
) -> None:
    s = view(slice_("s1", devices(missing_model=missing)))
    c = claim("c", req("r", count=count, selectors=[BIG]))
    taken = {DeviceID(DRIVER, "node-1", d) for d in allocated}
    out = Allocator(CelEnvironment()).allocate(NODE, [c], [s], {"gpu": GPU}, taken)
    if want is None:
        assert out.failure is not None and fail in out.failure.message, out.failure
    else:
        assert out.failure is None, out.failure
        assert [r.device for r in out.allocations["default/c"].results] == want


def test_a_new_selector_is_evaluated_only_until_the_request_is_satisfied() -> None:
    cel = CelEnvironment()
    s = view(slice_("s1", devices(8)))
    out = Allocator(cel).allocate(NODE, [claim("c", req("r", selectors=[BIG]))], [s], {"gpu": GPU}, set())
    assert out.failure is None
    # The class selector and the request selector, on gpu-0 only (not on all eight devices).
    assert cel.stats["evaluations"] == 2
