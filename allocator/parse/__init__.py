"""API JSON -> the value types of allocator.types.

Parsing accepts `resource.k8s.io` v1 and v1beta2 (same shape) and converts
v1beta1 (devices wrapped in `basic`, requests without `exactly`). Errors
(`ValidationError`) name the object and the field path, so a bad manifest or
API object can be reported precisely. Attribute and capacity names are
normalised to fully qualified names, as upstream does.
"""

from __future__ import annotations

from allocator.parse.claims import parse_resource_claim, parse_resource_claim_template
from allocator.parse.classes import parse_device_class
from allocator.parse.fields import parse_node_selector, parse_taint, parse_toleration, parse_tolerations
from allocator.parse.nodes import parse_node
from allocator.parse.pods import parse_pod
from allocator.parse.reader import ValidationError, parse_meta
from allocator.parse.slice_patches import parse_resource_slice_patch
from allocator.parse.slices import DeviceDigest, device_digest, device_refusal, parse_resource_slice
from allocator.parse.taint_rules import parse_device_taint_rule

__all__ = [
    "DeviceDigest",
    "ValidationError",
    "device_digest",
    "device_refusal",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_meta",
    "parse_node",
    "parse_node_selector",
    "parse_pod",
    "parse_resource_claim",
    "parse_resource_claim_template",
    "parse_resource_slice",
    "parse_resource_slice_patch",
    "parse_taint",
    "parse_toleration",
    "parse_tolerations",
]
