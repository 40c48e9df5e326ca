"""How one device's effective view is computed from its slice, patches and rules.

Order matters and follows docs/design.md#the-patched-device-view: patch filters see the driver's original
device; the patched device is what taint-rule selectors, class selectors and
claim selectors see. Effective taints are the slice's taints followed by
every matching rule's taint, without de-duplication.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from allocator.device_selector import DeviceSelection, names_device, reads_attributes
from allocator.device_view import DeviceView
from allocator.quantity import Quantity
from allocator.types import (
    REMOVE,
    AttributeValue,
    Device,
    DeviceClass,
    DeviceID,
    DeviceTaint,
    DeviceTaintRule,
    NodeSelector,
    ResourceSlice,
    ResourceSlicePatch,
)

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

# (object kind, group, name, message): a selector of a rule or patch failed for a device.
ProblemReporter = Callable[[str, str, str, str], None]


@dataclass(frozen=True, slots=True)
class SelectorContext:
    """What selector evaluation needs: the CEL engine and the classes."""

    cel: SelectorEngine[Any]  # allocator.cel.CelEnvironment
    classes: Mapping[str, DeviceClass]
    report: ProblemReporter


def original_view(slice_: ResourceSlice, device: Device, version: int) -> DeviceView:
    """The device as the driver published it, for patch filters.

    `version` is the tracker's own counter for this slice: CEL results are
    cached per cel_key, so the key must change whenever the slice does.
    """
    node_name, node_selector, all_nodes = _reach(slice_, device)
    return DeviceView(
        id=DeviceID(slice_.driver, slice_.pool, device.name),
        cel_key=("orig", slice_.meta.name, version, device.name),
        attributes=device.attributes,
        capacity=device.capacity,
        taints=device.taints,
        taint_sources=("slice",) * len(device.taints),
        node_name=node_name,
        node_selector=node_selector,
        all_nodes=all_nodes,
        consumes_counters=device.consumes_counters,
        allow_multiple_allocations=device.allow_multiple_allocations,
        capacity_policies=device.capacity_policies,
        binds_to_node=device.binds_to_node,
        binding_conditions=device.binding_conditions,
        binding_failure_conditions=device.binding_failure_conditions,
        refused=device.refused,
    )


def _reach(slice_: ResourceSlice, device: Device) -> tuple[str | None, NodeSelector | None, bool]:
    if slice_.per_device_node_selection:
        return device.node_name, device.node_selector, device.all_nodes
    return slice_.node_name, slice_.node_selector, slice_.all_nodes


def _selectors_match(
    ctx: SelectorContext,
    kind: str,
    group: str,
    name: str,
    class_name: str | None,
    selectors: tuple[str, ...],
    device: DeviceView,
) -> bool:
    """Class + CEL selectors of a rule or patch; a failure means "does not apply" plus a report."""
    expressions: list[str] = []
    if class_name is not None:
        device_class = ctx.classes.get(class_name)
        if device_class is None:
            return False  # a class that does not exist selects nothing
        expressions.extend(device_class.selectors)
    expressions.extend(selectors)
    cel = ctx.cel
    for expression in expressions:
        try:
            if not cel.evaluate(cel.compile(expression), device):
                return False
        except ValueError as e:  # CelCompileError / CelRuntimeError
            ctx.report(kind, group, name, f"selector failed for device {device.id}: {e}")
            return False
    return True


def _selects(ctx: SelectorContext, selection: DeviceSelection, kind: str, group: str, name: str, device: DeviceView) -> bool:
    """Driver, pool and device by name (`allocator.device_selector`), then the class and CEL selectors."""
    if not names_device(selection, device.id):
        return False
    if not reads_attributes(selection):
        return True
    return _selectors_match(ctx, kind, group, name, selection.device_class_name, selection.selectors, device)


def patch_matches(ctx: SelectorContext, patch: ResourceSlicePatch, original: DeviceView) -> bool:
    return _selects(ctx, patch.filter, "ResourceSlicePatch", "resource.dra-extender.io", patch.meta.name, original)


def rule_matches(ctx: SelectorContext, rule: DeviceTaintRule, device: DeviceView) -> bool:
    if rule.selector is None:
        return False  # the API's documented rule: a missing selector selects nothing
    return _selects(ctx, rule.selector, "DeviceTaintRule", rule.group, rule.meta.name, device)


def patch_order(patch: ResourceSlicePatch) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Applied in ascending precedence: the last applied wins.

    Higher priority wins; on a tie the older creationTimestamp wins, then the
    name (alphabetically first wins).
    """
    return (patch.priority, _neg_text(patch.meta.creation_timestamp), _neg_text(patch.meta.name))


def _neg_text(s: str) -> tuple[int, ...]:
    # Reverse string ordering so "older"/"alphabetically first" sorts last (= wins).
    return (*tuple(-ord(c) for c in s), 0)


def applicable_patches(ctx: SelectorContext, patches: Iterable[ResourceSlicePatch], original: DeviceView) -> list[ResourceSlicePatch]:
    """The patches whose filter selects the driver's device, lowest precedence first (the order they are applied in)."""
    return sorted((p for p in patches if patch_matches(ctx, p, original)), key=patch_order)


def patch_sources(applicable: list[ResourceSlicePatch]) -> dict[tuple[str, str], str]:
    """("attributes" or "capacity", name) -> the patch whose value the patched view holds (a removal included).

    Walks `applicable` in the order `_patched` applies them, so the last
    patch to set a name, the one that wins, is the one named.
    """
    sources: dict[tuple[str, str], str] = {}
    for patch in applicable:
        sources.update({("attributes", name): patch.meta.name for name in patch.attributes})
        sources.update({("capacity", name): patch.meta.name for name in patch.capacity})
    return sources


def _patched(device: Device, applicable: list[ResourceSlicePatch]) -> tuple[dict[str, AttributeValue], dict[str, Quantity]]:
    """The device's attributes and capacity with `applicable` patches applied, lowest precedence first."""
    attributes: dict[str, AttributeValue] = dict(device.attributes)
    capacity: dict[str, Quantity] = dict(device.capacity)
    for patch in applicable:
        for name, value in patch.attributes.items():
            if value is REMOVE:
                attributes.pop(name, None)
            else:
                attributes[name] = value  # type: ignore[assignment]  # REMOVE was handled above; mypy does not narrow a sentinel by identity
        capacity.update(patch.capacity)
    return attributes, capacity


def effective_view(
    ctx: SelectorContext,
    slice_: ResourceSlice,
    device: Device,
    patches: Iterable[ResourceSlicePatch],
    rules: Iterable[DeviceTaintRule],
    previous: DeviceView | None,
    version: int,
    patch_versions: Mapping[str, int],
) -> DeviceView:
    """The patched, tainted view; reuses `previous.cel_key` when the content is unchanged."""
    original = original_view(slice_, device, version)
    applicable = applicable_patches(ctx, patches, original)
    patched = _patched_view(original, device, applicable, patch_versions)
    taints: list[DeviceTaint] = list(device.taints)
    sources: list[str] = ["slice"] * len(device.taints)
    for rule in sorted(rules, key=lambda r: (r.group, r.meta.name)):
        if rule_matches(ctx, rule, patched):
            taints.append(rule.taint)
            sources.append(rule.source)
    view = _with_taints(patched, tuple(taints), tuple(sources))
    if previous is not None and previous == view:
        return previous
    return view


def _patched_view(
    original: DeviceView, device: Device, applicable: list[ResourceSlicePatch], patch_versions: Mapping[str, int]
) -> DeviceView:
    """The original view with the applicable patches' attributes and capacity (what rule selectors see)."""
    # Unpatched devices share the parsed slice's mappings (never mutated): no copy per device.
    attributes: Mapping[str, AttributeValue] = device.attributes
    capacity: Mapping[str, Quantity] = device.capacity
    if applicable:
        attributes, capacity = _patched(device, applicable)
    patched_key = (
        ("patched", original.cel_key, tuple((p.meta.name, patch_versions.get(p.meta.name, 0)) for p in applicable))
        if applicable
        else original.cel_key
    )
    return DeviceView(
        id=original.id,
        cel_key=patched_key,
        attributes=attributes,
        capacity=capacity,
        taints=original.taints,
        taint_sources=original.taint_sources,
        node_name=original.node_name,
        node_selector=original.node_selector,
        all_nodes=original.all_nodes,
        consumes_counters=original.consumes_counters,
        allow_multiple_allocations=original.allow_multiple_allocations,
        capacity_policies=original.capacity_policies,
        binds_to_node=original.binds_to_node,
        binding_conditions=original.binding_conditions,
        binding_failure_conditions=original.binding_failure_conditions,
        refused=original.refused,
    )


def _with_taints(patched: DeviceView, taints: tuple[DeviceTaint, ...], sources: tuple[str, ...]) -> DeviceView:
    """The patched view with its effective taints (the constructor, not dataclasses.replace: this runs per device)."""
    return DeviceView(
        id=patched.id,
        cel_key=patched.cel_key,
        attributes=patched.attributes,
        capacity=patched.capacity,
        taints=taints,
        taint_sources=sources,
        node_name=patched.node_name,
        node_selector=patched.node_selector,
        all_nodes=patched.all_nodes,
        consumes_counters=patched.consumes_counters,
        allow_multiple_allocations=patched.allow_multiple_allocations,
        capacity_policies=patched.capacity_policies,
        binds_to_node=patched.binds_to_node,
        binding_conditions=patched.binding_conditions,
        binding_failure_conditions=patched.binding_failure_conditions,
        refused=patched.refused,
    )
