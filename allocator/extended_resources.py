"""DRA-backed extended resources (DRAExtendedResource), as kube-scheduler 1.36 serves them.

A DeviceClass maps an extended resource name to itself: explicitly with
`spec.extendedResourceName`, implicitly as `deviceclass.resource.kubernetes.io/<class>`.
A pod that asks for such a resource in its container requests, on a node that
does not advertise it in its allocatable, gets its devices from a claim the
scheduler creates for it at bind time: one device request per container and
resource (`createRequestsAndMappings` upstream). Where the node advertises the
resource, a device plugin serves it and no claim is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocator.types import (
    MODE_EXACT_COUNT,
    ContainerResources,
    DeviceClass,
    DeviceRequest,
    ExactRequest,
    Node,
    ObjectMeta,
    Pod,
    ResourceClaim,
)

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IN_MEMORY_SUFFIX = "-extended-resources-<pending>"  # the name of a claim not created yet (never sent to the API)


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """pod.status.extendedResourceClaimStatus.requestMappings[]: which request serves which container's resource."""

    container_name: str
    resource_name: str
    request_name: str

    def to_api(self) -> dict[str, str]:
        return {"containerName": self.container_name, "resourceName": self.resource_name, "requestName": self.request_name}


def class_mapping(classes: Mapping[str, DeviceClass]) -> dict[str, str]:
    """Extended resource name -> DeviceClass name (upstream's extendedresourcecache).

    Two classes naming the same explicit resource: the newer one wins, then the
    smaller name; the loser also loses its implicit name, so a class never half-serves.
    """
    winners: dict[str, DeviceClass] = {}
    for cls in classes.values():
        name = cls.extended_resource_name
        if not name:
            continue
        held = winners.get(name)
        if held is None or _beats(cls, held):
            winners[name] = cls
    losers = {c.meta.name for c in classes.values() if c.extended_resource_name and winners[c.extended_resource_name] is not c}
    mapping = {IMPLICIT_PREFIX + name: name for name in classes if name not in losers}
    mapping.update({resource: cls.meta.name for resource, cls in winners.items()})
    return mapping


def _beats(a: DeviceClass, b: DeviceClass) -> bool:
    if a.meta.creation_timestamp != b.meta.creation_timestamp:
        return a.meta.creation_timestamp > b.meta.creation_timestamp  # RFC 3339 UTC sorts as time
    return a.meta.name < b.meta.name


def dra_resources(pod: Pod, mapping: Mapping[str, str], node: Node) -> frozenset[str]:
    """The pod's requested resources that DRA serves on `node`: mapped to a class, and 0 or absent in its allocatable."""
    names = {n for c in pod.containers_if_extended for n in c.extended}
    out = set()
    for name in names:
        if name not in mapping:
            continue
        have = node.allocatable.get(name)
        if have is None or have.value == 0:
            out.add(name)
    return frozenset(out)


def create_requests_and_mappings(
    pod: Pod, resources: frozenset[str], mapping: Mapping[str, str]
) -> tuple[tuple[DeviceRequest, ...], tuple[RequestMapping, ...]]:
    """Device requests for `resources` and which container uses which (upstream createRequestsAndMappings).

    Containers are indexed over init containers, then regular ones. Each long-lived
    container (regular, or a sidecar init container) gets `container-<i>-request-<r>`,
    r being the resource's index among the container's sorted request names. A plain
    init container first reuses the long-lived requests at its index and after (they
    run alongside it later, not at once); only the largest remainder is requested, and
    the other init containers' mappings are renamed to it.
    """
    containers = pod.containers_if_extended
    long_lived = [i for i, c in enumerate(containers) if not c.init or c.sidecar]
    short_lived = [i for i, c in enumerate(containers) if c.init and not c.sidecar]
    requests: list[DeviceRequest] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        class_name = mapping.get(resource)
        if class_name is None:
            continue
        long_requests: list[DeviceRequest | None] = [None] * len(containers)
        long_mappings: list[RequestMapping] = []
        for i in long_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, [])
            long_requests[i] = req
            long_mappings += maps
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for i in short_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, long_requests[i:])
            if req is not None:
                short_names.add(req.name)
                if largest is None or _count(largest) < _count(req):
                    largest = req
            short_mappings += maps
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest.name)
            short_mappings = [
                RequestMapping(m.container_name, m.resource_name, largest.name) if m.request_name in short_names else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in long_requests if r is not None]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: r.name)
    return tuple(requests), tuple(mappings)


def _count(request: DeviceRequest) -> int:
    return request.exactly.count if request.exactly is not None else 0


def _container_request(
    index: int, container: ContainerResources, resource: str, class_name: str, reusable: list[DeviceRequest | None]
) -> tuple[DeviceRequest | None, list[RequestMapping]]:
    wanted = container.extended.get(resource, 0)
    if wanted <= 0:
        return None, []
    mappings: list[RequestMapping] = []
    total = 0
    for other in reusable:
        if other is None:
            continue
        total += _count(other)
        mappings.append(RequestMapping(container.name, resource, other.name))
        if total >= wanted:
            return None, mappings
    name = f"container-{index}-request-{container.request_names.index(resource)}"
    request = DeviceRequest(name, ExactRequest(name, class_name, allocation_mode=MODE_EXACT_COUNT, count=wanted - total))
    mappings.append(RequestMapping(container.name, resource, name))
    return request, mappings


def is_extended_claim(claim: ResourceClaim) -> bool:
    """A claim made for a pod's extended resources (the tracker checks the pod is its controller)."""
    return claim.meta.annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true"


def in_memory_claim(pod: Pod, requests: tuple[DeviceRequest, ...]) -> ResourceClaim:
    """The claim to allocate before it exists (created at /bind with generateName)."""
    meta = ObjectMeta(
        name=pod.meta.name + IN_MEMORY_SUFFIX,
        namespace=pod.meta.namespace,
        uid=f"extended-resources:{pod.meta.uid}",
        annotations={EXTENDED_CLAIM_ANNOTATION: "true"},
    )
    return ResourceClaim(meta, requests)


def claim_manifest(pod: Pod, requests: tuple[DeviceRequest, ...]) -> dict[str, object]:
    """The ResourceClaim to create: generateName, the annotation, the pod as controller owner, no labels."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod.meta.name}-extended-resources-",
            "namespace": pod.meta.namespace,
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.meta.name,
                    "uid": pod.meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.exactly.device_class_name,
                            "allocationMode": "ExactCount",
                            "count": r.exactly.count,
                        },
                    }
                    for r in requests
                    if r.exactly is not None
                ]
            }
        },
    }


def claims_per_node(
    pod: Pod, claims: list[ResourceClaim], classes: Mapping[str, DeviceClass], nodes: Sequence[Node]
) -> list[tuple[list[ResourceClaim], list[str]]]:
    """(claims, node names) per group of nodes on which DRA serves the same extended resources.

    A node that advertises a resource leaves it to the device plugin;
    elsewhere the pod's requests for a class's resource become a claim
    allocated after the pod's own. An extended-resource claim that is already
    allocated is used as it is; an unallocated one (left by a failed bind) is
    replaced by the in-memory one.
    """
    if not pod.containers_if_extended:
        return [(claims, [n.name for n in nodes])]
    existing = next((c for c in claims if is_extended_claim(c)), None)
    if existing is not None and existing.allocation is not None:
        return [(claims, [n.name for n in nodes])]
    own = [c for c in claims if c is not existing]
    mapping = class_mapping(classes)
    by_resources: dict[frozenset[str], list[str]] = {}
    for node in nodes:
        by_resources.setdefault(dra_resources(pod, mapping, node), []).append(node.name)
    groups: list[tuple[list[ResourceClaim], list[str]]] = []
    for resources, names in by_resources.items():
        if not resources:
            groups.append((own, names))
            continue
        requests, _mappings = create_requests_and_mappings(pod, resources, mapping)
        groups.append(([*own, in_memory_claim(pod, requests)], names))
    return groups
