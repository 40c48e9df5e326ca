"""Why a node does not fit: the failure categories and the failure value.

The categories label metrics and choose the wording; the message is what
the scheduler shows for the node, so it names the claim and the request.
"""

from __future__ import annotations

from dataclasses import dataclass

REASON_TAINTED = "tainted"
REASON_ALLOCATED = "allocated"
REASON_SELECTOR = "selector_mismatch"
REASON_SELECTOR_ERROR = "selector_error"
REASON_POOL_INCOMPLETE = "pool_incomplete"
REASON_NO_DEVICES = "no_devices"
REASON_CONSTRAINTS = "constraints"
REASON_CLASS_MISSING = "class_missing"
REASON_TOO_MANY = "too_many_results"
REASON_NODE_MISMATCH = "node_mismatch"
REASON_NO_EXECUTE = "no_execute_taint"
REASON_CLAIM_UNUSABLE = "claim_unusable"
REASON_SEARCH_LIMIT = "search_limit"
REASON_COUNTERS = "counters_exhausted"
REASON_CAPACITY = "capacity_exhausted"
REASON_POOL_INVALID = "pool_invalid"
REASON_FEATURE_DISABLED = "feature_disabled"
REASON_DEVICE_REFUSED = "device_refused"  # a device with a field that would over-commit (Device.refused)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a node does not fit; `message` is what the scheduler shows."""

    code: str
    message: str
    claim: str = ""
    request: str = ""
    device_class: str = ""  # set when a DeviceClass selector failed: the class is at fault
