"""A lone request is answered as upstream's allocateOne does: devices in pool order, selectors one device at a time.

Each row also runs through the full search and spread (tests/allocator/paths.py): the same
devices, except where the full pass sees a selector error that first fit never evaluates."""

from __future__ import annotations

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.types import DeviceID, Node
from tests.allocator.builders import DRIVER, claim, dev, device_class, req, slice_, view
from tests.allocator.paths import FIRST_FIT, PATHS, allocator_for

GPU = device_class("gpu", f'device.driver == "{DRIVER}"')
NODE = Node("node-1")
# `model` is missing on gpu-2: reading it is a CEL runtime error there.
BIG = f'device.attributes["{DRIVER}"].model == "big"'


def devices(n: int = 8, missing_model: tuple[int, ...] = ()) -> list[dict]:
    return [dev(f"gpu-{i}", {} if i in missing_model else {"model": "big"}) for i in range(n)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("name", "count", "missing", "allocated", "want", "fail", "full_fail"),
    [
        ("first-device", 1, (), set(), ["gpu-0"], None, None),
        ("first-two", 2, (), set(), ["gpu-0", "gpu-1"], None, None),
        ("skips-in-use", 1, (), {"gpu-0"}, ["gpu-1"], None, None),
        # Upstream never evaluates a device after the request is satisfied: an error there is not seen;
        # the full pass (and spread, which always takes it) evaluates every device, and fails the node.
        ("error-after-the-picks-is-not-seen", 2, (2,), set(), ["gpu-0", "gpu-1"], None, "gpu-2: CEL expression"),
        # ... nor on a device in use (checked first, as upstream's "cheap" in-use test).
        ("error-on-a-device-in-use-is-not-seen", 1, (0,), {"gpu-0"}, ["gpu-1"], None, "gpu-0: CEL expression"),
        # An error before enough devices are found fails the node, with the full pass's message.
        ("error-before-the-picks-fails", 2, (1,), set(), None, "gpu-1: CEL expression", None),
        ("too-few-explained-by-the-full-pass", 9, (), set(), None, "8 of 9 devices available", None),
    ],
)
def test_lone_request(
    path: str,
    name: str,
    count: int,
    missing: tuple[int, ...],
    allocated: set[str],
    want: list[str] | None,
    fail: str | None,
    full_fail: str | None,
) -> None:
    """`full_fail`: where the full pass answers otherwise (docs/design.md, "Selector evaluation order")."""
    s = view(slice_("s1", devices(missing_model=missing)))
    c = claim("c", req("r", count=count, selectors=[BIG]))
    taken = {DeviceID(DRIVER, "node-1", d) for d in allocated}
    if path != FIRST_FIT and full_fail is not None:
        want, fail = None, full_fail
    out = allocator_for(path, CelEnvironment()).allocate(NODE, [c], [s], {"gpu": GPU}, taken)
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
