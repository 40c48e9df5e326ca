"""End to end: DRA-backed extended resources at /filter and /bind, against the fake API server.

Mirrors docs/kube-scheduler.md#extended-resources-backed-by-dra (a DeviceClass with `extendedResourceName`,
a node with two such devices and no such allocatable, three pods asking for
one each: two bound, each with a claim; the third rejected) and upstream's
plugin cases named per test.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from allocator.extended_resources import EXTENDED_CLAIM_ANNOTATION
from kubesim.objects import device_class, gpu_slice, node
from tests.e2e.cluster import FakeApi, bind, cluster_extender, filter_pod, serving, wait_converged, wait_for
from tests.e2e.harness import Extender

DRIVER = "gpu.example.com"
RESOURCE = "example.com/gpu"
FINALIZER = "resource.kubernetes.io/delete-protection"


def er_pod(name: str, resources: dict[str, int], *, init: dict[str, int] | None = None) -> dict[str, Any]:
    def container(cname: str, wants: dict[str, int]) -> dict[str, Any]:
        return {"name": cname, "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {k: str(v) for k, v in wants.items()}}}

    spec: dict[str, Any] = {"schedulerName": "dra-scheduler", "containers": [container("main", resources)]}
    if init:
        spec["initContainers"] = [container("setup", init)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[FakeApi, Extender]]:
    api = FakeApi()
    api.create(device_class("gpu", DRIVER, extended_resource=RESOURCE))
    for name in ("er-a", "er-plugin"):
        api.create(node(name, hostname=True))
    # er-plugin advertises the resource natively: a device plugin serves it there.
    api.mutate("Node", None, "er-plugin", lambda n: n.setdefault("status", {}).update(allocatable={RESOURCE: "4"}), subresource="status")
    api.create(gpu_slice("er-a", 2, name="er-a-slice"))
    with serving(api, "--placement-wait", "0") as ext:
        yield api, ext


def claims_of(api: FakeApi, pod_name: str) -> list[dict[str, Any]]:
    return [c for c in api.list("ResourceClaim") if c["metadata"]["name"].startswith(f"{pod_name}-extended-resources-")]


def test_three_pods_two_devices_as_in_tree(cluster) -> None:
    """The documented case (upstream `extended-resource-name-with-resources`): two pods bound with a claim each, the third not."""
    api, ext = cluster
    pods = [api.create(er_pod(f"er-{i}", {RESOURCE: 1})) for i in range(3)]
    for p in pods[:2]:
        result = filter_pod(ext, p, ["er-a"])
        assert result["NodeNames"] == ["er-a"], result
        assert bind(ext, p, "er-a") == ""
        wait_converged(api, ext)
    for p in pods[:2]:
        name = p["metadata"]["name"]
        (claim,) = claims_of(api, name)
        meta = claim["metadata"]
        assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
        assert meta["ownerReferences"][0] | {} == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "uid": p["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert FINALIZER in meta["finalizers"]
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [r["request"] for r in results] == ["container-0-request-0"]
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": p["metadata"]["uid"]}]
        bound = api.get("Pod", "default", name)
        assert bound["spec"]["nodeName"] == "er-a"
        assert bound["status"]["extendedResourceClaimStatus"] == {
            "requestMappings": [{"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-0"}],
            "resourceClaimName": meta["name"],
        }
    third = pods[2]
    result = filter_pod(ext, third, ["er-a"])
    assert result["NodeNames"] == [] and "er-a" in result["FailedAndUnresolvableNodes"], result
    assert "cannot bind" in bind(ext, third, "er-a")
    assert claims_of(api, "er-2") == []
    assert not (api.get("Pod", "default", "er-2")["spec"].get("nodeName"))


def test_device_plugin_wins_where_the_node_advertises_the_resource(cluster) -> None:
    """Upstream `extended-resource-name-with-node-resource`: no claim on a node with allocatable > 0."""
    api, ext = cluster
    p = api.create(er_pod("er-plugin-pod", {RESOURCE: 1}))
    result = filter_pod(ext, p, ["er-plugin"])
    assert result["NodeNames"] == ["er-plugin"], result
    assert bind(ext, p, "er-plugin") == ""
    assert claims_of(api, "er-plugin-pod") == []
    assert api.get("Pod", "default", "er-plugin-pod")["spec"]["nodeName"] == "er-plugin"


def test_implicit_name_and_bind_failure_deletes_the_claim(cluster) -> None:
    """Upstream `implicit-extended-resource-name-with-resources` and `...-bind-failure`: the claim made is deleted."""
    api, ext = cluster
    implicit = "deviceclass.resource.kubernetes.io/gpu"
    api.create(node("er-c", hostname=True))
    api.create(gpu_slice("er-c", 1, name="er-c-slice"))
    p = api.create(er_pod("er-implicit", {implicit: 1}))
    wait_converged(api, ext)
    # Bound elsewhere meanwhile: creating the Binding fails after the claim was written.
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "er-implicit"}, "target": {"kind": "Node", "name": "er-plugin"}}
    assert api.http.post("/api/v1/namespaces/default/pods/er-implicit/binding", json=binding).status_code == 201
    error = bind(ext, p, "er-c")
    assert "creating the Binding" in error, error
    wait_for(lambda: claims_of(api, "er-implicit") == [], what="the extended-resource claim deleted")


def test_source_mode_creates_the_claim_in_its_overlay(tmp_path) -> None:
    """`--source DIR`: the claim made at /bind lives in the in-memory overlay; /debug/devices shows the device taken by it."""
    import yaml

    pod = er_pod("src-pod", {RESOURCE: 1})
    pod["metadata"]["uid"] = "src-pod-uid"
    docs = [
        device_class("gpu", DRIVER, extended_resource=RESOURCE),
        node("src-a", hostname=True),
        gpu_slice("src-a", 1, name="src-a-slice"),
        pod,
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(docs))
    ext = Extender("--source", str(tmp_path), "--placement-wait", "0")
    try:
        ext.wait_ready()
        assert filter_pod(ext, pod, ["src-a"])["NodeNames"] == ["src-a"]
        assert bind(ext, pod, "src-a") == ""
        devices = ext.http.get("/debug/devices", params={"node": "src-a"}).json()["items"]
        (taken,) = [d["allocatedTo"] for d in devices]
        assert taken.startswith("default/src-pod-extended-resources-"), devices
        # A second pod finds the only device taken by that claim.
        other = er_pod("src-other", {RESOURCE: 1})
        other["metadata"]["uid"] = "src-other-uid"
        result = filter_pod(ext, other, ["src-a"])
        assert result["NodeNames"] == [] and "1 allocated" in result["FailedAndUnresolvableNodes"]["src-a"], result
    finally:
        ext.stop()


def test_kubectl_dra_why_knows_extended_resources(cluster) -> None:
    """`kubectl dra why` gives /filter's answers for a pod asking for a DRA-backed extended resource."""
    from tests.e2e.test_kubectl_dra import dra, dra_json

    api, ext = cluster
    p = api.create(er_pod("er-why", {RESOURCE: 3}))
    wait_converged(api, ext)
    nodes = sorted(n["metadata"]["name"] for n in api.list("Node"))
    result = filter_pod(ext, p, nodes)
    filtered: dict[str, str | None] = {n: None for n in result["NodeNames"]}
    filtered.update(result["FailedAndUnresolvableNodes"])
    assert filtered["er-plugin"] is None and filtered["er-a"] is not None, filtered  # device plugin there; too few devices here
    assert dra_json(api, "why", "er-why")["nodes"] == filtered
    text = dra(api, "why", "er-why").stdout
    assert "uses no DRA device" not in text and "no resource claims" not in text, text  # it does use one


@pytest.mark.parametrize(
    ("name", "verb", "path"),
    [
        # Upstream `extended-resource-name-with-resources-claim-creation-failure`: nothing is left behind.
        ("claim-creation-failure", "create", "resourceclaims"),
        # The pod's status patch fails after the claim was allocated: the claim is deleted (Unreserve).
        ("pod-status-failure", "patch", "pods"),
    ],
)
def test_write_failures_leave_no_claim(cluster, name: str, verb: str, path: str) -> None:
    api, ext = cluster
    api.create(node(f"er-{name}", hostname=True))
    api.create(gpu_slice(f"er-{name}", 1, name=f"er-{name}-slice"))
    p = api.create(er_pod(f"er-{name}-pod", {RESOURCE: 1}))
    wait_converged(api, ext)
    api.faults(error_rate=1.0, error_status=500, verbs=[verb], paths=[path])
    try:
        error = bind(ext, p, f"er-{name}")
    finally:
        api.clear_faults()
    assert error, "the bind should fail"
    wait_for(lambda: claims_of(api, f"er-{name}-pod") == [], what="no claim left behind")
    assert not api.get("Pod", "default", f"er-{name}-pod")["spec"].get("nodeName")
    # The device is free again: the pod binds on its retry.
    wait_converged(api, ext)
    assert bind(ext, p, f"er-{name}") == ""


def test_noexecute_taint_evicts_an_extended_resource_pod() -> None:
    """Eviction knows these claims: a NoExecute taint on the device of a pod's extended-resource claim deletes the pod."""
    api = FakeApi()
    api.create(device_class("gpu", DRIVER, extended_resource=RESOURCE))
    api.create(node("ev-a", hostname=True))
    api.create(gpu_slice("ev-a", 1, name="ev-a-slice"))
    ext = cluster_extender(api, "--placement-wait", "0", "--evict-upstream", command="all")
    try:
        ext.wait_ready()
        p = api.create(er_pod("ev-pod", {RESOURCE: 1}))
        wait_converged(api, ext)
        assert bind(ext, p, "ev-a") == ""
        wait_converged(api, ext)

        def taint(obj: dict[str, Any]) -> None:
            obj["spec"]["devices"][0]["taints"] = [{"key": "example.com/broken", "effect": "NoExecute"}]

        api.mutate("ResourceSlice", None, "ev-a-slice", taint)
        wait_for(lambda: api.get("Pod", "default", "ev-pod") is None, timeout=15, what="the pod evicted")
    finally:
        ext.stop()
        api.stop()


def test_stale_claim_is_replaced(cluster) -> None:
    """Upstream `extended-resource-name-with-resources-has-claim`: an unallocated claim left for the pod is deleted, a new one made."""
    api, ext = cluster
    api.create(node("er-stale", hostname=True))
    api.create(gpu_slice("er-stale", 1, name="er-stale-slice"))
    p = api.create(er_pod("er-stale-pod", {RESOURCE: 1}))
    meta = p["metadata"]
    stale = api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "er-stale-pod-extended-resources-old",
                "namespace": "default",
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}],
            },
            "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu", "count": 5}}]}},
        }
    )
    wait_converged(api, ext)
    assert filter_pod(ext, p, ["er-stale"])["NodeNames"] == ["er-stale"]  # judged with the pod's own requests, not the stale ones
    assert bind(ext, p, "er-stale") == ""
    (claim,) = claims_of(api, "er-stale-pod")
    assert claim["metadata"]["name"] != stale["metadata"]["name"]
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "er-stale"


def test_restart_between_the_claim_allocation_and_the_pod_status_patch_still_writes_the_mapping() -> None:
    """The extender is killed (SIGKILL: nothing undone) after the claim it made is allocated, before the pod's status is patched.

    The restarted extender reuses the allocated claim and must still write
    `status.extendedResourceClaimStatus`: the kubelet takes the claim and the
    container -> request mapping from it.
    """
    api = FakeApi()
    api.create(device_class("gpu", DRIVER, extended_resource=RESOURCE))
    api.create(node("rs-a", hostname=True))
    api.create(gpu_slice("rs-a", 1, name="rs-a-slice"))
    first = cluster_extender(api, "--placement-wait", "0")
    second = None
    try:
        first.wait_ready()
        p = api.create(er_pod("rs-pod", {RESOURCE: 1}))
        wait_converged(api, first)
        # The pod's status patch is held at the API server until the extender's connection goes (then dropped).
        api.faults(latency_ms=60_000, verbs=["patch"], paths=[r"/pods/rs-pod/status$"])
        answers: list[str] = []

        def bind_until_killed() -> None:
            try:
                answers.append(bind(first, p, "rs-a"))
            except httpx.TransportError as e:
                answers.append(f"connection lost: {e}")

        binding = threading.Thread(target=bind_until_killed)
        binding.start()
        wait_for(lambda: any((c.get("status") or {}).get("allocation") for c in claims_of(api, "rs-pod")), what="the claim allocated")
        first.proc.kill()
        first.proc.wait(10)
        binding.join(15)
        assert answers and answers[0].startswith("connection lost"), answers
        api.clear_faults()
        (claim,) = claims_of(api, "rs-pod")
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "rs-pod", "uid": p["metadata"]["uid"]}]
        assert "extendedResourceClaimStatus" not in (api.get("Pod", "default", "rs-pod").get("status") or {})

        second = cluster_extender(api, "--placement-wait", "0")
        second.wait_ready()
        wait_converged(api, second)
        assert filter_pod(second, p, ["rs-a"])["NodeNames"] == ["rs-a"]
        assert bind(second, p, "rs-a") == ""
        bound = api.get("Pod", "default", "rs-pod")
        assert bound["spec"]["nodeName"] == "rs-a"
        assert bound["status"].get("extendedResourceClaimStatus") == {
            "requestMappings": [{"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-0"}],
            "resourceClaimName": claim["metadata"]["name"],
        }
        assert [c["metadata"]["name"] for c in claims_of(api, "rs-pod")] == [claim["metadata"]["name"]]  # reused, not made again
    finally:
        if second is not None:
            second.stop()
        first.stop()
        api.stop()
