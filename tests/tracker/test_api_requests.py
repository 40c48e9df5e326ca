"""The writes as request values (tracker/apiserver/requests.py), from tables, and the one executor against the fake API server.

The first table needs no server: each row calls one writer of ApiWrites on
an executor that records the Request it is handed. The second sends the
health controller's writes to the fake API server; the third shows what a
refusal raises, and how the health controller's failures judge it
(controllers/health/failures.py: the object's fault, or the server's).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from controllers.health.failures import server_wide
from controllers.health.rules import POLICY_LABEL
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import pod
from tests.health.harness import policy
from tracker.apiserver import requests
from tracker.apiserver.requests import JSON, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Request
from tracker.apiserver.source import ApiSource
from tracker.apiserver.writes import ApiWrites
from tracker.source import Conflict, Invalid, NotFound, SourceError

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
OWN = "/apis/resource.dra-extender.io/v1alpha1/devicetaintrules"
UPSTREAM = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
POLICIES = "/apis/resource.dra-extender.io/v1alpha1/devicehealthpolicies"
PRECONDITION = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "u1"}}
RULE = {
    "apiVersion": "resource.dra-extender.io/v1alpha1",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "gpu-health.xid.abc", "labels": {POLICY_LABEL: "gpu-health"}},
    "spec": {
        "deviceSelector": {"driver": "gpu.example.com", "pool": "n", "device": "gpu-0"},
        "taint": {"key": "k", "effect": "NoSchedule"},
    },
}
EVENT = {"type": "Warning", "reason": "R", "message": "m", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}}


class Recorded(ApiWrites):
    """An ApiWrites whose executor keeps each Request and answers it with an empty object."""

    def __init__(self) -> None:
        self.rule_resources = []
        self.sent: list[Request] = []

    async def execute(self, req: Request) -> dict[str, Any]:
        self.sent.append(req)
        return {}

    async def send(self, method: str, path: str, body: Any, *, content_type: str = JSON, timeout: float = 30.0) -> tuple[int, bytes]:
        raise AssertionError("execute is the one sender")

    async def request(self, method: str, path: str, **_: Any) -> tuple[int, bytes]:
        raise AssertionError("execute is the one sender")


Write = Callable[[ApiWrites], Awaitable[Any]]

# (name, the write, the request it is: method, path, body, what, content type[, query])
ROWS: list[tuple[str, Write, Request]] = [
    (
        "patch a claim",
        lambda w: w.patch_claim("ns", "c", {"metadata": {"finalizers": ["f"]}}),
        Request("PATCH", f"{CLAIMS}/c", {"metadata": {"finalizers": ["f"]}}, "patch ResourceClaim ns/c", MERGE_PATCH),
    ),
    (
        "patch a claim's status",
        lambda w: w.patch_claim("ns", "c", {"status": {}}, status=True),
        Request("PATCH", f"{CLAIMS}/c/status", {"status": {}}, "patch ResourceClaim ns/c status", MERGE_PATCH),
    ),
    (
        "create a claim by generateName",
        lambda w: w.create_claim("ns", {"metadata": {"generateName": "p-gpu-"}}),
        Request("POST", CLAIMS, {"metadata": {"generateName": "p-gpu-"}}, "create ResourceClaim ns/p-gpu-"),
    ),
    (
        "delete a claim of a uid",
        lambda w: w.delete_claim("ns", "c", "u1"),
        Request("DELETE", f"{CLAIMS}/c", PRECONDITION, "delete ResourceClaim ns/c"),
    ),
    (
        "delete a claim of no known uid",
        lambda w: w.delete_claim("ns", "c", ""),
        Request("DELETE", f"{CLAIMS}/c", {}, "delete ResourceClaim ns/c"),
    ),
    (
        "patch a pod's status",
        lambda w: w.patch_pod_status("ns", "p", {"status": {}}),
        Request("PATCH", "/api/v1/namespaces/ns/pods/p/status", {"status": {}}, "patch Pod ns/p status", MERGE_PATCH),
    ),
    (
        "patch a pod",
        lambda w: w.patch_pod("ns", "p", {"metadata": {}}),
        Request("PATCH", "/api/v1/namespaces/ns/pods/p", {"metadata": {}}, "patch Pod ns/p", MERGE_PATCH),
    ),
    (
        "bind a pod of a uid",
        lambda w: w.bind_pod("ns", "p", "u1", "n1"),
        Request(
            "POST",
            "/api/v1/namespaces/ns/pods/p/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
            },
            "bind Pod ns/p",
        ),
    ),
    (
        "bind a pod of no known uid",
        lambda w: w.bind_pod("ns", "p", "", "n1"),
        Request(
            "POST",
            "/api/v1/namespaces/ns/pods/p/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p", "namespace": "ns"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
            },
            "bind Pod ns/p",
        ),
    ),
    (
        "delete a pod",
        lambda w: w.delete_pod("ns", "p", "u1"),
        Request("DELETE", "/api/v1/namespaces/ns/pods/p", PRECONDITION, "delete Pod ns/p"),
    ),
    (
        "evict a pod",
        lambda w: w.evict_pod("ns", "p", "u1"),
        Request(
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns"},
                "deleteOptions": {"preconditions": {"uid": "u1"}},
            },
            "evict Pod ns/p",
        ),
    ),
    (
        "a pod condition (strategic: merged by type)",
        lambda w: w.update_pod_status_condition("ns", "p", {"type": "DisruptionTarget"}),
        Request(
            "PATCH",
            "/api/v1/namespaces/ns/pods/p/status",
            {"status": {"conditions": [{"type": "DisruptionTarget"}]}},
            "patch Pod ns/p status",
            STRATEGIC_MERGE_PATCH,
        ),
    ),
    (
        "an upstream rule's status (its version not yet discovered)",
        lambda w: w.update_rule_status("resource.k8s.io", "r", {"conditions": []}),
        Request("PATCH", f"{UPSTREAM}/r/status", {"status": {"conditions": []}}, "patch DeviceTaintRule r status", MERGE_PATCH),
    ),
    (
        "our rule's timeAdded",
        lambda w: w.update_rule_time_added("resource.dra-extender.io", "r", "2026-01-01T00:00:00Z"),
        Request(
            "PATCH",
            f"{OWN}/r",
            {"spec": {"taint": {"timeAdded": "2026-01-01T00:00:00Z"}}},
            "patch DeviceTaintRule r timeAdded",
            MERGE_PATCH,
        ),
    ),
    (
        "a claim's volume taints",
        lambda w: w.update_volume_taints("PersistentVolumeClaim", "ns", "v", "[]"),
        Request(
            "PATCH",
            "/api/v1/namespaces/ns/persistentvolumeclaims/v",
            {"metadata": {"annotations": {"resource.dra-extender.io/volume-taints": "[]"}}},
            "patch PersistentVolumeClaim ns/v volume taints",
            MERGE_PATCH,
        ),
    ),
    (
        "a volume's volume taints (cluster-scoped)",
        lambda w: w.update_volume_taints("PersistentVolume", "", "v", "[]"),
        Request(
            "PATCH",
            "/api/v1/persistentvolumes/v",
            {"metadata": {"annotations": {"resource.dra-extender.io/volume-taints": "[]"}}},
            "patch PersistentVolume v volume taints",
            MERGE_PATCH,
        ),
    ),
    (
        "list the health rules",
        lambda w: w.list_own_rules(POLICY_LABEL),
        Request("GET", OWN, None, f"list DeviceTaintRule with labelSelector {POLICY_LABEL}", query=(("labelSelector", POLICY_LABEL),)),
    ),
    ("create a health rule", lambda w: w.create_own_rule(RULE), Request("POST", OWN, RULE, "create DeviceTaintRule gpu-health.xid.abc")),
    (
        "patch a health rule",
        lambda w: w.patch_own_rule("r", {"spec": {}}),
        Request("PATCH", f"{OWN}/r", {"spec": {}}, "patch DeviceTaintRule r", MERGE_PATCH),
    ),
    ("delete a health rule", lambda w: w.delete_own_rule("r"), Request("DELETE", f"{OWN}/r", {}, "delete DeviceTaintRule r")),
    (
        "a policy's status",
        lambda w: w.update_policy_status("gpu-health", {"observedGeneration": 1}),
        Request(
            "PATCH",
            f"{POLICIES}/gpu-health/status",
            {"status": {"observedGeneration": 1}},
            "patch DeviceHealthPolicy gpu-health status",
            MERGE_PATCH,
        ),
    ),
    (
        "remove the health leader label",
        lambda w: w.label_pod("ns", "p", {"resource.dra-extender.io/health-leader": None}),
        Request(
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {"metadata": {"labels": {"resource.dra-extender.io/health-leader": None}}},
            "patch Pod ns/p label resource.dra-extender.io/health-leader",
            MERGE_PATCH,
        ),
    ),
]


@pytest.mark.parametrize(("write", "want"), [pytest.param(w, r, id=n) for n, w, r in ROWS])
async def test_each_write_is_one_request(write: Write, want: Request) -> None:
    w = Recorded()
    await write(w)
    assert w.sent == [want]


async def test_an_event_is_created_in_its_objects_namespace() -> None:
    w = Recorded()
    await w.create_event(EVENT)
    [req] = w.sent
    assert (req.method, req.path, req.what, req.content_type) == ("POST", "/api/v1/namespaces/ns/events", "create Event", JSON)
    assert req.body == {
        **requests.event(EVENT).body,
        "firstTimestamp": req.body["firstTimestamp"],
        "lastTimestamp": req.body["lastTimestamp"],
    }
    assert req.body["involvedObject"] == EVENT["involvedObject"]


# ---------------------------------------------------------------------- through the fake API server


async def _source(api: FakeApiServer, tmp_path: Path) -> ApiSource:
    source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    await source.connect()
    return source


async def test_the_health_writes_reach_the_api_server(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create(pod("ext-a", "dra-system", labels={"app": "dra-extender"}))
        api.create(policy("gpu-health"))
        source = await _source(api, tmp_path)
        try:
            await source.create_own_rule(RULE)
            with pytest.raises(Conflict, match=re.escape("create DeviceTaintRule gpu-health.xid.abc")):
                await source.create_own_rule(RULE)
            await source.patch_own_rule("gpu-health.xid.abc", {"metadata": {"annotations": {"a": "b"}}})
            assert [r["metadata"]["annotations"] for r in await source.list_own_rules(POLICY_LABEL)] == [{"a": "b"}]
            await source.update_policy_status("gpu-health", {"observedGeneration": 1})
            assert (api.get("devicehealthpolicies", None, "gpu-health", group="resource.dra-extender.io") or {})["status"] == {
                "observedGeneration": 1
            }
            await source.label_pod("dra-system", "ext-a", {"leader": "true"})
            assert (api.get("pods", "dra-system", "ext-a") or {})["metadata"]["labels"] == {"app": "dra-extender", "leader": "true"}
            await source.label_pod("dra-system", "ext-a", {"leader": None})
            assert (api.get("pods", "dra-system", "ext-a") or {})["metadata"]["labels"] == {"app": "dra-extender"}
            await source.delete_own_rule("gpu-health.xid.abc")
            assert await source.list_own_rules(POLICY_LABEL) == []
        finally:
            await source.close()


# (name, faults on the fake API server (none: no fault), the write, the error raised, its HTTP status, failed for the server)
FAILURES: list[tuple[str, dict[str, Any] | None, Write, type[SourceError], int, bool]] = [
    ("a rule that is gone", None, lambda s: s.patch_own_rule("none", {"spec": {}}), NotFound, 404, False),
    ("a rule deleted twice", None, lambda s: s.delete_own_rule("none"), NotFound, 404, False),
    (
        "a rule its schema refuses",
        None,
        lambda s: s.create_own_rule({**RULE, "spec": {"taint": {"effect": "Sometimes"}}}),
        Invalid,
        422,
        False,
    ),
    (
        "the server failing",
        {"error_rate": 1.0, "error_status": 500, "verbs": ("patch",)},
        lambda s: s.update_policy_status("p", {}),
        SourceError,
        500,
        True,
    ),
    (
        "the server throttling",
        {"error_rate": 1.0, "error_status": 429, "verbs": ("create",)},
        lambda s: s.create_own_rule(RULE),
        SourceError,
        429,
        True,
    ),
    (
        "our identity refused",
        {"error_rate": 1.0, "error_status": 403, "verbs": ("list",)},
        lambda s: s.list_own_rules(POLICY_LABEL),
        SourceError,
        403,
        True,
    ),
]


@pytest.mark.parametrize(
    ("faults", "write", "error", "status", "wide"), [pytest.param(f, w, e, st, wd, id=n) for n, f, w, e, st, wd in FAILURES]
)
async def test_a_refusal_raises_the_error_failures_judge(
    tmp_path: Path, faults: dict[str, Any] | None, write: Write, error: type[SourceError], status: int, wide: bool
) -> None:
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        if faults is not None:
            api.set_faults(**faults)
        try:
            with pytest.raises(error) as caught:
                await write(source)
        finally:
            await source.close()
    assert caught.value.status == status
    assert server_wide(caught.value) is wide
