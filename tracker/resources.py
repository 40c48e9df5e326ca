"""Where each kind lives on the API server: the one registry of kind, group, version and plural.

The reflectors list and watch these, the writers address objects through
them, Events name their objects' apiVersion with them, and kubectl dra lists
them. resource.k8s.io DeviceTaintRule is served at whichever of
`UPSTREAM_RULE_VERSIONS` the cluster has (tracker/apiserver/discovery.py finds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tracker import events as ev


@dataclass(frozen=True, slots=True)
class Resource:
    """Where one kind lives on the API server."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    required: bool = True

    @property
    def api_version(self) -> str:
        """The objects' `apiVersion`: `group/version`, or `version` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_prefix(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace:
            return f"{self.api_prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.api_prefix}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace if self.namespaced else None)}/{name}"


# Served by every cluster with DRA: listed and watched from the start.
CORE_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource(ev.NODE, ev.GROUP_CORE, "v1", "nodes", False),
    Resource(ev.POD, ev.GROUP_CORE, "v1", "pods", True),
    Resource(ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "v1", "resourceslices", False),
    Resource(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "v1", "resourceclaims", True),
    Resource(ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE, "v1", "resourceclaimtemplates", True),
    Resource(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "v1", "deviceclasses", False),
    Resource(ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE, "v1", "persistentvolumeclaims", True),  # volume taints
    Resource(ev.PERSISTENT_VOLUME, ev.GROUP_CORE, "v1", "persistentvolumes", False),
)
KIND_RESOURCES: Final[dict[str, Resource]] = {r.kind: r for r in CORE_RESOURCES}

# Written, never watched: leader election's Lease and the Events about objects.
LEASES: Final = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)
EVENTS: Final = Resource("Event", ev.GROUP_CORE, "v1", "events", True)

# Optional: resource.k8s.io DeviceTaintRule (newest first; DRADeviceTaintRules gate) and our CRDs.
UPSTREAM_RULE_VERSIONS: Final[tuple[str, ...]] = ("v1", "v1beta2", "v1alpha3")
UPSTREAM_RULES_PLURAL: Final = "devicetaintrules"
OWN_RULES: Final = Resource(ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, "v1alpha1", "devicetaintrules", False, required=False)
OWN_PATCHES: Final = Resource(ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, "v1alpha1", "resourceslicepatches", False, required=False)
# The health controller's policies: watched by it alone (controllers/health), their status written through the tracker's writes.
HEALTH_POLICIES: Final = Resource("DeviceHealthPolicy", ev.GROUP_EXTENDER, "v1alpha1", "devicehealthpolicies", False, required=False)
# What is addressed while discovery has not (yet) found the served version.
DEFAULT_UPSTREAM_RULE_VERSION: Final = "v1beta2"


def upstream_rules(version: str = DEFAULT_UPSTREAM_RULE_VERSION) -> Resource:
    """resource.k8s.io DeviceTaintRule at `version`."""
    return Resource(ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, version, UPSTREAM_RULES_PLURAL, False, required=False)


# The kinds whose initial list gates readiness, as (kind, group). The optional APIs
# (rules, patches) count too: a filter answered before a served rule API is listed
# would ignore its taints. A source marks an optional kind synced (and empty) once
# it knows the API is not served, so a missing API does not block.
OPTIONAL_KINDS: Final[tuple[tuple[str, str], ...]] = (
    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE),
    (OWN_RULES.kind, OWN_RULES.group),
    (OWN_PATCHES.kind, OWN_PATCHES.group),
)
REQUIRED_KINDS: Final[frozenset[tuple[str, str]]] = frozenset({(r.kind, r.group) for r in CORE_RESOURCES} | set(OPTIONAL_KINDS))


def resource_for(kind: str, group: str | None = None, upstream_rule_version: str | None = None) -> Resource:
    """The Resource of `kind` (DeviceTaintRule: by group; upstream's at the version served, if known). KeyError if unknown."""
    if kind == ev.DEVICE_TAINT_RULE:
        if group == ev.GROUP_EXTENDER:
            return OWN_RULES
        return upstream_rules(upstream_rule_version or DEFAULT_UPSTREAM_RULE_VERSION)
    if kind == ev.RESOURCE_SLICE_PATCH:
        return OWN_PATCHES
    return KIND_RESOURCES[kind]


def api_version(kind: str, group: str, upstream_rule_version: str | None = None) -> str:
    """The apiVersion that names an object of `kind` in `group` (an Event's involvedObject); `group` for an unknown kind."""
    try:
        res = resource_for(kind, group, upstream_rule_version)
    except KeyError:
        return group
    return res.api_version if res.group == group else group
