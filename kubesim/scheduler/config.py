"""Names, the watched collections and the two configurations of the model (scheduler, claim controller)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

NAMESPACE = "perf"
DRIVER = "dra.example.com"
CLASS = "devices"
TEMPLATE = "one-device"
EXTENDED_RESOURCE = "example.com/device"  # the DeviceClass's extendedResourceName in extended-resource workloads
SCHEDULER_NAME = "dra-scheduler"
EXTENDER = "Extender"  # the plugin name kube-scheduler records for extender rejections
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"

# Collections the scheduler watches: name -> (list path, requeues "Extender"-rejected pods).
WATCHED: dict[str, tuple[str, bool]] = {
    "Pod": ("/api/v1/pods", True),
    "Node": ("/api/v1/nodes", True),
    "PersistentVolume": ("/api/v1/persistentvolumes", True),
    "PersistentVolumeClaim": ("/api/v1/persistentvolumeclaims", True),
    "StorageClass": ("/apis/storage.k8s.io/v1/storageclasses", True),
    "CSINode": ("/apis/storage.k8s.io/v1/csinodes", True),
    "CSIDriver": ("/apis/storage.k8s.io/v1/csidrivers", True),
    "CSIStorageCapacity": ("/apis/storage.k8s.io/v1/csistoragecapacities", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1/resourceclaims", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", True),
    # Watched for the fit oracle only: kube-scheduler does not requeue extender-rejected pods on these.
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", False),
    "DeviceTaintRule": ("/apis/resource.k8s.io/v1beta2/devicetaintrules", False),
    "DeviceTaintRule.dra-extender": ("/apis/resource.dra-extender.io/v1alpha1/devicetaintrules", False),
}


def now() -> float:
    return time.monotonic()


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")


def short_reason(message: str) -> str:
    """A rejection or bind error with names and numbers blanked, to count reasons."""
    s = re.sub(r"\bpod-\d+-[\w-]+-\w{5}\b", "<claim>", message)
    s = re.sub(r"\bpod-\d+\b|\bperf-node-\d+\b", "<name>", s)
    return re.sub(r"\d+", "N", s)[:200]


@dataclass
class SchedulerConfig:
    """The KubeSchedulerConfiguration knobs the model honours (defaults as in 1.36)."""

    http_timeout: float = 5.0
    weight: int = 1
    percentage_of_nodes_to_score: int | None = None  # None or 0: adaptive
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    max_in_unschedulable: float = 300.0
    unschedulable_flush_interval: float = 30.0
    pop_from_backoff: bool = True
    scheduler_name: str = SCHEDULER_NAME
    seed: int | None = None


@dataclass
class ClaimControllerConfig:
    """The resourceclaim-controller stand-in: seconds after a pod appears, and its API client's rate limit.

    Two writes per pod (the claim, the pod's status), so `qps` / 2 pods/s
    at most. kube-controller-manager's default client limit is 20 qps,
    burst 30 (--kube-api-qps): 10 pods/s at most, below what the measured
    in-tree runs reached, so those clusters ran it faster; the real control
    planes this project measures on run it at 500 qps, burst 1000, and so
    does this default. The earlier 100 qps capped the extender's runs at 50
    pods/s once the machine could do more, while the no-op reference, whose
    pods never wait for a claim, ran past it: the ratio measured the stand-in
    (bench/results/issue-42-claim-controller-cap.md). `--claim-qps 20
    --claim-burst 30` models a default kcm.
    """

    delay: float = 0.5
    qps: float = 500.0
    burst: int = 1000
    workers: int = 10


def num_feasible_nodes_to_find(percentage: int | None, num_all: int) -> int:
    """schedule_one.go numFeasibleNodesToFind (minFeasibleNodesToFind 100, minimum percentage 5)."""
    if num_all < 100:
        return num_all
    p = percentage or 0
    if p == 0:
        p = max(5, 50 - num_all // 125)
    return max(100, num_all * p // 100)
