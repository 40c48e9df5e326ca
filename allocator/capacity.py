"""Consumable capacity (DRAConsumableCapacity): how much of a shared device a request takes.

Mirrors upstream's incubating `consumable_capacity.go`: an amount per device
capacity (the request, rounded up by the capacity's requestPolicy, or the
policy's default, or the whole value), a policy check, and the rule that the
shares already allocated, those being allocated in this call and this one
together stay within the capacity's value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

from allocator.quantity import Quantity, format_quantity
from allocator.types import CapacityRequestPolicy, qualify

Amounts = dict[str, Fraction]  # capacity name (fully qualified) -> amount


def _go_int(q: Quantity) -> int:
    """resource.Quantity.Value(): rounded up, away from zero."""
    v = q.value
    return math.ceil(v) if v >= 0 else math.floor(v)


def _go_rem(a: int, b: int) -> int:
    """Go's `%` (truncated), which differs from Python's for negative operands."""
    return int(math.fmod(a, b))


def consumed_amount(requested: Quantity | None, value: Quantity, policy: CapacityRequestPolicy | None) -> Fraction:
    """Upstream calculateConsumedCapacity."""
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default.value
        return value.value
    if policy is None:
        return requested.value
    if policy.valid_range_min is not None:
        low = policy.valid_range_min
        if requested < low:
            return low.value
        if policy.valid_range_step is None:
            return requested.value
        req, step, base = _go_int(requested), _go_int(policy.valid_range_step), _go_int(low)
        if step <= 0:
            return requested.value  # such a device is refused (allocator/parse/slices.py device_refusal); no rounding
        added = req - base
        n = int(added / step) if added >= 0 else -int(-added / step)
        if _go_rem(added, step) != 0:
            n += 1
        return Fraction(base + step * n)
    if policy.valid_values:
        for option in policy.valid_values:
            if requested <= option:
                return option.value
        return requested.value
    return requested.value


def violates_policy(amount: Fraction, policy: CapacityRequestPolicy | None) -> bool:
    """Upstream violatesPolicy: an amount the policy does not allow (the default always is)."""
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default.value:
        return False
    if policy.valid_range_min is not None:
        if policy.valid_range_max is not None and amount > policy.valid_range_max.value:
            return True
        if policy.valid_range_step is not None:
            if policy.valid_range_step.value <= 0:
                return True
            rounded = math.ceil(amount) if amount >= 0 else math.floor(amount)
            if _go_rem(rounded - _go_int(policy.valid_range_min), _go_int(policy.valid_range_step)) != 0:
                return True
        return False
    if policy.valid_values:
        return all(amount != v.value for v in policy.valid_values)
    return False


def request_amounts(
    requests: Mapping[str, Quantity], driver: str, capacity: Mapping[str, Quantity], policies: Mapping[str, CapacityRequestPolicy]
) -> Amounts | None:
    """What a request consumes of each of a device's capacities; None if it names one the device lacks."""
    wanted = {qualify(name, driver): q for name, q in requests.items()}
    if any(name not in capacity for name in wanted):
        return None
    return {name: consumed_amount(wanted.get(name), value, policies.get(name)) for name, value in capacity.items()}


def fits(
    amounts: Amounts,
    capacity: Mapping[str, Quantity],
    policies: Mapping[str, CapacityRequestPolicy],
    committed: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Fraction] | None,
) -> bool:
    """Upstream CmpRequestOverCapacity once the amounts are known.

    Unlike upstream, a negative amount never fits: it would make room for
    other shares (docs/design.md, "Counters and shares as allocated").
    """
    for name, value in capacity.items():
        amount = amounts[name]
        if amount < 0 or violates_policy(amount, policies.get(name)):
            return False
        total = amount
        if committed is not None and name in committed:
            total += committed[name].value
        if allocating is not None and name in allocating:
            total += allocating[name]
        if total > value.value:
            return False
    return True


def negative_request(requests: Iterable[tuple[str, Quantity]]) -> str:
    """The first capacity request below zero, as `memory: -20Gi`, or "" (upstream accepts them and over-commits)."""
    for name, q in requests:
        if q.value < 0:
            return f"{name}: {q}"
    return ""


def left(capacity: Mapping[str, Quantity], committed: Mapping[str, Quantity] | None) -> str:
    """`memory 20Gi of 40Gi left`, for reasons."""
    parts = []
    for name, value in sorted(capacity.items()):
        used = committed[name].value if committed is not None and name in committed else Fraction(0)
        parts.append(f"{name.rpartition('/')[2]} {format_quantity(value.value - used)} of {value} left")
    return ", ".join(parts)


def as_quantities(amounts: Amounts) -> dict[str, Quantity]:
    return {name: Quantity(v, format_quantity(v)) for name, v in amounts.items()}
