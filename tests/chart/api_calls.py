"""The API calls the extender makes, as the fake API server's request log records them.

Runs the extender's flows that write or read the API (reflectors, /bind,
requeue nudges, NoExecute eviction in both modes, rule status and
timeAdded, events, the scheduler Lease it follows) against the in-repo fake
API server and turns each logged request into the (verb, group, resource)
that RBAC authorizes. Nothing here is written by hand from reading the code.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controllers.health.leader_label import LABEL as LEADER_LABEL
from extender.requeue import REQUEUE_ANNOTATION
from kubesim.objects import node
from tests.e2e.cluster import (
    CRD_GROUP,
    FakeApi,
    cluster_extender,
    wait_converged,
    wait_for,
)
from tests.e2e.harness import DEMO, free_port
from tests.e2e.test_cluster_mode import (
    add_node,
    add_pod,
    bind_args,
    pod_args,
    reasons,
    taint_rule,
)
from tests.eviction.harness import claim_and_pod, gpu_slice, rule
from tracker.timestamps import rfc3339

NAMESPACE = "dra-system"
LEASE = "dra-scheduler"


@dataclass(frozen=True, order=True)
class ApiCall:
    verb: str  # RBAC verb: get list watch create update patch delete
    group: str
    resource: str  # with /subresource
    name: str = ""  # for get/update/patch/delete on one object

    def __str__(self) -> str:
        return f"{self.verb} {self.group or 'core'}/{self.resource}{f' {self.name}' if self.name else ''}"


def api_call(method: str, path: str, query: dict[str, str]) -> ApiCall | None:
    """RBAC's view of one request path; None for discovery and other non-resource URLs."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "watch" if query.get("watch") in ("1", "true") else ("get" if name else "list")
    if verb == "create" and not sub:
        name = ""
    return ApiCall(verb, group, f"{resource}/{sub}" if sub else resource, name)


def _micro_now() -> str:
    return rfc3339(micro=True)


def _lease(holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "renewTime": _micro_now(), "acquireTime": _micro_now()},
    }


def _must(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    return obj


def _extended_resource_binds(api: FakeApi, ext: Any) -> None:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "rbac-er"},
            "spec": {
                "extendedResourceName": "example.com/rbac-gpu",
                "selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
            },
        }
    )
    api.create(node("node-rbac-er"))
    api.create(gpu_slice(2, node_name="node-rbac-er"))
    uids = []
    for name in ("rbac-er-ok", "rbac-er-late"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"example.com/rbac-gpu": "1"}}}]
            },
        }
        uids.append(api.create(pod)["metadata"]["uid"])
    wait_converged(api, ext)
    assert ext.post("bind", bind_args("rbac-er-ok", uids[0], "node-rbac-er")).json() == {"Error": ""}
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "rbac-er-late"}, "target": {"kind": "Node", "name": "node-a"}}
    api.http.post("/api/v1/namespaces/default/pods/rbac-er-late/binding", json=binding)
    assert ext.post("bind", bind_args("rbac-er-late", uids[1], "node-rbac-er")).json()["Error"]


def seed(api: FakeApi, *objs: dict[str, Any]) -> None:
    """Objects as they are, uids included (the claims' reservations name the pods' uids)."""
    api.control("POST", "objects", {"kind": "List", "items": list(objs)})


COMPONENTS = ("serve", "controllers")


def record_extender_calls() -> dict[str, set[ApiCall]]:
    """Every distinct API call of the chart's configuration, by component (the request's User-Agent): the sidecar
    following the scheduler's Lease, the controllers electing theirs; both eviction modes."""
    api = FakeApi(DEMO)
    try:
        api.create(_lease("rbac-a_0001"))
        follow = ("--follow-scheduler-lease", f"{NAMESPACE}/{LEASE}")
        # The alert receiver as the chart runs it: the health leader labels its own pod (POD_NAME, the downward API's).
        api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-a", "namespace": NAMESPACE}, "spec": {"containers": []}})
        token = Path(tempfile.mkdtemp()) / "token"
        token.write_text("rbac-token\n")
        alerts = ("--alerts-listen", f"127.0.0.1:{free_port()}", "--alerts-token-file", str(token))
        ext = cluster_extender(api, *follow, env={"HOSTNAME": "rbac-a", "POD_NAMESPACE": NAMESPACE})
        ctl = cluster_extender(
            api, "--leader-elect", *alerts, "--eviction-mode", "delete", "--scheduler-name", "dra-scheduler",
            env={"HOSTNAME": "rbac-a", "POD_NAME": "rbac-a", "POD_NAMESPACE": NAMESPACE}, command="controllers",
        )  # fmt: skip
        try:
            ext.wait_ready(120)  # two processes start at once on cores shared with other runs
            ctl.wait_ready(120)
            wait_converged(api, ext)
            wait_for(lambda: ext.http.get("/metrics").text.count('dra_extender_leader{role="verbs"} 1.0'), what="leadership")
            wait_for(
                lambda: ctl.http.get("/metrics").text.count('dra_extender_leader{role="controllers"} 1.0'),
                what="the controllers' leadership",
            )
            wait_for(
                lambda: (_must(api.get("Pod", NAMESPACE, "rbac-a"))["metadata"].get("labels") or {}).get(LEADER_LABEL) == "true",
                what="the health leader label on the own pod",
            )
            # /bind: claim finalizer, allocation and reservation, the Binding.
            uid = _must(api.get("Pod", "default", "trainer"))["metadata"]["uid"]
            assert ext.post("bind", bind_args("trainer", uid, "node-a")).json() == {"Error": ""}
            # DRA-backed extended resources: the claim is created at /bind, the pod's status patched;
            # a bind that fails after creating it deletes it.
            _extended_resource_binds(api, ext)
            # A rejected pod is nudged when its taint goes away; a faulty rule gets a Warning event.
            add_node(api, "node-rbac", 1)
            api.create(taint_rule(f"{CRD_GROUP}/v1alpha1", "rbac-maintenance", "node-rbac", "example.com/maintenance"))
            pod_uid = add_pod(api, "rbac-nudged", "rbac-nudged")
            wait_converged(api, ext)
            assert reasons(ext, pod_args("rbac-nudged", "rbac-nudged", ["node-rbac"], uid=pod_uid))["node-rbac"]
            api.delete("DeviceTaintRule", None, "rbac-maintenance", group=CRD_GROUP)
            wait_for(
                lambda: REQUEUE_ANNOTATION in (_must(api.get("Pod", "default", "rbac-nudged"))["metadata"].get("annotations") or {}),
                what="the nudge",
            )
            # NoExecute, delete mode: timeAdded, the DisruptionTarget condition, the deletion, events, rule status.
            api.create(node("node-evict"))
            api.create(gpu_slice(2, node_name="node-evict"))
            seed(api, *claim_and_pod("victim-a", 0, node_name="node-evict"))
            api.create(rule("rbac-drain-a", selector={"driver": "gpu.example.com", "pool": "node-evict", "device": "gpu-0"}))
            wait_for(lambda: api.get("Pod", "default", "victim-a") is None, timeout=20, what="victim-a deleted")
            api.create(rule("rbac-dry", "None", selector={"driver": "gpu.example.com", "pool": "node-evict"}))
            wait_for(
                lambda: (api.get("DeviceTaintRule", None, "rbac-dry", group=CRD_GROUP) or {}).get("status"),
                timeout=20,
                what="dry-run status",
            )
            _health_flow(api)
        finally:
            ext.stop()
            ctl.stop()
        # The next replica's scheduler takes the Lease; evict mode, and upstream rules on request.
        lease = api.get("Lease", NAMESPACE, LEASE)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "rbac-b_0002"
        lease["spec"]["renewTime"] = _micro_now()
        api.replace(lease)
        ext = cluster_extender(api, *follow, env={"HOSTNAME": "rbac-b", "POD_NAMESPACE": NAMESPACE})
        ctl = cluster_extender(
            api, "--leader-elect", "--eviction-mode", "evict", "--evict-upstream", env={"HOSTNAME": "rbac-b", "POD_NAMESPACE": NAMESPACE},
            command="controllers",
        )  # fmt: skip
        try:
            ext.wait_ready(120)  # two processes start at once on cores shared with other runs
            ctl.wait_ready(120)
            seed(api, *claim_and_pod("victim-b", 1, node_name="node-evict"))
            api.create(
                rule(
                    "rbac-drain-b", group="resource.k8s.io", selector={"driver": "gpu.example.com", "pool": "node-evict", "device": "gpu-1"}
                )
            )
            wait_for(lambda: api.get("Pod", "default", "victim-b") is None, timeout=30, what="victim-b evicted")
            wait_for(
                lambda: (api.get("DeviceTaintRule", None, "rbac-drain-b", group="resource.k8s.io") or {}).get("status"),
                timeout=20,
                what="upstream rule status",
            )
            time.sleep(0.5)
        finally:
            ext.stop()
            ctl.stop()
        calls: dict[str, set[ApiCall]] = {c: set() for c in COMPONENTS}
        records: list[dict[str, Any]] = api.requests()
        for r in records:
            component = next((c for c in COMPONENTS if r["user_agent"].startswith(f"dra-extender-{c}/")), None)
            if component is None:
                assert r["user_agent"].startswith("python-httpx/"), r  # the test's own client (tests/e2e/cluster.py)
                continue
            call = api_call(r["method"], r["path"], r.get("query") or {})
            if call is not None:
                calls[component].add(call)
        return calls
    finally:
        api.stop()


def _health_flow(api: FakeApi) -> None:
    """The health controller: a policy takes up a driver taint (a rule created, the policy's status); the device gone, the rule deleted."""
    policy = {
        "apiVersion": f"{CRD_GROUP}/v1alpha1",
        "kind": "DeviceHealthPolicy",
        "metadata": {"name": "rbac-health"},
        "spec": {
            "rules": [
                {
                    "name": "flagged",
                    "signal": {"driverTaint": {"key": "example.com/rbac-health"}},
                    "devices": {"driver": "gpu.example.com"},
                    "taint": {"key": "example.com/rbac-health-policy"},
                    "steps": [{"effect": "NoSchedule"}],
                    "clearAfter": "1s",
                }
            ]
        },
    }
    api.create(node("node-health"))
    api.create(gpu_slice(1, node_name="node-health", taints={0: [{"key": "example.com/rbac-health", "effect": "None"}]}))
    api.create(policy)

    def health_rules() -> list[dict[str, Any]]:
        return [
            r
            for r in api.list("DeviceTaintRule", group=CRD_GROUP)
            if "resource.dra-extender.io/health-policy" in (r["metadata"].get("labels") or {})
        ]

    wait_for(lambda: len(health_rules()) == 1, timeout=20, what="the health rule")
    api.delete("ResourceSlice", None, "node-health-gpus")
    wait_for(lambda: not health_rules(), timeout=20, what="the health rule cleared")
