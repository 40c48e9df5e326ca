"""Cluster objects the tests, the benchmarks and the kube-scheduler model seed: nodes, device classes,
node-local slices, claims and pods as raw API objects, lean (what the extender reads) or heavy (as a
real API server lists them). One set of builders, so that a test's objects say what differs from the
plain ones in keyword arguments instead of in a copy of the whole object."""

from __future__ import annotations

import zlib
from typing import Any

PAUSE = "registry.k8s.io/pause:3.10"
HOSTNAME = "kubernetes.io/hostname"


def node(name: str, labels: dict[str, str] | None = None, *, hostname: bool = False) -> dict[str, Any]:
    """A Node; `metadata.labels` only when `labels` is given or `hostname` (kubelet's hostname label) is asked for."""
    meta: dict[str, Any] = {"name": name}
    if hostname or labels is not None:
        meta["labels"] = {**({HOSTNAME: name} if hostname else {}), **(labels or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def gpus(
    count: int,
    *,
    model: str | None = None,
    index: bool = False,
    memory: str | None = None,
    taints: dict[int, list[dict[str, Any]]] | None = None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """`count` devices gpu-0.. with a `model` string and/or an `index` int attribute, a `memory` capacity,
    the `taints` of the devices named by index, and any other device `fields` on each."""
    devices = []
    for i in range(count):
        d: dict[str, Any] = {"name": f"gpu-{i}"}
        attributes: dict[str, Any] = {}
        if model is not None:
            attributes["model"] = {"string": model}
        if index:
            attributes["index"] = {"int": i}
        if attributes:
            d["attributes"] = attributes
        if memory is not None:
            d["capacity"] = {"memory": {"value": memory}}
        if taints and i in taints:
            d["taints"] = taints[i]
        devices.append({**d, **fields})
    return devices


def gpu_slice(
    node_name: str,
    count: int,
    *,
    driver: str = "gpu.example.com",
    name: str | None = None,
    pool: str | None = None,
    generation: int = 1,
    **device: Any,
) -> dict[str, Any]:
    """A node-local slice of `count` GPUs (`gpus`: `device` holds its keywords): named `<node>-<driver>`
    and pooled by node unless `name`/`pool` say otherwise, one slice in its pool."""
    out = node_slice(node_name, driver, gpus(count, **device))
    if name is not None:
        out["metadata"]["name"] = name
    out["spec"]["pool"] = {"name": pool or node_name, "generation": generation, "resourceSliceCount": 1}
    return out


def claim(
    name: str,
    namespace: str = "default",
    *,
    device_class: str = "gpu",
    request: str = "gpu",
    count: int | None = None,
    exactly: dict[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A ResourceClaim with one request (`request`) for a device of `device_class`; `count` spells out
    ExactCount, `exactly` adds request fields (selectors, tolerations, ...); `metadata` adds fields
    (uid, resourceVersion, ...)."""
    request_fields: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        request_fields.update(allocationMode="ExactCount", count=count)
    request_fields.update(exactly or {})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"devices": {"requests": [{"name": request, "exactly": request_fields}]}},
    }


def pod(
    name: str,
    namespace: str = "default",
    *,
    claims: dict[str, str] | None = None,
    use_claims: bool = False,
    scheduler: str | None = None,
    image: str = "x",
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
    phase: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod with one container `c`; `claims` maps its resourceClaims' names to the claims they name
    (`use_claims`: the container uses each); `scheduler` its schedulerName, `node_name` its node,
    `meta` more metadata (uid, annotations, ...), `phase` its status; `spec` adds or replaces spec
    fields (containers, volumes, ...)."""
    container: dict[str, Any] = {"name": "c", "image": image}
    if claims and use_claims:
        container["resources"] = {"claims": [{"name": n} for n in claims]}
    body: dict[str, Any] = {}
    if scheduler is not None:
        body["schedulerName"] = scheduler
    body["containers"] = [container]
    if claims:
        body["resourceClaims"] = [{"name": n, "resourceClaimName": c} for n, c in claims.items()]
    if node_name:
        body["nodeName"] = node_name
    body.update(spec)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, **(meta or {})}
    if labels is not None:
        metadata["labels"] = labels
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


RULE_GROUP = "resource.k8s.io"  # upstream's DeviceTaintRule; the project's own is OUR_RULE_GROUP's v1alpha1
OUR_RULE_GROUP = "resource.dra-extender.io"


def rule(
    name: str,
    effect: str = "NoSchedule",
    *,
    selector: dict[str, Any] | None = None,
    key: str = "example.com/broken",
    group: str | None = RULE_GROUP,
    version: str | None = None,
    spec: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    **taint: Any,
) -> dict[str, Any]:
    """A DeviceTaintRule tainting with `key` and `effect` (`taint` adds value, timeAdded, ...) the devices
    `selector` (its deviceSelector; none when None) picks. `group`: upstream's (v1beta2) or the project's
    (v1alpha1) unless `version` says; None leaves apiVersion and kind out (what the state's intake reads).
    `spec` stands for the whole spec (a validation test's own); `meta` adds metadata."""
    if spec is None:
        spec = {"taint": {"key": key, "effect": effect, **taint}}
        if selector is not None:
            spec = {"deviceSelector": selector, **spec}
    out: dict[str, Any] = {"metadata": {"name": name, **(meta or {})}, "spec": spec}
    if group is None:
        return out
    version = version or ("v1alpha1" if group == OUR_RULE_GROUP else "v1beta2")
    return {"apiVersion": f"{group}/{version}", "kind": "DeviceTaintRule", **out}


def device_class(name: str, driver: str, *, extended_resource: str | None = None) -> dict[str, Any]:
    """A DeviceClass selecting every device of `driver`; `extended_resource` its extendedResourceName (KEP-5004)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def node_slice(node: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A node-local ResourceSlice: one pool per node, named after it, generation 1, one slice."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def uuid_slice(node: str, driver: str, devices: int, *, index: bool = False) -> dict[str, Any]:
    """`<node>-gpus`: gpu-<i> with attribute uuid GPU-<node>-<i> (and `index` <i>), as health alerts name GPUs."""
    items = [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}, **({"index": {"int": i}} if index else {})}}
        for i in range(devices)
    ]
    out = node_slice(node, driver, items)
    out["metadata"]["name"] = f"{node}-gpus"
    return out


PARTITIONS_GI = (10, 10, 10, 10, 20, 20, 40)  # per GPU; first-fit takes the four 10Gi ones, then the counters are spent
GPU_GI = 40


def partitioned_slices(node: str, driver: str, gpus: int) -> list[dict[str, Any]]:
    """A node's pool of `gpus` partitionable GPUs: a device slice (7 partitions per GPU, each consuming
    its GPU's counters) and a counter-set slice (one 40Gi set per GPU), as drivers publish MIG-style layouts."""
    devices = []
    counter_sets = []
    for g in range(gpus):
        counter_sets.append({"name": f"gpu-{g}", "counters": {"memory": {"value": f"{GPU_GI}Gi"}}})
        for p, size in enumerate(PARTITIONS_GI):
            devices.append(
                {
                    "name": f"gpu-{g}-part-{p}",
                    "capacity": {"memory": {"value": f"{size}Gi"}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": f"{size}Gi"}}}],
                }
            )
    dev_slice = node_slice(node, driver, devices)
    counters = node_slice(node, driver, [])
    counters["metadata"]["name"] = f"{node}-{driver}-counters"
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = counter_sets
    for s in (dev_slice, counters):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    return [dev_slice, counters]


# --------------------------------------------------------------------------- objects as heavy as a real API server's

# What a 1.36 API server returns is much more than what the extender reads: managedFields on every
# object, a Node's whole status (conditions, addresses, capacity, nodeInfo, the images it has pulled),
# a Pod's conditions and container statuses. The benches build their objects `heavy` so that memory
# measured against them predicts a real cluster's (a lean Node is ~0.2 KB of JSON, a real one ~12 KB).

_TIME = "2026-11-20T10:00:00Z"


def _h(*parts: Any) -> int:
    """A stable number for made-up uids and digests (hash() differs per process)."""
    return zlib.crc32(repr(parts).encode())


def managed_fields(manager: str, fields: dict[str, Any], *, subresource: str = "", operation: str = "Update") -> dict[str, Any]:
    """One managedFields entry as the API server records it (fieldsV1 in its `f:` form)."""
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": _TIME,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _fields_of(obj: Any) -> dict[str, Any]:
    """An `f:` tree of `obj`'s fields (lists as one `.` entry), as fieldsV1 would record them."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields_of(v) for k, v in obj.items()}
    return {}


_IMAGES = [
    ("registry.k8s.io/kube-proxy", "v1.36.0", 31_000_000),
    ("registry.k8s.io/pause", "3.10", 320_000),
    ("docker.io/calico/node", "v3.29.1", 142_000_000),
    ("docker.io/calico/cni", "v3.29.1", 95_000_000),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.0", 180_000_000),
    ("nvcr.io/nvidia/cloud-native/k8s-dra-driver-gpu", "v25.8.0", 210_000_000),
    ("nvcr.io/nvidia/cuda", "12.8.0-base-ubuntu24.04", 105_000_000),
    ("nvcr.io/nvidia/pytorch", "25.01-py3", 9_800_000_000),
    ("quay.io/prometheus/node-exporter", "v1.8.2", 11_000_000),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.12.0", 10_000_000),
    ("docker.io/fluent/fluent-bit", "3.2.2", 36_000_000),
    ("registry.k8s.io/coredns/coredns", "v1.12.0", 20_000_000),
]


def heavy_node(name: str, labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as a 1.36 API server lists it: kubelet's labels, annotations, status and managedFields."""
    i = _h(name)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu-8x.large",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": f"region-1{'abc'[i % 3]}",
        "nvidia.com/gpu.present": "true",
        **(labels or {}),
    }
    capacity = {
        "cpu": "64",
        "ephemeral-storage": "1055762868Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "263855428Ki",
        "pods": "110",
    }
    allocatable = {**capacity, "cpu": "63500m", "memory": "261655428Ki", **(allocatable or {})}
    conditions = [
        {"type": t, "status": s, "lastHeartbeatTime": _TIME, "lastTransitionTime": _TIME, "reason": r, "message": m}
        for t, s, r, m in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]
    status = {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": f"10.{i % 250}.{len(name)}.{i % 200}"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": f"{i:032x}",
            "systemUUID": f"{i:08x}-0000-4000-8000-{i:012x}",
            "bootID": f"{i + 1:08x}-0000-4000-8000-{i:012x}",
            "kernelVersion": "6.8.0-49-generic",
            "osImage": "Ubuntu 24.04.1 LTS",
            "containerRuntimeVersion": "containerd://2.0.1",
            "kubeletVersion": "v1.36.0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [{"names": [f"{repo}@sha256:{_h(repo):064x}", f"{repo}:{tag}"], "sizeBytes": size} for repo, tag, size in _IMAGES],
        "config": {},
        "runtimeHandlers": [{"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}],
    }
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": f'{{"csi.example.com":"{name}"}}',
    }
    spec = {"podCIDR": f"10.244.{i % 256}.0/24", "podCIDRs": [f"10.244.{i % 256}.0/24"], "providerID": f"cloud://region-1/{name}"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"{i:08x}-1111-4000-8000-{i:012x}",
            "resourceVersion": "1",
            "creationTimestamp": _TIME,
            "labels": labels,
            "annotations": annotations,
            "managedFields": [
                managed_fields("kubelet", {"f:metadata": _fields_of({"annotations": annotations, "labels": labels})}),
                managed_fields("kube-controller-manager", {"f:spec": _fields_of(spec)}),
                managed_fields("kubelet", {"f:status": _fields_of(status)}, subresource="status"),
            ],
        },
        "spec": spec,
        "status": status,
    }


def heavy_metadata(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    """`obj` with what the API server adds to every object: uid, creationTimestamp and managedFields for its spec and status."""
    meta = obj["metadata"]
    meta.setdefault("uid", f"{_h(obj['kind'], meta.get('namespace'), meta['name']):032x}")
    meta.setdefault("creationTimestamp", _TIME)
    entries = [managed_fields(manager, {"f:spec": _fields_of(obj.get("spec") or {})}, operation="Apply")]
    if obj.get("status"):
        entries.append(managed_fields(manager, {"f:status": _fields_of(obj["status"])}, subresource="status"))
    meta["managedFields"] = entries
    return obj


def heavy_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` (a dict with metadata and spec) with a kubelet's status, defaults and managedFields, as listed."""
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault(
        "tolerations",
        [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    )
    for c in spec.get("containers", []):
        c.setdefault("resources", {})
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault(
            "volumeMounts", [{"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
        )
    spec.setdefault(
        "volumes",
        [
            {
                "name": "kube-api-access",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]
                            }
                        },
                    ],
                },
            }
        ],
    )
    status = pod.setdefault("status", {})
    if spec.get("nodeName"):
        status["phase"] = "Running"
        status["conditions"] = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _TIME}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
        status["hostIP"] = "10.0.0.1"
        status["hostIPs"] = [{"ip": "10.0.0.1"}]
        status["podIP"] = "10.244.0.10"
        status["podIPs"] = [{"ip": "10.244.0.10"}]
        status["startTime"] = _TIME
        status["qosClass"] = "BestEffort"
        status["containerStatuses"] = [
            {
                "name": c["name"],
                "state": {"running": {"startedAt": _TIME}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": f"{c.get('image', '')}@sha256:{_h(c.get('image', '')):064x}",
                "containerID": f"containerd://{_h(pod['metadata']['name'], c['name']):064x}",
                "started": True,
                "volumeMounts": c["volumeMounts"],
            }
            for c in spec.get("containers", [])
        ]
    pod["metadata"].setdefault("labels", {"app": pod["metadata"]["name"].rsplit("-", 1)[0]})
    heavy_metadata(pod, "kube-controller-manager")
    pod["metadata"]["managedFields"].append(managed_fields("kube-scheduler", {"f:status": {"f:conditions": {}}}, subresource="status"))
    return pod


def daemon_pods(node: str, index: int) -> list[dict[str, Any]]:
    """The DaemonSet pods every real node runs (a CNI agent and kube-proxy), without claims: the extender lists but ignores them."""
    pods = []
    for ds, image in (("kube-proxy", "registry.k8s.io/kube-proxy:v1.36.0"), ("calico-node", "docker.io/calico/node:v3.29.1")):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{ds}-{index:05x}",
                "namespace": "kube-system",
                "labels": {"k8s-app": ds, "controller-revision-hash": "7d9f8c6b5", "pod-template-generation": "1"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": ds,
                        "uid": f"{_h(ds):032x}",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "hostNetwork": True,
                "priorityClassName": "system-node-critical",
                "containers": [
                    {"name": ds, "image": image, "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}
                ],
            },
        }
        pods.append(heavy_pod(pod))
    return pods
