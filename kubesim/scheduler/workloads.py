"""What a run schedules: the workloads by name, and the cluster objects, prefill and pods each one creates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubesim.objects import GPU_GI, daemon_pods, device_class, heavy_metadata, heavy_node, heavy_pod, node_slice, partitioned_slices, rule
from kubesim.scheduler.config import CLASS, DELETE_PROTECTION, DRIVER, EXTENDED_RESOURCE, NAMESPACE, SCHEDULER_NAME, TEMPLATE


@dataclass
class Workload:
    """One run: a cluster of nodes x devices (one ResourceClaimTemplate, one device per pod), pods at a rate."""

    name: str
    nodes: int
    devices_per_node: int
    pods: int
    rate: float | None = None  # pods/s; None: all at once
    tainted_nodes: int = 0  # NoSchedule DeviceTaintRule over the devices of the first N nodes
    taint_removal: bool = False  # fill every untainted device, one more pod, then delete the rules
    timeout: float = 600.0
    settle: float = 3.0  # after the expected pods are bound: time to see any extra bind
    # "plain": devices_per_node whole devices; "partitions": per device a 40Gi GPU with partitions of
    # 10, 10, 10, 10, 20, 20, 40 Gi drawing on its shared counters (4 pods fit per GPU); "shares":
    # per device one 40Gi device shared by claims asking 10Gi each (4 pods fit per device).
    kind: str = "plain"
    extended_resources: bool = False  # pods ask for `example.com/device: 1` in their limits instead of a claim
    binding_delay: float | None = None  # devices have binding conditions; a fake driver sets them this long after allocation
    binding_failure_every: int = 0  # every Nth allocation the driver reports the failure condition instead (0: never)
    # Fake API server faults for the whole run (POST /_fake/faults), e.g. latency on claim status writes.
    api_faults: dict[str, Any] | None = None
    # Steady state (scheduler_perf's SteadyStateClusterResourceClaimTemplate): this share of the
    # devices is held by bound pods before the run; each pod created replaces the oldest bound pod,
    # deleted just before, whose claim the claim controller stand-in deallocates and deletes.
    steady_fill: float = 0.0
    # Steady state: pods scheduled (and churned) before the measured ones, as upstream's init pods go
    # through the scheduler: the extender has verdicts for the claim shape when the measurement starts.
    warm_up: int = 0
    # Objects as a real API server holds them (kubesim/objects.py: Node status and images, managedFields,
    # pods' status, two DaemonSet pods per node), so the extender's memory is what a real cluster costs.
    heavy: bool = False

    @property
    def capacity(self) -> int:
        per = 1 if self.kind == "plain" else 4
        return (self.nodes - self.tainted_nodes) * self.devices_per_node * per


WORKLOADS: dict[str, Workload] = {
    "small": Workload("small", 20, 5, 100, timeout=120),
    "100x10": Workload("100x10", 100, 10, 500, timeout=600),
    "500x10": Workload("500x10", 500, 10, 2500, timeout=1500),
    "100x10-20ps": Workload("100x10-20ps", 100, 10, 500, rate=20, timeout=600),
    "500x10-20ps": Workload("500x10-20ps", 500, 10, 2500, rate=20, timeout=1500),
    "competition": Workload("competition", 10, 10, 1000, timeout=600, settle=5),
    # timeout 360 s: long enough to see the 5-minute flush of unschedulable pods (checked every 30 s).
    "taint-removal": Workload("taint-removal", 10, 2, 19, tainted_nodes=1, taint_removal=True, timeout=360),
    # The issue-22 scale: 5,000 nodes x 8 devices, 2,500 pods created at once.
    "5000x8": Workload("5000x8", 5000, 8, 2500, timeout=1500, heavy=True),
    # The same cluster with 500 pods: the extender's CPU per pod bound in a shorter run (a shared machine).
    "5000x8-500": Workload("5000x8-500", 5000, 8, 500, timeout=900, heavy=True),
    # Upstream's SteadyStateClusterResourceClaimTemplate at the 99.5 % full and 20 pods/s.
    "steady-100x10": Workload("steady-100x10", 100, 10, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=300),
    "steady-1000x8": Workload("steady-1000x8", 1000, 8, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=300),
    "steady-5000x8": Workload("steady-5000x8", 5000, 8, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=600, heavy=True),
}
DEFAULT_WORKLOADS = ["small", "100x10", "500x10", "100x10-20ps", "500x10-20ps", "competition", "taint-removal"]


def node_name(i: int) -> str:
    return f"perf-node-{i}"


def _node_slices(w: Workload, node: str) -> list[dict[str, Any]]:
    if w.kind == "plain":
        binding = {"bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]} if w.binding_delay is not None else {}
        return [node_slice(node, DRIVER, [{"name": f"instance-{j}", **binding} for j in range(w.devices_per_node)])]
    if w.kind == "shares":
        shared = [
            {"name": f"shared-{j}", "allowMultipleAllocations": True, "capacity": {"memory": {"value": f"{GPU_GI}Gi"}}}
            for j in range(w.devices_per_node)
        ]
        return [node_slice(node, DRIVER, shared)]
    return partitioned_slices(node, DRIVER, w.devices_per_node)


def cluster_objects(w: Workload) -> list[dict[str, Any]]:
    request: dict[str, Any] = {"deviceClassName": CLASS}
    if w.kind == "shares":
        request["capacity"] = {"requests": {"memory": f"{GPU_GI // 4}Gi"}}
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        device_class(CLASS, DRIVER)
        | ({"spec": {**device_class(CLASS, DRIVER)["spec"], "extendedResourceName": EXTENDED_RESOURCE}} if w.extended_resources else {}),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}}},
        },
    ]
    for i in range(w.nodes):
        node = node_name(i)
        if w.heavy:
            objs.append(heavy_node(node))
            objs += [heavy_metadata(s, "dra-driver") for s in _node_slices(w, node)]
            objs += daemon_pods(node, i)
            continue
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
            }
        )
        objs += _node_slices(w, node)
    objs += taint_rules(w)
    prefill = steady_prefill(w)
    if w.heavy:
        prefill = [heavy_pod(o) if o["kind"] == "Pod" else heavy_metadata(o, "kube-controller-manager") for o in prefill]
    objs += prefill
    return objs


def steady_prefill(w: Workload) -> list[dict[str, Any]]:
    """Bound pods holding `steady_fill` of the devices, each with its allocated, reserved claim (the init pods)."""
    if not w.steady_fill or w.kind != "plain":
        return []
    objs: list[dict[str, Any]] = []
    for i in range(int(w.capacity * w.steady_fill)):
        node, device = node_name(i // w.devices_per_node), f"instance-{i % w.devices_per_node}"
        name, uid, claim = f"init-{i}", f"init-uid-{i}", f"init-{i}-dev-{i:05x}"
        pod = pod_object(0)
        pod["metadata"] = {"name": name, "namespace": NAMESPACE, "uid": uid}
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "resourceClaimStatuses": [{"name": "dev", "resourceClaimName": claim}]}
        objs.append(pod)
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim,
                    "namespace": NAMESPACE,
                    "finalizers": [DELETE_PROTECTION],
                    "annotations": {"resource.kubernetes.io/pod-claim-name": "dev"},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}
                    ],
                },
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": CLASS}}]}},
                "status": {
                    "allocation": {
                        "devices": {"results": [{"request": "dev", "driver": DRIVER, "pool": node, "device": device}]},
                        "nodeSelector": {
                            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                        },
                    },
                    "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
                },
            }
        )
    return objs


def taint_rules(w: Workload) -> list[dict[str, Any]]:
    return [
        rule(f"maintenance-{node_name(i)}", selector={"driver": DRIVER, "pool": node_name(i)}, key="example.com/maintenance")
        for i in range(w.tainted_nodes)
    ]


def pod_object(i: int, extended: bool = False, claims: bool = True) -> dict[str, Any]:
    """Pod `i` of a run; `claims=False`: the same pod without resource claims (the no-DRA ceiling)."""
    if not claims:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
            "spec": {"schedulerName": SCHEDULER_NAME, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }
    if extended:  # a DRA-backed extended resource: the claim is made by the scheduler at bind time
        container = {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {EXTENDED_RESOURCE: "1"}}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
            "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container]},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": TEMPLATE}],
        },
    }
