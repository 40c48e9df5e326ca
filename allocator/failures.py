"""Why a pod is not placed: the failure categories and the failure value.

The allocator's categories label metrics and choose the wording; the
message is what the scheduler shows for the node, so it names the claim and
the request. The extender answers with the same value when it places a pod
nowhere before judging nodes (its claims unresolved, binding conditions) or
cannot bind it: one type from the allocator's result to the HTTP edge,
which writes the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
# Why the extender places a pod nowhere before any node is judged (the same value, carried to the answer):
REASON_CLAIMS_UNRESOLVED = "claims_unresolved"  # a claim not created yet, not found, being deleted or reserved for too many
REASON_BINDING_CONDITIONS = "binding_conditions"  # the claims' binding conditions pending or failed
REASON_NOT_BOUND = "not_bound"  # /bind could not bind the pod (dra_extender_binds_total says which way)
REASON_VOLUME_TAINTED = "volume_tainted"  # a PVC or PV of the pod has a taint the pod does not tolerate
REASON_WITHHELD = "withheld"  # a node fits, but a pod being bound may take its devices there (the placement gate)


@dataclass(frozen=True, slots=True)
class ClaimName:
    """A claim named in a failure message, by its key: a slot the verdict cache fills with another pod's claim."""

    key: str


Text = tuple[str | ClaimName, ...]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a node does not fit (or a pod is not placed); `message` is what the scheduler shows.

    The message is built from `parts`: text, and the claims it names as
    ClaimName, so the verdict cache (extender/filter/outcomes.py) can tell the same
    failure for other claims of the same shape without reading the text.
    """

    code: str
    parts: Text
    claim: str = ""
    request: str = ""
    device_class: str = ""  # set when a DeviceClass selector failed: the class is at fault
    message: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", render(self.parts))

    def within(self, claim_key: str) -> Failure:
        """This failure as one of claim `claim_key`: "claim <key>: <message>"."""
        return replace(self, parts=("claim ", ClaimName(claim_key), ": ", *self.parts), claim=claim_key)

    def prefixed(self, code: str, text: str) -> Failure:
        """This failure under another code, with `text` before its message."""
        return replace(self, code=code, parts=(text, *self.parts))


def of_claim(code: str, claim_key: str, text: str, request: str = "", device_class: str = "") -> Failure:
    """A failure blaming claim `claim_key`: "claim <key><text>"."""
    return Failure(code, ("claim ", ClaimName(claim_key), text), claim_key, request, device_class)


def plain(code: str, text: str) -> Failure:
    """A failure whose message names no claim the verdict cache would rename."""
    return Failure(code, (text,))


def render(parts: Text) -> str:
    """The message: the text with each claim's key."""
    return "".join(p if isinstance(p, str) else p.key for p in parts)
