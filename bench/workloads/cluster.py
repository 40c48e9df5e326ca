"""The workloads' cluster: nodes, slices, the claim specs, and each pod with its claim (allocated or not)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from kubesim.objects import PAUSE, device_class, node_slice, pod

DRIVER = "test-driver.cdi.k8s.io"
CLASS = "test-class"
TEMPLATE = "test-claim-template"
NS = "default"
POD_CLAIM = "resource"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
TAINT_KEY = "example.com/maintenance"


SPECS: dict[str, dict[str, Any]] = {
    "template": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}},
    "toleration": {
        "devices": {
            "requests": [
                {
                    "name": "req-0",
                    "exactly": {
                        "deviceClassName": CLASS,
                        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                    },
                }
            ]
        }
    },
    "first_available": {
        "devices": {
            "requests": [
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {
                            "name": "large",
                            "deviceClassName": CLASS,
                            "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "large"'}}],
                        },
                        {"name": "any", "deviceClassName": CLASS},
                    ],
                }
            ]
        }
    },
}


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def base_objects(nodes: int, devices: int, *, taint_all: bool = False) -> list[dict[str, Any]]:
    """DeviceClass, template, Nodes and one ResourceSlice (pool) per node."""
    objs: list[dict[str, Any]] = [
        device_class(CLASS, DRIVER),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NS},
            "spec": {"spec": SPECS["template"]},
        },
    ]
    for i in range(nodes):
        node = node_name(i)
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        objs.append(resource_slice(i, devices))
    if taint_all:
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "maintenance-all"},
                "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": TAINT_KEY, "value": "planned", "effect": "NoSchedule"}},
            }
        )
    return objs


def resource_slice(i: int, devices: int, revision: int = 0) -> dict[str, Any]:
    devs = [
        {
            "name": f"instance-{j}",
            "attributes": {
                "model": {"string": "large" if j == 0 else "standard"},
                "index": {"int": j},
                "firmware": {"string": f"rev-{revision}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for j in range(devices)
    ]
    return node_slice(node_name(i), DRIVER, devs)


@dataclass
class PodClaim:
    """A pod and the claim kube-controller-manager generated for it from the template."""

    index: int
    spec_name: str
    name: str = ""
    uid: str = ""
    claim: str = ""

    def __post_init__(self) -> None:
        self.name = f"pod-{self.index:06d}"
        self.uid = f"00000000-0000-4000-8000-{self.index:012d}"
        self.claim = f"{self.name}-{POD_CLAIM}-{self.index % 99991:05x}"

    def pod(self, node: str | None = None) -> dict[str, Any]:
        claims = [{"name": POD_CLAIM, "resourceClaimTemplateName": TEMPLATE}]
        out = pod(self.name, NS, scheduler="dra-scheduler", image=PAUSE, node_name=node, meta={"uid": self.uid}, resourceClaims=claims)
        out["status"] = {"phase": "Pending", "resourceClaimStatuses": [{"name": POD_CLAIM, "resourceClaimName": self.claim}]}
        return out

    def claim_object(self, allocated: tuple[str, str] | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": self.claim,
                "namespace": NS,
                "annotations": {POD_CLAIM_NAME_ANNOTATION: POD_CLAIM},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid, "controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": json.loads(json.dumps(SPECS[self.spec_name])),
        }
        if allocated is not None:
            obj["status"] = allocation_status(self, *allocated)
        return obj

    def objects(self, allocated: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        return [self.claim_object(allocated), self.pod(allocated[0] if allocated else None)]


def new_shape_claim(pc: PodClaim, s: int) -> dict[str, Any]:
    """`pc`'s claim with a selector no pod had before (unique to this process): the first pod of a new shape."""
    claim = pc.claim_object()
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {
            "cel": {
                "expression": f'device.attributes["{DRIVER}"].index >= {s + 1} && device.attributes["{DRIVER}"].firmware != "never-{s}-{os.getpid()}"'
            }
        }
    ]
    return claim


def allocation_status(pc: PodClaim, node: str, device: str) -> dict[str, Any]:
    request = "req-0/any" if pc.spec_name == "first_available" else "req-0"
    return {
        "allocation": {
            "devices": {"results": [{"request": request, "driver": DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": pc.name, "uid": pc.uid}],
    }


def prefill(nodes: int, devices: int, per_node: int, spec: str, start: int) -> list[PodClaim]:
    """Bound pods with allocated claims: `per_node` devices taken on every node (upstream's init pods)."""
    out = []
    k = start
    for i in range(nodes):
        for j in range(per_node):
            pc = PodClaim(k, spec)
            pc.allocated = (node_name(i), f"instance-{devices - 1 - j}")  # type: ignore[attr-defined]
            out.append(pc)
            k += 1
    return out
