"""End to end: `dra-extender serve --kubeconfig` against the fake API server (kubesim/fakeapi).

Everything goes through real HTTP on both sides: the tests change objects
through the fake server's REST API (as kubectl would), drive the extender
with the scheduler's wire format, and read the extender's writes back from
the server. Two module-scoped fake clusters, each loaded with the demo
(examples/demo-cluster): `live` for decisions and Events (tests undo what
they change; a `--source` extender over the same manifests runs beside it),
`binding` for /bind, where every test allocates on nodes or claims of its
own. Tests that need a differently started extender start their own.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from allocator.types import TOLERATIONS_ANNOTATION
from extender.bind.binder import BIND_ATTEMPTS
from extender.requeue import REQUEUE_ANNOTATION
from kubesim.objects import PAUSE, claim, gpu_slice, node, pod, rule
from tests.e2e.cluster import CRD_GROUP, FakeApi, cluster_extender, extender_view, serving, wait_converged, wait_for
from tests.e2e.harness import DEMO, DEMO_UIDS, Extender, demo_pod_args, filter_args
from tracker.timestamps import rfc3339

ALL = ["node-a", "node-b", "node-c"]
DEMO_PODS = ["trainer", "maintenance-job", "pair", "templated", "plain", "gpu-and-nic"]
GPU = "gpu.example.com"
FINALIZER = "resource.kubernetes.io/delete-protection"
BROKEN_CEL = f'device.attributes["{GPU}"].nosuch == 1'  # an unknown attribute: a runtime error per device


def start(*extenders: Extender) -> None:
    for ext in extenders:  # started together, so their start-up overlaps
        ext.wait_ready()


def filter_ok(ext: Extender, body: dict[str, Any]) -> dict[str, Any]:
    resp = ext.post("filter", body)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["Error"] == "", result
    return result


def reasons(ext: Extender, body: dict[str, Any]) -> dict[str, str | None]:
    """node -> None when it passes, else its reason."""
    result = filter_ok(ext, body)
    out: dict[str, str | None] = {n: None for n in result["NodeNames"]}
    out.update(result["FailedAndUnresolvableNodes"])
    assert not result["FailedNodes"]  # device reasons are never preemptible (docs/design.md#which-map)
    return out


# ----------------------------------------------------------------------------- object builders


def taint_rule(api_version: str, name: str, pool: str, key: str, effect: str = "NoSchedule") -> dict[str, Any]:
    group, version = api_version.split("/")
    return rule(name, effect, group=group, version=version, selector={"driver": GPU, "pool": pool}, key=key, value="e2e")


def gpu_pod(name: str, claim_name: str) -> dict[str, Any]:
    return pod(name, claims={"gpu": claim_name}, use_claims=True, scheduler="dra-scheduler", image=PAUSE)


def pod_args(name: str, claim_name: str, nodes: list[str], uid: str | None = None) -> dict[str, Any]:
    return filter_args(name, [{"name": "gpu", "resourceClaimName": claim_name}], nodes, uid=uid)


def bind_args(name: str, uid: str, node_name: str) -> dict[str, Any]:
    return {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node_name}


def micro_now() -> str:
    return rfc3339(micro=True)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[FakeApi, Extender, Extender]]:
    """The demo in a fake cluster, its cluster-mode extender, and a `--source` extender over the same manifests."""
    api = FakeApi(DEMO)
    # These tests ask /filter what-if questions and seldom bind: with the placement gate on,
    # a pod filtered moments earlier would hold back nodes (or delay answers) for the next.
    ext = cluster_extender(api, "--placement-wait", "0")
    offline = Extender("--source", str(DEMO), "--placement-wait", "0")
    try:
        start(ext, offline)
        wait_converged(api, ext)
        yield api, ext, offline
    finally:
        for e in (ext, offline):
            e.stop()
        api.stop()


@pytest.fixture(scope="module")
def binding() -> Iterator[tuple[FakeApi, Extender]]:
    api = FakeApi(DEMO)
    with serving(api) as ext:
        yield api, ext


# ----------------------------------------------------------------------------- demo parity


def test_demo_parity_with_source_mode(live) -> None:
    """The same manifests served from the API server and from a directory give the same answers."""
    _, ext, offline = live
    for name in DEMO_PODS:
        for nodes in [ALL, *([n] for n in ALL)]:
            body = demo_pod_args(name, nodes)
            for verb in ("filter", "prioritize"):
                cluster, directory = ext.post(verb, body), offline.post(verb, body)
                assert cluster.status_code == directory.status_code == 200
                assert cluster.json() == directory.json(), f"{verb} {name} on {nodes}"
    # Not vacuous: the demo's answers differ by pod and node.
    assert reasons(ext, demo_pod_args("trainer", ALL))["node-c"] is not None


def test_ready_waits_for_served_taint_rules(live) -> None:
    """A served DeviceTaintRule API gates readiness: no filter answer may ignore the demo's maintenance rule."""
    api, _, _ = live
    api.faults(latency_ms=2000, verbs=["list"], paths=["devicetaintrules"])
    late = cluster_extender(api)
    try:
        late.wait_ready()
        assert "example.com/maintenance=planned:NoSchedule" in (reasons(late, demo_pod_args("trainer", ALL))["node-c"] or "")
    finally:
        api.clear_faults()
        late.stop()


# ----------------------------------------------------------------------------- changes through the API


def _create(obj: dict[str, Any]) -> Callable[[FakeApi], Any]:
    return lambda api: api.create(copy.deepcopy(obj))


def _delete(kind: str, name: str, group: str | None = None) -> Callable[[FakeApi], Any]:
    return lambda api: api.delete(kind, None, name, group)


def _slice_taint(taints: list[dict[str, Any]]) -> Callable[[FakeApi], Any]:
    def change(obj: dict[str, Any]) -> None:
        device = next(d for d in obj["spec"]["devices"] if d["name"] == "gpu-0")
        if taints:
            device["taints"] = taints
        else:
            device.pop("taints", None)

    return lambda api: api.mutate("ResourceSlice", None, f"node-b-{GPU}", change)


def _claim_tolerations(tolerations: dict[str, list[dict[str, Any]]] | None) -> Callable[[FakeApi], Any]:
    """Claim-annotation tolerations (docs/design.md#claim-annotation-tolerations), for API servers that drop `tolerations`: metadata stays mutable."""

    def change(obj: dict[str, Any]) -> None:
        annotations = obj["metadata"].setdefault("annotations", {})
        if tolerations is None:
            annotations.pop(TOLERATIONS_ANNOTATION, None)
        else:
            annotations[TOLERATIONS_ANNOTATION] = json.dumps(tolerations)

    return lambda api: api.mutate("ResourceClaim", "default", "gpu-claim", change)


def _zone(node_name: str, zone: str) -> Callable[[FakeApi], Any]:
    def change(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone

    return lambda api: api.mutate("Node", None, node_name, change)


CHANGE_CASES = [
    # name, pod, node, change, undo, substring of the node's reason while changed
    (
        "upstream-rule-v1beta2",
        "trainer",
        "node-a",
        _create(taint_rule("resource.k8s.io/v1beta2", "e2e-upstream", "node-a", "example.com/e2e-upstream")),
        _delete("DeviceTaintRule", "e2e-upstream"),
        "claim default/gpu-claim, request gpu: 0 of 1 devices available: 2 tainted (example.com/e2e-upstream=e2e:NoSchedule not tolerated)",
    ),
    (
        "crd-rule-v1alpha1",
        "trainer",
        "node-b",
        _create(taint_rule(f"{CRD_GROUP}/v1alpha1", "e2e-crd", "node-b", "example.com/e2e-crd")),
        _delete("DeviceTaintRule", "e2e-crd", CRD_GROUP),
        "example.com/e2e-crd=e2e:NoSchedule not tolerated",
    ),
    (
        "driver-taint-in-slice",
        "trainer",
        "node-b",
        _slice_taint([{"key": "example.com/e2e-driver", "value": "hot", "effect": "NoSchedule"}]),
        _slice_taint([]),
        "example.com/e2e-driver=hot:NoSchedule not tolerated",
    ),
    (
        # The NIC pool is reachable from zone east by nodeSelector: node-a moves west.
        "node-label-leaves-selector-pool",
        "gpu-and-nic",
        "node-a",
        _zone("node-a", "west"),
        _zone("node-a", "east"),
        "claim default/gpu-and-nic, request nic: 0 of 1",
    ),
    (
        # The other way round: a node the pod could not use becomes usable.
        "claim-annotation-toleration",
        "trainer",
        "node-c",
        _claim_tolerations({"gpu": [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}]}),
        _claim_tolerations(None),
        None,
    ),
]


@pytest.mark.parametrize(
    ("pod_name", "node_name", "change", "undo", "reason"), [c[1:] for c in CHANGE_CASES], ids=[c[0] for c in CHANGE_CASES]
)
def test_api_changes_reach_filter(live, pod_name: str, node_name: str, change, undo, reason: str | None) -> None:
    """`reason`: what rejects the node while changed; None: the node is rejected before and accepted while changed."""
    api, ext, _ = live
    body = demo_pod_args(pod_name, ALL)
    before = reasons(ext, body)
    assert (before[node_name] is None) is (reason is not None), before
    change(api)
    try:
        wait_for(lambda: reasons(ext, body)[node_name] != before[node_name], what=f"{node_name}'s answer changes")
        after = reasons(ext, body)
        if reason is None:
            assert after[node_name] is None, after[node_name]
        else:
            assert reason in (after[node_name] or ""), after[node_name]
        assert {n: r for n, r in after.items() if n != node_name} == {n: r for n, r in before.items() if n != node_name}
    finally:
        undo(api)
    wait_for(lambda: reasons(ext, body) == before, what=f"{node_name}'s answer restored")


def test_claim_created_later(live) -> None:
    api, ext, _ = live
    body = pod_args("late", "e2e-late-claim", ALL)
    assert reasons(ext, body) == {n: "claim default/e2e-late-claim (pod claim 'gpu') not found" for n in ALL}
    api.create(claim("e2e-late-claim", device_class=GPU))
    try:
        wait_for(lambda: reasons(ext, body)["node-a"] is None, what="the claim arrives")
        after = reasons(ext, body)
        assert after["node-b"] is None
        assert "example.com/maintenance=planned:NoSchedule not tolerated" in after["node-c"]
    finally:
        api.delete("ResourceClaim", "default", "e2e-late-claim")
    wait_for(lambda: "not found" in (reasons(ext, body)["node-a"] or ""), what="the claim is gone")


# ----------------------------------------------------------------------------- Warning Events


def events_on(api: FakeApi, kind: str, name: str) -> list[dict[str, Any]]:
    return [e for e in api.list("Event") if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name]


def _relabel(kind: str, name: str, group: str | None = None) -> Callable[[FakeApi, Extender], None]:
    """Re-evaluate an object's selectors: each metadata-only update recomputes the devices it may select."""

    def trigger(api: FakeApi, ext: Extender) -> None:
        for i in range(3):
            api.mutate(kind, None, name, lambda o, i=i: o["metadata"].setdefault("labels", {}).update(round=str(i)), group=group)
        wait_converged(api, ext)

    return trigger


def _allocate_with_class(class_name: str) -> Callable[[FakeApi, Extender], None]:
    """Evaluate a class's selectors for several pods, nodes and devices (new pod UIDs skip the outcome cache)."""

    def trigger(api: FakeApi, ext: Extender) -> None:
        api.create(claim(f"{class_name}-claim", device_class=class_name))
        try:
            wait_converged(api, ext)
            for i in range(3):
                failed = reasons(ext, pod_args("uses-broken-class", f"{class_name}-claim", ALL, uid=f"uid-{i}"))
                assert all(r is not None and f"device class {class_name}" in r for r in failed.values()), failed
            _relabel("DeviceClass", class_name)(api, ext)
            reasons(ext, pod_args("uses-broken-class", f"{class_name}-claim", ALL, uid="uid-last"))
        finally:
            api.delete("ResourceClaim", "default", f"{class_name}-claim")

    return trigger


EVENT_CASES = [
    # name, faulty object, group for deletion, trigger that evaluates it many times
    (
        "device-class-selector",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "e2e-broken-class"},
            "spec": {"selectors": [{"cel": {"expression": BROKEN_CEL}}]},
        },
        None,
        _allocate_with_class("e2e-broken-class"),
    ),
    (
        "crd-rule-selector",
        {
            "apiVersion": f"{CRD_GROUP}/v1alpha1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "e2e-broken-rule"},
            "spec": {
                "deviceSelector": {"driver": GPU, "selectors": [{"cel": {"expression": BROKEN_CEL}}]},
                "taint": {"key": "example.com/never", "effect": "NoSchedule"},
            },
        },
        CRD_GROUP,
        _relabel("DeviceTaintRule", "e2e-broken-rule", CRD_GROUP),
    ),
    (
        "slice-patch-filter",
        {
            "apiVersion": f"{CRD_GROUP}/v1alpha1",
            "kind": "ResourceSlicePatch",
            "metadata": {"name": "e2e-broken-patch"},
            "spec": {
                "devices": {
                    "filter": {"driver": GPU, "selectors": [{"cel": {"expression": BROKEN_CEL}}]},
                    "attributes": {f"{GPU}/model": {"string": "patched"}},
                }
            },
        },
        None,
        _relabel("ResourceSlicePatch", "e2e-broken-patch"),
    ),
]


@pytest.mark.parametrize(("obj", "group", "trigger"), [c[1:] for c in EVENT_CASES], ids=[c[0] for c in EVENT_CASES])
def test_faulty_object_gets_one_warning_event(live, obj: dict[str, Any], group: str | None, trigger) -> None:
    api, ext, _ = live
    kind, name = obj["kind"], obj["metadata"]["name"]
    sentinel = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{name}-sentinel"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }  # does not compile
    uid = api.create(copy.deepcopy(obj))["metadata"]["uid"]
    try:
        if kind != "DeviceClass":  # rules and patches are evaluated on arrival; a class when a claim uses it
            wait_for(lambda: events_on(api, kind, name), what=f"an Event on {kind} {name}")
        trigger(api, ext)
        # Events are written asynchronously: once one reported after the trigger is on the server,
        # any duplicate the trigger caused is there too.
        api.create(sentinel)
        wait_for(lambda: events_on(api, "DeviceClass", sentinel["metadata"]["name"]), what="the sentinel's Event")
        events = events_on(api, kind, name)
        assert len(events) == 1, [e["message"] for e in events]
        event = events[0]
        assert event["type"] == "Warning"
        # What `kubectl describe` matches on: kind, name, namespace ("" for cluster-scoped objects) and uid.
        assert event["involvedObject"] == {"kind": kind, "name": name, "uid": uid, "apiVersion": obj["apiVersion"]}
        assert event["metadata"]["namespace"] == "default"
        assert "nosuch" in event["message"]
        assert event["source"]["component"] == "dra-extender"
        # The faulty selector selects nothing: no taint, no patched attribute.
        devices = ext.http.get("/debug/devices", params={"driver": GPU}).json()["items"]
        assert not any(t["key"] == "example.com/never" for d in devices for t in d["taints"])
        assert not any(d["attributes"]["effective"].get(f"{GPU}/model") == "patched" for d in devices)
    finally:
        api.delete(kind, None, name, group)
        api.delete("DeviceClass", None, sentinel["metadata"]["name"])


def test_old_cluster_serving_v1alpha3_rules() -> None:
    """1.33-1.35 serve DeviceTaintRule at v1alpha3 only, whose rules may still select by CEL (docs/design.md#upstream-devicetaintrule-versions):
    the selector is honoured (not widened), and a faulty one is blamed at the version the server serves."""
    manifests = [p for p in sorted(DEMO.glob("*.yaml")) if p.name != "devicetaintrules.yaml"]  # v1beta2 there
    api = FakeApi(*manifests, extra_args=("--dtr-versions", "v1alpha3"))
    ext = cluster_extender(api)
    rules = "/apis/resource.k8s.io/v1alpha3/devicetaintrules"

    def by_cel(name: str, expression: str) -> dict[str, Any]:
        selector = {"driver": GPU, "selectors": [{"cel": {"expression": expression}}]}
        return rule(name, version="v1alpha3", selector=selector, key=f"example.com/{name}", value="e2e")

    try:
        ext.wait_ready()
        assert api.http.post(rules, json=by_cel("old-h100", f'device.attributes["{GPU}"].model == "h100"')).status_code == 201
        created = api.http.post(rules, json=by_cel("old-broken", BROKEN_CEL))
        assert created.status_code == 201, created.text
        body = demo_pod_args("trainer", ALL)
        wait_for(lambda: reasons(ext, body)["node-c"] is not None, what="the v1alpha3 rule applies")
        after = reasons(ext, body)
        assert after["node-a"] is None and after["node-b"] is None  # a100s: not selected
        assert "example.com/old-h100=e2e:NoSchedule not tolerated" in after["node-c"]
        events = wait_for(lambda: events_on(api, "DeviceTaintRule", "old-broken"), what="an Event on the faulty rule")
        assert [e["involvedObject"] for e in events] == [
            {
                "kind": "DeviceTaintRule",
                "name": "old-broken",
                "uid": created.json()["metadata"]["uid"],
                "apiVersion": "resource.k8s.io/v1alpha3",
            }
        ]
    finally:
        ext.stop()
        api.stop()


# ----------------------------------------------------------------------------- bind


def add_node(api: FakeApi, name: str, gpus: int) -> None:
    api.create(node(name, {"topology.kubernetes.io/zone": "east"}, hostname=True))
    api.create(gpu_slice(name, gpus, driver=GPU, model="a100", memory="80Gi"))


def add_pod(api: FakeApi, name: str, claim_name: str | None, *, new_claim: bool = True) -> str:
    if claim_name is not None and new_claim:
        api.create(claim(claim_name, device_class=GPU))
    return api.create(gpu_pod(name, claim_name))["metadata"]["uid"]


def get_claim(api: FakeApi, name: str) -> dict[str, Any]:
    obj = api.get("ResourceClaim", "default", name)
    assert obj is not None, name
    return obj


def test_bind_writes_allocation_reservation_and_binding(binding) -> None:
    api, ext = binding
    since = len(api.requests())
    uid = DEMO_UIDS["trainer"]
    assert ext.post("bind", bind_args("trainer", uid, "node-a")).json() == {"Error": ""}

    written = get_claim(api, "gpu-claim")
    assert FINALIZER in written["metadata"]["finalizers"]
    allocation = written["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert [{k: r[k] for k in ("request", "driver", "pool", "device")} for r in results] == [
        {"request": "gpu", "driver": GPU, "pool": "node-a", "device": "gpu-0"}
    ]
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
    }
    stamp = datetime.strptime(allocation["allocationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - stamp).total_seconds()) < 60
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": uid}]
    assert api.get("Pod", "default", "trainer")["spec"]["nodeName"] == "node-a"

    # Finalizer, then status, then the Binding, each once.
    writes = [(r["method"], r["resource"]) for r in api.requests(since) if r["method"] != "GET"]
    assert writes == [("PATCH", "resourceclaims"), ("PATCH", "resourceclaims/status"), ("POST", "pods/binding")]

    # Another pod now finds node-a's only untainted GPU taken; the claim's own pod fits only node-a.
    pair = reasons(ext, demo_pod_args("pair", ["node-a"]))["node-a"]
    assert "1 allocated" in pair, pair
    devices = ext.http.get("/debug/devices", params={"node": "node-a", "driver": GPU}).json()["items"]
    assert {d["device"]: d["allocatedTo"] for d in devices} == {"gpu-0": "default/gpu-claim", "gpu-1": None}
    assert reasons(ext, demo_pod_args("trainer", ALL)) == {
        "node-a": None,
        "node-b": reasons(ext, demo_pod_args("trainer", ["node-b"]))["node-b"],
        "node-c": reasons(ext, demo_pod_args("trainer", ["node-c"]))["node-c"],
    }
    wait_converged(api, ext)


def _nic_claim_pod(api: FakeApi) -> tuple[str, str, str]:
    api.create(claim("nic-only", device_class="nic.example.com"))
    return "nic-user", add_pod(api, "nic-user", "nic-only", new_claim=False), "nic-only"


ALLOCATION_CASES = [
    # name, setup -> (pod, uid, claim), node, expected result, expected allocation nodeSelector, nodes the claim fits then
    (
        "tolerations-copied-into-results",  # without them NoExecute tolerations are lost (kubernetes#134434)
        lambda api: ("maintenance-job", DEMO_UIDS["maintenance-job"], "maintenance-ok"),
        "node-c",
        {
            "request": "gpu",
            "driver": GPU,
            "pool": "node-c",
            "device": "gpu-0",
            "tolerations": [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}],
        },
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-c"]}]}]},
        ["node-c"],
    ),
    (
        "network-device-keeps-the-pool-selector",
        _nic_claim_pod,
        "node-b",
        {"request": "gpu", "driver": "nic.example.com", "pool": "east", "device": "nic-0"},
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["east"]}]}]},
        ["node-a", "node-b"],
    ),
]


@pytest.mark.parametrize(
    ("setup", "node_name", "result", "selector", "fits"), [c[1:] for c in ALLOCATION_CASES], ids=[c[0] for c in ALLOCATION_CASES]
)
def test_bind_allocation_results(binding, setup, node_name: str, result: dict[str, Any], selector: dict[str, Any], fits: list[str]) -> None:
    api, ext = binding
    pod_name, uid, claim_name = setup(api)
    wait_converged(api, ext)
    assert ext.post("bind", bind_args(pod_name, uid, node_name)).json() == {"Error": ""}
    allocation = get_claim(api, claim_name)["status"]["allocation"]
    assert allocation["devices"]["results"] == [result]
    assert allocation["nodeSelector"] == selector
    # Read back through the watch, the allocation's node selector decides where the claim's pods fit.
    wait_converged(api, ext)
    answers = reasons(ext, pod_args("another", claim_name, ALL))
    assert [n for n, r in answers.items() if r is None] == fits, answers


def _allocate_elsewhere(api: FakeApi, claim_name: str, node_name: str, device: str) -> None:
    """Someone else's allocation, written through the API as the in-tree scheduler would."""
    api.create(claim(claim_name, device_class=GPU))

    def allocate(obj: dict[str, Any]) -> None:
        obj["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": GPU, "pool": node_name, "device": device}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
                },
            }
        }

    api.mutate("ResourceClaim", "default", claim_name, allocate, subresource="status")


def test_bind_honours_allocations_made_through_the_api(binding) -> None:
    api, ext = binding
    add_node(api, "node-theirs", 2)
    _allocate_elsewhere(api, "their-claim", "node-theirs", "gpu-0")
    wait_for(
        lambda: "claim allocated by another allocator" in ext.logs() and "default/their-claim" in ext.logs(),
        what="the foreign-allocation warning",
    )
    first = add_pod(api, "ours-1", "ours-1")
    second = add_pod(api, "ours-2", "ours-2")
    wait_converged(api, ext)

    # The other allocator took gpu-0: ours gets the free gpu-1.
    assert ext.post("bind", bind_args("ours-1", first, "node-theirs")).json() == {"Error": ""}
    assert get_claim(api, "ours-1")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-1"
    wait_converged(api, ext)
    foreign = [line for line in ext.logs().splitlines() if "another allocator" in line]
    assert not any("default/ours-1" in line for line in foreign), "our own allocation is not foreign"
    # Nothing is left: the error names the claim and why, and nothing is written.
    since = len(api.requests())
    error = ext.post("bind", bind_args("ours-2", second, "node-theirs")).json()["Error"]
    assert "claim default/ours-2" in error and "0 of 1 devices available: 2 allocated" in error, error
    assert [r for r in api.requests(since) if r["method"] != "GET"] == []
    assert "status" not in get_claim(api, "ours-2") or not get_claim(api, "ours-2")["status"].get("allocation")
    assert not api.get("Pod", "default", "ours-2")["spec"].get("nodeName")
    # Two allocators on one pool (docs/design.md#one-allocator-per-device-pool): when the other one
    # hands out our device as well, the extender says so.
    _allocate_elsewhere(api, "their-second-claim", "node-theirs", "gpu-1")
    wait_for(lambda: "device is allocated to two claims" in ext.logs(), what="the double-allocation warning")


def _shared_claim_already_bound(api: FakeApi, ext: Extender) -> tuple[str, str]:
    first = add_pod(api, "fail-shared-1", "fail-shared")
    assert ext.post("bind", bind_args("fail-shared-1", first, "node-fail-shared")).json() == {"Error": ""}
    return "fail-shared", first


BIND_FAILURE_CASES = [
    # name, node, claim setup -> (claim, uid of a pod already holding it or ""), allocation kept after the undo
    ("sole-holder-allocation-undone", "node-fail-sole", lambda api, ext: ("fail-sole", ""), False),
    ("shared-claim-allocation-kept", "node-fail-shared", _shared_claim_already_bound, True),
]


@pytest.mark.parametrize(("node_name", "setup", "kept"), [c[1:] for c in BIND_FAILURE_CASES], ids=[c[0] for c in BIND_FAILURE_CASES])
def test_binding_failure_undoes_the_claim_writes(binding, node_name: str, setup, kept: bool) -> None:
    api, ext = binding
    add_node(api, node_name, 1)
    wait_converged(api, ext)
    claim_name, holder = setup(api, ext)
    if not holder:
        api.create(claim(claim_name, device_class=GPU))
    uid = add_pod(api, f"{claim_name}-pod", claim_name, new_claim=False)
    wait_converged(api, ext)
    api.control("POST", "fail-next", {"count": BIND_ATTEMPTS, "status": 500, "paths": [r"/pods/[^/]+/binding$"]})
    try:
        error = ext.post("bind", bind_args(f"{claim_name}-pod", uid, node_name)).json()["Error"]
    finally:
        api.clear_faults()
    assert f"binding pod default/{claim_name}-pod to {node_name}" in error and "HTTP 500" in error, error

    written = get_claim(api, claim_name)
    status = written.get("status") or {}
    assert [r["uid"] for r in status.get("reservedFor") or []] == ([holder] if holder else [])
    assert bool(status.get("allocation")) is kept
    # A deallocated claim loses its delete protection again (as upstream's Unreserve).
    assert (FINALIZER in (written["metadata"].get("finalizers") or [])) is kept
    assert not api.get("Pod", "default", f"{claim_name}-pod")["spec"].get("nodeName")
    # The extender's view agrees: the device is free again unless the other pod still holds it.
    wait_converged(api, ext)
    devices = ext.http.get("/debug/devices", params={"node": node_name, "driver": GPU}).json()["items"]
    assert [d["allocatedTo"] for d in devices] == ([f"default/{claim_name}"] if kept else [None])
    # The scheduler retries the pod: now it binds.
    assert ext.post("bind", bind_args(f"{claim_name}-pod", uid, node_name)).json() == {"Error": ""}


def test_bind_retries_when_the_claim_changed_meanwhile(binding) -> None:
    """The cached claim is stale (its watch is held back): the write gets 409, the bind re-reads and succeeds."""
    api, ext = binding
    add_node(api, "node-retry", 1)
    uid = add_pod(api, "retried", "retried")
    wait_converged(api, ext)
    api.faults(latency_ms=3000, verbs=["watch"], paths=["resourceclaims"])
    try:
        api.drop_watches("resourceclaims")
        api.mutate("ResourceClaim", "default", "retried", lambda o: o["metadata"].setdefault("annotations", {}).update(touched="yes"))
        since = len(api.requests())
        assert ext.post("bind", bind_args("retried", uid, "node-retry")).json() == {"Error": ""}
    finally:
        api.clear_faults()
    writes = [(r["method"], r["resource"], r["status"]) for r in api.requests(since) if r["method"] != "GET"]
    assert writes[0] == ("PATCH", "resourceclaims", 409)
    assert writes[-3:] == [("PATCH", "resourceclaims", 200), ("PATCH", "resourceclaims/status", 200), ("POST", "pods/binding", 201)]
    written = get_claim(api, "retried")
    assert written["metadata"]["annotations"]["touched"] == "yes"  # the other writer's change survived
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "retried", "uid": uid}]
    wait_converged(api, ext)


def test_bind_pod_without_claims(binding) -> None:
    api, ext = binding
    uid = DEMO_UIDS["plain"]
    assert "does not match" in ext.post("bind", bind_args("plain", "wrong-uid", "node-c")).json()["Error"]
    assert ext.post("bind", bind_args("plain", uid, "node-c")).json() == {"Error": ""}
    assert api.get("Pod", "default", "plain")["spec"]["nodeName"] == "node-c"
    again = ext.post("bind", bind_args("plain", uid, "node-b")).json()["Error"]
    assert "already assigned" in again, again
    assert "not found" in ext.post("bind", bind_args("ghost", "", "node-c")).json()["Error"]


def test_bind_fetches_a_claim_missing_from_the_cache(binding) -> None:
    api, ext = binding
    add_node(api, "node-fetch", 1)
    wait_converged(api, ext)
    # Hold back the claim and pod watches: what is created now reaches the extender only by asking.
    api.faults(latency_ms=3000, verbs=["watch"], paths=["resourceclaims", "/pods"])
    try:
        api.drop_watches("resourceclaims")
        api.drop_watches("pods")
        uid = add_pod(api, "fetched", "fetched")
        assert "default/fetched" not in extender_view(ext).get("ResourceClaim.resource.k8s.io", {})
        since = len(api.requests())
        assert ext.post("bind", bind_args("fetched", uid, "node-fetch")).json() == {"Error": ""}
    finally:
        api.clear_faults()
    gets = [r["path"] for r in api.requests(since) if r["method"] == "GET" and r["verb"] == "get"]
    assert "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/fetched" in gets
    assert get_claim(api, "fetched")["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-fetch"
    assert api.get("Pod", "default", "fetched")["spec"]["nodeName"] == "node-fetch"
    wait_converged(api, ext)


# ----------------------------------------------------------------------------- leadership


def test_non_leader_filters_but_does_not_bind(binding) -> None:
    api, leader = binding
    hostname = f"sched-{uuid.uuid4().hex[:8]}"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
        # A hostname that merely starts with ours is someone else.
        "spec": {"holderIdentity": f"{hostname}-2_{uuid.uuid4()}", "leaseDurationSeconds": 3600, "renewTime": micro_now()},
    }
    api.create(lease)
    add_node(api, "node-lease", 1)
    uid = add_pod(api, "led", "led")
    follower = cluster_extender(api, "--follow-scheduler-lease", "kube-system/kube-scheduler", env={"HOSTNAME": hostname})
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"

    def lease_read_after(since: int) -> bool:
        return any(r["path"] == lease_path and r["status"] == 200 for r in api.requests(since))

    try:
        since = len(api.requests())
        follower.wait_ready()
        wait_converged(api, follower)
        wait_converged(api, leader)  # both must have seen the new node, pod and claim before comparing
        wait_for(lambda: lease_read_after(since), what="the follower reads the Lease")
        assert follower.post("bind", bind_args("led", uid, "node-lease")).json() == {"Error": "not leader"}
        assert reasons(follower, pod_args("led", "led", ["node-lease", "node-c"], uid=uid)) == reasons(
            leader, pod_args("led", "led", ["node-lease", "node-c"], uid=uid)
        )
        assert reasons(follower, pod_args("led", "led", ["node-lease"], uid=uid)) == {"node-lease": None}

        # Our kube-scheduler takes the Lease: the sidecar leads with it.
        api.mutate(
            "Lease",
            "kube-system",
            "kube-scheduler",
            lambda o: o["spec"].update(holderIdentity=f"{hostname}_{uuid.uuid4()}", renewTime=micro_now()),
        )
        answers: list[str] = []

        def bound() -> bool:
            answers.append(follower.post("bind", bind_args("led", uid, "node-lease")).json()["Error"])
            return answers[-1] != "not leader"

        wait_for(bound, timeout=15, interval=0.2, what="leadership")
        assert answers[-1] == ""
        assert api.get("Pod", "default", "led")["spec"]["nodeName"] == "node-lease"
        assert get_claim(api, "led")["status"]["reservedFor"] == [{"resource": "pods", "name": "led", "uid": uid}]

        # Another kube-scheduler takes over: the sidecar stops allocating with it.
        second = add_pod(api, "led-2", "led-2")
        api.mutate(
            "Lease",
            "kube-system",
            "kube-scheduler",
            lambda o: o["spec"].update(holderIdentity=f"other_{uuid.uuid4()}", renewTime=micro_now()),
        )
        # (While it still leads, binding led-2 fails without writing anything: node-lease's only GPU is taken.)
        wait_for(
            lambda: follower.post("bind", bind_args("led-2", second, "node-lease")).json()["Error"] == "not leader",
            timeout=15,
            interval=0.2,
            what="leadership lost",
        )
        assert "status" not in get_claim(api, "led-2")
    finally:
        follower.stop()


def test_no_source_flag_uses_the_kubeconfig_from_the_environment(live) -> None:
    """docs/design.md#where-the-cluster-comes-from: without a source flag and outside a pod, $KUBECONFIG names the cluster."""
    api, cluster, _ = live
    ext = Extender("--standalone", env={"KUBECONFIG": str(api.kubeconfig), "KUBERNETES_SERVICE_HOST": ""})
    try:
        ext.wait_ready()
        assert f"kubeconfig {api.kubeconfig}" in ext.logs()
        wait_converged(api, ext)
        body = demo_pod_args("trainer", ["node-a", "node-b", "node-c"])
        assert ext.post("filter", body).json() == cluster.post("filter", body).json()
    finally:
        ext.stop()


def test_claim_with_opaque_config_written_with_spaces_binds(binding) -> None:
    """The API server compares a claim's RawExtension bytes on update: our writes leave the spec alone."""
    api, ext = binding
    add_node(api, "node-opaque", 1)
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu-shared"},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}],
                "config": [{"opaque": {"driver": GPU, "parameters": {"sharing": {"strategy": "TimeSlicing"}}}}],
            },
        }
    )
    body = claim("opaque", device_class="gpu-shared")
    body["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {"partition": "1g.10gb", "replicas": [1, 2]}}}
    ]
    # Not compact, as some clients send it.
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    r = api.http.post(path, content=json.dumps(body, indent=2), headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    created = r.json()
    # The same claim written back in another layout (json.dumps, as kubernetes-asyncio does) is
    # refused: the bytes differ.
    refused = api.http.put(f"{path}/opaque", content=json.dumps(created), headers={"Content-Type": "application/json"})
    assert refused.status_code == 422 and "field is immutable" in refused.text, refused.text
    uid = api.create(gpu_pod("opaque-pod", "opaque"))["metadata"]["uid"]
    wait_converged(api, ext)
    assert ext.post("bind", bind_args("opaque-pod", uid, "node-opaque")).json() == {"Error": ""}
    allocation = get_claim(api, "opaque")["status"]["allocation"]
    assert allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {"sharing": {"strategy": "TimeSlicing"}}}},
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {"partition": "1g.10gb", "replicas": [1, 2]}}},
    ]
    assert FINALIZER in get_claim(api, "opaque")["metadata"]["finalizers"]


def test_rejected_pod_is_nudged_when_its_taint_goes_away(binding) -> None:
    """kube-scheduler does not requeue on DeviceTaintRule events: the extender touches the pod instead."""
    api, ext = binding
    add_node(api, "node-nudge", 1)
    rule = taint_rule(f"{CRD_GROUP}/v1alpha1", "nudge-maintenance", "node-nudge", "example.com/maintenance")
    api.create(rule)
    uid = add_pod(api, "nudged", "nudged")

    # `serve` alone: no eviction controller stamps the rule's timeAdded or writes its status (`controllers` does),
    # so no later rule update nudges the pod before the rule goes.
    wait_converged(api, ext)
    why = reasons(ext, pod_args("nudged", "nudged", ["node-nudge"], uid=uid))["node-nudge"]
    assert why is not None and "example.com/maintenance=e2e:NoSchedule not tolerated" in why, why
    assert REQUEUE_ANNOTATION not in (api.get("Pod", "default", "nudged")["metadata"].get("annotations") or {})
    api.delete("DeviceTaintRule", None, "nudge-maintenance", group=CRD_GROUP)
    stamped = wait_for(
        lambda: (api.get("Pod", "default", "nudged")["metadata"].get("annotations") or {}).get(REQUEUE_ANNOTATION),
        what="the pending pod is nudged",
    )
    assert stamped
    assert reasons(ext, pod_args("nudged", "nudged", ["node-nudge"], uid=uid))["node-nudge"] is None


BIND_LEFTOVER_CASES = [
    # name, failing requests (path regex, count), status, what the answer says
    ("status-write-500", (r"/resourceclaims/[^/]+/status$", 1), 500, "writing its claims: "),
    # The finalizer patch conflicts, so the bind re-reads the claim: that read fails too.
    ("claim-read-409-in-retry", (r"/resourceclaims/[^/]+$", 3), 409, "reading it failed"),
]


@pytest.mark.parametrize(("failing", "status", "said"), [c[1:] for c in BIND_LEFTOVER_CASES], ids=[c[0] for c in BIND_LEFTOVER_CASES])
def test_failed_bind_leaves_no_finalizer_and_says_why(binding, failing: tuple[str, int], status: int, said: str) -> None:
    """A failed write takes back the finalizer it added; errors on any call are told plainly."""
    api, ext = binding
    name = f"leftover-{status}"
    add_node(api, f"node-{name}", 1)
    uid = add_pod(api, name, name)
    wait_converged(api, ext)
    path, count = failing
    api.control("POST", "fail-next", {"count": count, "status": status, "paths": [path]})
    try:
        error = ext.post("bind", bind_args(name, uid, f"node-{name}")).json()["Error"]
    finally:
        api.clear_faults()
    assert error and "internal error" not in error, error
    assert said in error and name in error, error
    wait_for(lambda: FINALIZER not in (get_claim(api, name)["metadata"].get("finalizers") or []), what="no finalizer left")
    assert not (get_claim(api, name).get("status") or {}).get("allocation")
    # The scheduler retries the pod: now it binds.
    assert ext.post("bind", bind_args(name, uid, f"node-{name}")).json() == {"Error": ""}
