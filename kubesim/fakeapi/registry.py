"""Which kinds the fake API server serves, at which group/versions.

One `ResourceType` per storage (group + plural). A type may be served at
several versions of its group from the same storage (as the real server does
for `resource.k8s.io` v1/v1beta2, whose schemas are identical): objects are
stored once and stamped with the requested `apiVersion` on the way out, with
no schema conversion. Add a kind by appending a `ResourceType`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubesim.fakeapi.quantity import QuantityError, quantity

CORE_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})

# Hooks validating a write made over HTTP (Python-level helpers bypass them):
# (old object or None, new object) -> error message for a 422 (or the field errors,
# kubesim.fakeapi.field_errors.FieldError), or None. A hook may prune the new object in
# place, and raise an ApiError of its own (a body that does not decode answers 400).
Validator = Callable[[dict[str, Any] | None, dict[str, Any]], Any]


@dataclass(frozen=True)
class ResourceType:
    """One storage: a kind served at one or more versions of its group."""

    group: str
    plural: str
    kind: str
    namespaced: bool
    versions: tuple[str, ...]
    singular: str = ""
    short_names: tuple[str, ...] = ()
    # Subresources by name ("status", "binding", "eviction"), each with its verbs.
    subresources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Field selectors the real server accepts for this kind (others answer 400).
    field_selectors: frozenset[str] = META_FIELDS
    # CRDs: list items carry kind/apiVersion and strategic merge patch is refused (415).
    custom: bool = False
    verbs: tuple[str, ...] = CORE_VERBS
    validate: Validator | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def resource_name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


STATUS = ("get", "patch", "update")


def _masked_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec without the fields the real server lets an update change."""
    out = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")
    }
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in out[key]]
    return out


def _validate_pod(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    if old is None:
        return None
    if _masked_pod_spec(old.get("spec") or {}) != _masked_pod_spec(new.get("spec") or {}):
        return "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative) or `spec.schedulingGates` (use pods/binding to set spec.nodeName)"
    return None


def _validate_immutable_spec(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    if old is not None and (old.get("spec") or {}) != (new.get("spec") or {}):
        return "spec: Invalid value: field is immutable"
    return None


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _validate_resource_slice(old: dict[str, Any] | None, new: dict[str, Any]) -> Any:
    """The API server's ResourceSlice rules (kubesim/fakeapi/resource_slices.py, imported here: it imports the store)."""
    from kubesim.fakeapi.resource_slices import validate_resource_slice

    return validate_resource_slice(old, new)


def _validate_claim(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    """Immutable spec, and allocation results as the API server checks them (shareID, consumedCapacity)."""
    why = _validate_immutable_spec(old, new)
    if why is not None:
        return why
    allocation = (new.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    if len(results) > 32:
        return "status.allocation.devices.results: Too many: must have at most 32 items"
    seen: set[tuple[str, str, str, str]] = set()
    for i, r in enumerate(results):
        path = f"status.allocation.devices.results[{i}]"
        share = r.get("shareID")
        if share is not None and not _UUID.match(str(share)):
            return f"{path}.shareID: Invalid value: {share!r}: must be a lowercase UUID"
        key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""), share or "")
        if key in seen:
            return f"{path}: Duplicate value: the same device{' share' if share else ''} twice"
        seen.add(key)
        for name, q in (r.get("consumedCapacity") or {}).items():
            try:
                quantity(q)
            except QuantityError as e:
                return f"{path}.consumedCapacity.{name}: Invalid value: {e}"
    return None


def default_types(
    *,
    resource_versions: Iterable[str] = ("v1", "v1beta2"),
    device_taint_rule_versions: Iterable[str] = ("v1beta2", "v1alpha3"),
) -> list[ResourceType]:
    """The built-in kinds dra-extender reads and writes; the project's own kinds come from its CRDs (kubesim/fakeapi/crd.py)."""
    rv = tuple(resource_versions)
    dtr = tuple(device_taint_rule_versions)
    types = [
        ResourceType(
            "",
            "namespaces",
            "Namespace",
            False,
            ("v1",),
            "namespace",
            ("ns",),
            {"status": STATUS, "finalize": ("update",)},
            META_FIELDS | {"status.phase"},
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        ResourceType("", "nodes", "Node", False, ("v1",), "node", ("no",), {"status": STATUS}, META_FIELDS | {"spec.unschedulable"}),
        ResourceType(
            "",
            "pods",
            "Pod",
            True,
            ("v1",),
            "pod",
            ("po",),
            {"status": STATUS, "binding": ("create",), "eviction": ("create",)},
            META_FIELDS
            | {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            },
            validate=_validate_pod,
        ),
        ResourceType("", "bindings", "Binding", True, ("v1",), "binding", verbs=("create",)),
        ResourceType(
            "",
            "events",
            "Event",
            True,
            ("v1",),
            "event",
            ("ev",),
            {},
            META_FIELDS
            | {
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            },
        ),
        ResourceType(
            "", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("v1",), "persistentvolumeclaim", ("pvc",), {"status": STATUS}
        ),
        ResourceType("", "persistentvolumes", "PersistentVolume", False, ("v1",), "persistentvolume", ("pv",), {"status": STATUS}),
        ResourceType("coordination.k8s.io", "leases", "Lease", True, ("v1",), "lease"),
        ResourceType(
            "policy", "poddisruptionbudgets", "PodDisruptionBudget", True, ("v1",), "poddisruptionbudget", ("pdb",), {"status": STATUS}
        ),
    ]
    if rv:
        types += [
            ResourceType(
                "resource.k8s.io",
                "resourceslices",
                "ResourceSlice",
                False,
                rv,
                "resourceslice",
                (),
                {},
                META_FIELDS | {"spec.nodeName", "spec.driver"},
                validate=_validate_resource_slice,
            ),
            ResourceType(
                "resource.k8s.io",
                "resourceclaims",
                "ResourceClaim",
                True,
                rv,
                "resourceclaim",
                (),
                {"status": STATUS},
                validate=_validate_claim,
            ),
            ResourceType(
                "resource.k8s.io",
                "resourceclaimtemplates",
                "ResourceClaimTemplate",
                True,
                rv,
                "resourceclaimtemplate",
                (),
                {},
                validate=_validate_immutable_spec,
            ),
            ResourceType("resource.k8s.io", "deviceclasses", "DeviceClass", False, rv, "deviceclass"),
        ]
    if dtr:
        types.append(
            ResourceType("resource.k8s.io", "devicetaintrules", "DeviceTaintRule", False, dtr, "devicetaintrule", (), {"status": STATUS})
        )
    return types


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, then higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {"": 0, None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)


class Registry:
    """Resource types by storage and by served group/version, with on/off switches."""

    def __init__(self, types: Iterable[ResourceType]) -> None:
        self.types: dict[tuple[str, str], ResourceType] = {}
        self.disabled: set[tuple[str, str]] = set()  # (group, version) switched off
        for t in types:
            self.add(t)

    def add(self, t: ResourceType) -> None:
        self.types[t.key] = t

    # ---------------------------------------------------------------- serving

    def served(self, group: str, version: str) -> bool:
        if (group, version) in self.disabled or (group, "*") in self.disabled:
            return False
        return any(t.group == group and version in t.versions for t in self.types.values())

    def set_served(self, group: str, version: str | None, served: bool) -> None:
        key = (group, version or "*")
        if served:
            self.disabled.discard(key)
            if version is None:
                self.disabled = {k for k in self.disabled if k[0] != group}
        else:
            self.disabled.add(key)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        t = self.types.get((group, plural))
        if t is None or version not in t.versions or not self.served(group, version):
            return None
        return t

    def groups(self) -> dict[str, list[str]]:
        """Served group → served versions, preferred first."""
        out: dict[str, set[str]] = {}
        for t in self.types.values():
            for v in t.versions:
                if self.served(t.group, v):
                    out.setdefault(t.group, set()).add(v)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def resources_at(self, group: str, version: str) -> list[ResourceType]:
        if not self.served(group, version):
            return []
        return [t for t in self.types.values() if t.group == group and version in t.versions]

    def preferred_version(self, t: ResourceType) -> str:
        served = [v for v in t.versions if self.served(t.group, v)]
        return sorted(served or list(t.versions), key=version_priority)[0]

    # ---------------------------------------------------------------- Python-level lookups

    def resolve(self, what: str, group: str | None = None) -> ResourceType:
        """A type by plural, kind, singular or short name, optionally `plural.group`."""
        if group is None and "." in what:
            what, group = what.split(".", 1)
        low = what.lower()
        matches = [
            t
            for t in self.types.values()
            if (group is None or t.group == group) and low in (t.plural, t.kind.lower(), t.singular, *t.short_names)
        ]
        if not matches:
            raise KeyError(f"unknown resource {what!r}" + (f" in group {group!r}" if group is not None else ""))
        return matches[0]  # built-in kinds are registered before CRDs: they win a tie

    def for_object(self, obj: dict[str, Any]) -> tuple[ResourceType, str]:
        """The type and version named by an object's apiVersion and kind."""
        api_version = obj.get("apiVersion") or ""
        kind = obj.get("kind") or ""
        group, _, version = api_version.rpartition("/")
        for t in self.types.values():
            if t.group == group and t.kind == kind and (version in t.versions):
                return t, version
        raise KeyError(f"no resource serves {api_version} {kind}")

    # ---------------------------------------------------------------- discovery documents

    def api_resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources: list[dict[str, Any]] = []
        for t in sorted(self.resources_at(group, version), key=lambda t: t.plural):
            entry: dict[str, Any] = {
                "name": t.plural,
                "singularName": t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": list(t.verbs),
            }
            if t.short_names:
                entry["shortNames"] = list(t.short_names)
            if t.custom:
                entry["categories"] = ["dra-extender"]
            resources.append(entry)
            for sub, verbs in sorted(t.subresources.items()):
                sub_kind = {"binding": "Binding", "eviction": "Eviction"}.get(sub, t.kind)
                sub_entry: dict[str, Any] = {
                    "name": f"{t.plural}/{sub}",
                    "singularName": "",
                    "namespaced": t.namespaced,
                    "kind": sub_kind,
                    "verbs": list(verbs),
                }
                if sub == "eviction":
                    sub_entry["group"], sub_entry["version"] = "policy", "v1"
                resources.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}

    def api_group_list(self) -> dict[str, Any]:
        groups = []
        for g in sorted(k for k in self.groups() if k):
            doc = self.api_group(g)
            assert doc is not None
            doc = {k: v for k, v in doc.items() if k not in ("kind", "apiVersion")}
            groups.append(doc)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_versions(self) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": self.groups().get("", []),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
        }
