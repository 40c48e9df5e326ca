"""Value types for the parts of `resource.k8s.io` (and core) that allocation needs.

API JSON is parsed once, at the edge, into these frozen types
(allocator.parse). Attribute and capacity names are fully qualified
(`gpu.example.com/model`): upstream qualifies an unqualified name with the
driver's name, and so do we (`qualify`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from allocator.quantity import Quantity
from allocator.semver import Semver

AttributeValue = int | bool | str | Semver

# Upstream limits (resource.k8s.io/v1).
ALLOCATION_RESULTS_MAX_SIZE: Final = 32
DEVICE_TAINTS_MAX: Final = 16
RESOURCE_SLICE_MAX_SHARED_COUNTERS: Final = 8  # counter sets per slice
RESOURCE_SLICE_MAX_COUNTERS_PER_SET: Final = 32
DEVICE_MAX_COUNTER_CONSUMPTIONS: Final = 2  # consumesCounters entries per device
DEVICE_MAX_COUNTERS_PER_CONSUMPTION: Final = 32
CAPACITY_VALID_VALUES_MAX: Final = 10

EFFECT_NONE: Final = "None"
EFFECT_NO_SCHEDULE: Final = "NoSchedule"
EFFECT_NO_EXECUTE: Final = "NoExecute"
BLOCKING_EFFECTS: Final = frozenset({EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})
KNOWN_EFFECTS: Final = (EFFECT_NONE, EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE)  # what this version acts on

MODE_EXACT_COUNT: Final = "ExactCount"
MODE_ALL: Final = "All"

DELETE_PROTECTION_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
TOLERATIONS_ANNOTATION: Final = "resource.dra-extender.io/tolerations"


def qualify(name: str, driver: str) -> str:
    """Fully qualified attribute/capacity name; unqualified names take the driver's domain.

    Interned: every device of a driver repeats the same few names (40,000 devices x 3 attributes
    would otherwise hold 120,000 copies)."""
    return sys.intern(name if "/" in name else f"{driver}/{name}")


def unqualify(name: str, driver: str) -> str:
    """The short name of a name in the driver's own domain (as drivers publish them)."""
    domain, slash, short = name.partition("/")
    return short if slash and domain == driver else name


# --------------------------------------------------------------------------- metadata


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: str = ""

    @property
    def key(self) -> str:
        """`namespace/name` for namespaced objects, `name` otherwise."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


# --------------------------------------------------------------------------- node selection


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """core/v1 NodeSelector: terms are ORed, requirements within a term ANDed."""

    terms: tuple[NodeSelectorTerm, ...]

    def to_api(self) -> dict[str, Any]:
        def reqs(rs: tuple[NodeSelectorRequirement, ...]) -> list[dict[str, Any]]:
            out = []
            for q in rs:
                d: dict[str, Any] = {"key": q.key, "operator": q.operator}
                if q.values:
                    d["values"] = list(q.values)
                out.append(d)
            return out

        terms = []
        for t in self.terms:
            d: dict[str, Any] = {}
            if t.match_expressions:
                d["matchExpressions"] = reqs(t.match_expressions)
            if t.match_fields:
                d["matchFields"] = reqs(t.match_fields)
            terms.append(d)
        return {"nodeSelectorTerms": terms}


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    uid: str = ""
    unschedulable: bool = False
    # status.allocatable of extended resources (names with a domain): a DRA-backed
    # extended resource is served by DRA only where this is absent or zero.
    allocatable: Mapping[str, Quantity] = field(default_factory=dict)


# --------------------------------------------------------------------------- taints and tolerations


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    effect: str
    value: str = ""
    time_added: str = ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def to_api(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value:
            d["value"] = self.value
        if self.time_added:
            d["timeAdded"] = self.time_added
        return d


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def to_api(self) -> dict[str, Any]:
        d: dict[str, Any] = {"operator": self.operator}
        if self.key:
            d["key"] = self.key
        if self.value:
            d["value"] = self.value
        if self.effect:
            d["effect"] = self.effect
        if self.toleration_seconds is not None:
            d["tolerationSeconds"] = self.toleration_seconds
        return d


# --------------------------------------------------------------------------- ResourceSlice


@dataclass(frozen=True, slots=True)
class DeviceID:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class CounterSet:
    """A slice's `sharedCounters` entry: named counters that devices of the pool draw from."""

    name: str
    counters: Mapping[str, Quantity] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """A device's `consumesCounters` entry: what allocating it takes from one counter set."""

    counter_set: str
    counters: Mapping[str, Quantity] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CapacityRequestPolicy:
    """How a request for a share of a device's capacity is rounded and bounded (DRAConsumableCapacity)."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()  # ascending
    valid_range_min: Quantity | None = None  # set when validRange is
    valid_range_max: Quantity | None = None
    valid_range_step: Quantity | None = None


@dataclass(frozen=True, slots=True)
class Device:
    """One device as its driver published it (attributes fully qualified)."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
    taints: tuple[DeviceTaint, ...] = ()
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    allow_multiple_allocations: bool = False
    # capacity name (fully qualified) -> its requestPolicy, for capacities that have one
    capacity_policies: Mapping[str, CapacityRequestPolicy] = field(default_factory=dict)
    # Binding conditions (DRADeviceBindingConditions): the pod binds only once the driver
    # reports every condition True in the claim's status.devices.
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    # Why the device is never allocated (a field that would over-commit, e.g. a negative amount); "" if usable.
    refused: str = ""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    meta: ObjectMeta
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    devices: tuple[Device, ...]
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    shared_counters: tuple[CounterSet, ...] = ()


# --------------------------------------------------------------------------- DeviceClass


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    driver: str
    parameters: Any


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """A class or claim config entry; `requests` is empty for "all requests"."""

    opaque: OpaqueConfig | None
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    meta: ObjectMeta
    selectors: tuple[str, ...] = ()  # CEL expressions
    config: tuple[DeviceConfig, ...] = ()
    extended_resource_name: str = ""  # spec.extendedResourceName (DRAExtendedResource)


# --------------------------------------------------------------------------- ResourceClaim


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """`exactly` of a request, or one `firstAvailable` subrequest."""

    name: str  # the request name, or the subrequest's own name
    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: str = MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    # `capacity.requests`: (capacity name, the amount of a shared device wanted), sorted; a tuple so a
    # request stays hashable (verdicts are keyed by requests)
    capacity_requests: tuple[tuple[str, Quantity], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[ExactRequest, ...] = ()

    @property
    def subrequests(self) -> tuple[ExactRequest, ...]:
        """What may satisfy it: `exactly` alone, or the `firstAvailable` subrequests in order."""
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()  # empty: all requests
    match_attribute: str | None = None  # fully qualified
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequestAllocationResult:
    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    share_id: str | None = None  # a share of a device that allows multiple allocations
    consumed_capacity: Mapping[str, Quantity] | None = None  # capacity name (fully qualified) -> amount
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        d: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}
        if self.admin_access is not None:
            d["adminAccess"] = self.admin_access
        if self.tolerations:
            d["tolerations"] = [t.to_api() for t in self.tolerations]
        if self.share_id is not None:
            d["shareID"] = self.share_id
        if self.consumed_capacity is not None:
            # Written with the names the driver published: its own domain is implied.
            d["consumedCapacity"] = {unqualify(k, self.driver): str(v) for k, v in self.consumed_capacity.items()}
        if self.binding_conditions:
            d["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            d["bindingFailureConditions"] = list(self.binding_failure_conditions)
        return d


@dataclass(frozen=True, slots=True)
class AllocatedConfig:
    source: str  # FromClass | FromClaim
    opaque: OpaqueConfig | None
    requests: tuple[str, ...] = ()

    def to_api(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source}
        if self.requests:
            d["requests"] = list(self.requests)
        if self.opaque is not None:
            d["opaque"] = {"driver": self.opaque.driver, "parameters": self.opaque.parameters}
        return d


@dataclass(frozen=True, slots=True)
class AllocationResult:
    results: tuple[DeviceRequestAllocationResult, ...]
    config: tuple[AllocatedConfig, ...] = ()
    node_selector: NodeSelector | None = None
    allocation_timestamp: str = ""

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [x.to_api() for x in self.results]}
        if self.config:
            devices["config"] = [c.to_api() for c in self.config]
        d: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            d["nodeSelector"] = self.node_selector.to_api()
        if self.allocation_timestamp:
            d["allocationTimestamp"] = self.allocation_timestamp
        return d


@dataclass(frozen=True, slots=True)
class ReservedFor:
    resource: str
    name: str
    uid: str
    api_group: str = ""

    def to_api(self) -> dict[str, Any]:
        return {"apiGroup": self.api_group, "resource": self.resource, "name": self.name, "uid": self.uid}


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    meta: ObjectMeta
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceConfig, ...] = ()
    allocation: AllocationResult | None = None
    reserved_for: tuple[ReservedFor, ...] = ()

    @property
    def key(self) -> str:
        return self.meta.key


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    meta: ObjectMeta
    claim_metadata: Mapping[str, Any]  # labels/annotations for generated claims
    claim_spec: Mapping[str, Any]  # raw: the claim is parsed when generated


# --------------------------------------------------------------------------- Pod


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's extended-resource requests, for DRA-backed extended resources.

    `request_names` holds every requested resource name, sorted: upstream
    numbers a container's device request by the resource's index among them.
    """

    name: str
    init: bool = False  # an init container
    sidecar: bool = False  # an init container with restartPolicy Always
    request_names: tuple[str, ...] = ()
    extended: Mapping[str, int] = field(default_factory=dict)  # domain-qualified name -> integer request


@dataclass(frozen=True, slots=True)
class Pod:
    meta: ObjectMeta
    resource_claims: tuple[PodResourceClaim, ...] = ()
    # pod claim name -> generated ResourceClaim name (None: none is needed)
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)
    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    phase: str = ""
    # Every container, init containers first, but only when one of them requests a
    # domain-qualified resource (a candidate for a DRA-backed extended resource); else ().
    containers_if_extended: tuple[ContainerResources, ...] = ()
    extended_claim_name: str | None = None  # status.extendedResourceClaimStatus.resourceClaimName
    # Volume taints (allocator/pod_volumes.py): the PVCs the pod mounts, by name in volume order,
    # and its volume tolerations (a malformed annotation counts as none; the problem says why).
    volume_claims: tuple[str, ...] = ()
    volume_tolerations: tuple[DeviceToleration, ...] = ()
    volume_tolerations_problem: str | None = None

    @property
    def key(self) -> str:
        return self.meta.key


# --------------------------------------------------------------------------- DeviceTaintRule


@dataclass(frozen=True, slots=True)
class DeviceTaintSelector:
    """Which devices a rule taints. All set fields must match.

    `device_class_name` and `selectors` come from the project's CRD (and old
    v1alpha3 rules); they can only match devices that are currently published.
    """

    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    device_class_name: str | None = None
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    meta: ObjectMeta
    group: str  # resource.k8s.io or resource.dra-extender.io
    selector: DeviceTaintSelector | None  # None: selects no device
    taint: DeviceTaint
    evictions_per_second: float | None = None

    @property
    def source(self) -> str:
        return f"DeviceTaintRule/{self.group}/{self.meta.name}"


# --------------------------------------------------------------------------- ResourceSlicePatch


@dataclass(frozen=True, slots=True)
class DevicePatchFilter:
    device_class_name: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    selectors: tuple[str, ...] = ()


REMOVE: Final = object()  # a patched attribute value of `null: {}`


@dataclass(frozen=True, slots=True)
class ResourceSlicePatch:
    meta: ObjectMeta
    filter: DevicePatchFilter
    priority: int = 0
    attributes: Mapping[str, AttributeValue | object] = field(default_factory=dict)  # value or REMOVE
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
