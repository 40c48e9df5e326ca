"""A claim's `constraints`, checked device by device as upstream's incubating allocator does.

Each constraint is told of every device picked for the claim (`add`) and of
every pick taken back (`remove`), in the search's order. Upstream keeps
`distinctAttribute` values keyed by *request name*: a later device of the
same request replaces the earlier one's value, and taking a device back
forgets the request's value altogether. That is what forces different
shares of a shared device apart across requests, and what lets one request
pick two devices with the same value; both are kept here.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.device_view import DeviceView
from allocator.types import AttributeValue, DeviceConstraint


def _applies(requests: frozenset[str], parent: str, sub: str) -> bool:
    if not requests:
        return True
    if not sub:
        return parent in requests
    return parent in requests or f"{parent}/{sub}" in requests


class MatchAttribute:
    __slots__ = ("attribute", "count", "requests", "value")

    def __init__(self, attribute: str, requests: frozenset[str]) -> None:
        self.attribute = attribute
        self.requests = requests
        self.value: AttributeValue | None = None
        self.count = 0

    def add(self, parent: str, sub: str, device: DeviceView) -> bool:
        if not _applies(self.requests, parent, sub):
            return True
        value = device.attributes.get(self.attribute)
        if value is None:
            return False
        if self.count == 0:
            self.value = value
            self.count = 1
            return True
        if type(value) is not type(self.value) or value != self.value:
            return False
        self.count += 1
        return True

    def remove(self, parent: str, sub: str, device: DeviceView) -> None:
        if _applies(self.requests, parent, sub):
            self.count -= 1


class DistinctAttribute:
    __slots__ = ("attribute", "count", "requests", "values")

    def __init__(self, attribute: str, requests: frozenset[str]) -> None:
        self.attribute = attribute
        self.requests = requests
        self.values: dict[str, AttributeValue] = {}  # request name -> the value of its latest device
        self.count = 0

    def add(self, parent: str, sub: str, device: DeviceView) -> bool:
        if not _applies(self.requests, parent, sub):
            return True
        value = device.attributes.get(self.attribute)
        if value is None:
            return False
        if self.count and any(type(v) is type(value) and v == value for v in self.values.values()):
            return False
        self.values[parent] = value
        self.count += 1
        return True

    def remove(self, parent: str, sub: str, device: DeviceView) -> None:
        if _applies(self.requests, parent, sub):
            self.values.pop(parent, None)
            self.count -= 1


Constraint = MatchAttribute | DistinctAttribute


def build(constraints: Sequence[DeviceConstraint]) -> list[Constraint]:
    out: list[Constraint] = []
    for c in constraints:
        requests = frozenset(c.requests)
        if c.match_attribute is not None:
            out.append(MatchAttribute(c.match_attribute, requests))
        else:
            assert c.distinct_attribute is not None
            out.append(DistinctAttribute(c.distinct_attribute, requests))
    return out
