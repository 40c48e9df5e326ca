"""End to end: device binding conditions at /bind and /filter, against the fake API server.

Each test names the upstream case it mirrors (FACTS: TestPlugin in
dynamicresources_test.go). The extender's design differs from upstream's
PreBind wait (docs/kube-scheduler.md, "Binding conditions"): /bind answers an
error and keeps the allocation while conditions are pending, /filter rejects
every node until they are met.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import FakeApi, bind, filter_pod, serving, wait_converged, wait_for
from tests.e2e.harness import Extender
from tracker.timestamps import rfc3339

DRIVER = "gpu.example.com"
FINALIZER = "resource.kubernetes.io/delete-protection"


def objects(node_name: str, devices: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-slice"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "bindsToNode": True, "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}
                    for i in range(devices)
                ],
            },
        },
    ]


def claim_and_pod(api: FakeApi, name: str) -> dict[str, Any]:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        }
    )
    return api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulerName": "dra-scheduler",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            },
        }
    )


def set_condition(api: FakeApi, claim: str, device: str, node_name: str, ctype: str, status: str = "True") -> None:
    now = rfc3339()

    def change(obj: dict[str, Any]) -> None:
        cond = {"type": ctype, "status": status, "reason": "Driver", "message": f"{ctype} set by the driver", "lastTransitionTime": now}
        obj["status"]["devices"] = [{"driver": DRIVER, "pool": node_name, "device": device, "conditions": [cond]}]

    api.mutate("ResourceClaim", "default", claim, change, subresource="status")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[FakeApi, Extender]]:
    api = FakeApi()
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    for obj in objects("bc-a", 1) + objects("bc-b", 1):
        api.create(obj)
    with serving(api, "--placement-wait", "0", "--binding-timeout", "3") as ext:
        yield api, ext


def pod_events(api: FakeApi, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in api.list("Event") if e["involvedObject"]["name"] == name]


def claim_status(api: FakeApi, name: str) -> dict[str, Any]:
    return api.get("ResourceClaim", "default", name)["status"] if api.get("ResourceClaim", "default", name) else {}


def test_bound_only_once_ready(cluster) -> None:
    """Upstream `bind-claim-with-binding-conditions` and allocator `device-binding-conditions`, `node-restriction`."""
    api, ext = cluster
    pod = claim_and_pod(api, f"bc-ready-{uuid.uuid4().hex[:6]}")
    name = pod["metadata"]["name"]
    wait_converged(api, ext)
    assert filter_pod(ext, pod, ["bc-a"])["NodeNames"] == ["bc-a"]
    error = bind(ext, pod, "bc-a")
    assert "waiting for binding conditions for device on node bc-a" in error, error
    status = claim_status(api, name)
    (result,) = status["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == ["ready"] and result["bindingFailureConditions"] == ["failed"]
    # bindsToNode: the allocation is pinned to the node by name.
    assert status["allocation"]["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["bc-a"]}]}]
    }
    assert status["allocation"]["allocationTimestamp"]
    assert status["reservedFor"][0]["uid"] == pod["metadata"]["uid"]
    assert not api.get("Pod", "default", name)["spec"].get("nodeName")
    wait_for(
        lambda: ("Normal", "BindingConditionsPending", "waiting for binding conditions for device on node bc-a") in pod_events(api, name)
    )
    wait_converged(api, ext)
    # Pending: every node rejected, the pod waits.
    pending = filter_pod(ext, pod, ["bc-a", "bc-b"])
    assert pending["NodeNames"] == [] and "waiting for binding conditions" in pending["FailedAndUnresolvableNodes"]["bc-a"], pending
    set_condition(api, name, result["device"], "bc-a", "ready")
    wait_converged(api, ext)
    assert filter_pod(ext, pod, ["bc-a", "bc-b"])["NodeNames"] == ["bc-a"]
    assert bind(ext, pod, "bc-a") == ""
    assert api.get("Pod", "default", name)["spec"]["nodeName"] == "bc-a"


def test_failure_condition_deallocates(cluster) -> None:
    """Upstream `bound-claim-with-failed-binding`: Filter rejects, PostFilter deallocates; here /filter does both."""
    api, ext = cluster
    pod = claim_and_pod(api, f"bc-fail-{uuid.uuid4().hex[:6]}")
    name = pod["metadata"]["name"]
    wait_converged(api, ext)
    node = filter_pod(ext, pod, ["bc-a", "bc-b"])["NodeNames"][0]
    assert "waiting for binding conditions" in bind(ext, pod, node)
    device = claim_status(api, name)["allocation"]["devices"]["results"][0]["device"]
    set_condition(api, name, device, node, "failed")
    wait_converged(api, ext)
    rejected = filter_pod(ext, pod, ["bc-a", "bc-b"])
    assert rejected["NodeNames"] == []
    assert (
        f"device binding failed: claim={name}, reason=Driver, message=failed set by the driver"
        in rejected["FailedAndUnresolvableNodes"][node]
    )
    wait_for(lambda: not claim_status(api, name).get("allocation"), what="the claim deallocated")
    status = claim_status(api, name)
    assert not status.get("reservedFor") and not status.get("devices")
    assert FINALIZER not in (api.get("ResourceClaim", "default", name)["metadata"].get("finalizers") or [])
    assert any(t == "Warning" and "device binding failed" in m for t, _r, m in pod_events(api, name))
    wait_converged(api, ext)
    assert filter_pod(ext, pod, ["bc-a", "bc-b"])["NodeNames"]  # scheduled again, on any node


def test_timeout_deallocates(cluster) -> None:
    """Upstream `bound-claim-with-timed-out-binding` and `prebind-fail-with-binding-timeout` (--binding-timeout 3)."""
    api, ext = cluster
    pod = claim_and_pod(api, f"bc-late-{uuid.uuid4().hex[:6]}")
    name = pod["metadata"]["name"]
    wait_converged(api, ext)
    node = filter_pod(ext, pod, ["bc-a", "bc-b"])["NodeNames"][0]
    assert "waiting for binding conditions" in bind(ext, pod, node)
    # Nobody retries the pod: the extender's own timer deallocates when the timeout falls due.
    wait_for(lambda: not claim_status(api, name).get("allocation"), timeout=10, what="the claim deallocated after the timeout")
    assert any(t == "Warning" and m == "device binding timeout" for t, _r, m in pod_events(api, name))
