"""The chart's RBAC covers every API call each component makes (the sidecar's `serve`, `controllers`), and grants
nothing it does not make: each ServiceAccount's roles against the calls of the process that runs as it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.api_calls import LEASE, ApiCall, api_call, record_extender_calls
from tests.chart.render import objects, one

CONTROLLERS_LEASE = "dra-extender-controllers"
# component -> (its ClusterRole's name suffix, its Lease Role's name suffix)
ROLES = {"serve": ("-extender", "-dra-extender-lease"), "controllers": ("-controllers", "-controllers-lease")}

# Granted although no flow here makes the call yet: each with its reason.
GRANTED_AHEAD = {
    "controllers": {
        # The eviction controller stamps timeAdded into a NoUse volume taint's annotation
        # (tracker/apiserver/writes.py update_volume_taints; tests/eviction/test_volume_taints.py drives it).
        ("patch", "", "persistentvolumeclaims"),
        ("patch", "", "persistentvolumes"),
    },
    "serve": {
        # /bind re-reads a pod or claim its view lacks or holds stale (extender/bind/binder.py `source.get`);
        # tests/e2e/test_cluster_mode.py::test_bind_fetches_a_claim_missing_from_the_cache drives it.
        ("get", "", "pods"),
        ("get", "resource.k8s.io", "resourceclaims"),
        # Warning Events on faulty objects (a class, rule or patch whose CEL fails; tracker/k8s_events.py), which
        # every process tells: the flows here hold no faulty object, and the controllers' Events are theirs.
        ("create", "", "events"),
    },
}


def _covers(rule: dict[str, Any], call: ApiCall) -> bool:
    if call.group not in rule["apiGroups"] and "*" not in rule["apiGroups"]:
        return False
    if call.resource not in rule["resources"] and "*" not in rule["resources"]:
        return False
    if call.verb not in rule["verbs"] and "*" not in rule["verbs"]:
        return False
    names = rule.get("resourceNames")
    return not names or (call.verb != "create" and call.name in names) or (call.verb == "create" and not call.name)


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.fixture(scope="module")
def calls() -> dict[str, set[ApiCall]]:
    return record_extender_calls()


def test_request_paths_map_to_rbac_attributes() -> None:
    assert api_call("GET", "/api/v1/pods", {"watch": "1"}) == ApiCall("watch", "", "pods")
    assert api_call("POST", "/api/v1/namespaces/d/pods/p/binding", {}) == ApiCall("create", "", "pods/binding", "p")
    assert api_call("PATCH", "/apis/resource.k8s.io/v1/namespaces/d/resourceclaims/c/status", {}) == ApiCall(
        "patch", "resource.k8s.io", "resourceclaims/status", "c"
    )
    assert api_call("GET", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l", {}) == ApiCall("get", "coordination.k8s.io", "leases", "l")
    assert api_call("POST", "/api/v1/namespaces/d/events", {}) == ApiCall("create", "", "events")
    assert api_call("GET", "/apis/resource.k8s.io/v1", {}) is None


# component -> writes its flows must reach (a flow that silently stopped early would prove little)
EXPECTED = {
    "serve": (
        "create /pods/binding",
        "patch /pods/status",
        "patch /pods",
        "patch resource.k8s.io/resourceclaims/status",
        f"get coordination.k8s.io/leases {LEASE}",
    ),
    "controllers": (
        "create /pods/eviction",
        "delete /pods",
        "patch /pods/status",
        "patch /pods",
        "patch resource.dra-extender.io/devicetaintrules/status",
        "create resource.dra-extender.io/devicetaintrules",
        "create /events",
        f"update coordination.k8s.io/leases {CONTROLLERS_LEASE}",
    ),
}


@pytest.mark.parametrize("component", list(ROLES))
def test_rbac_covers_every_call_the_component_makes(calls: dict[str, set[ApiCall]], component: str) -> None:
    objs = objects()
    cluster_suffix, lease_suffix = ROLES[component]
    cluster_rules = one(objs, "ClusterRole", cluster_suffix)["rules"]
    lease_rules = one(objs, "Role", lease_suffix)["rules"]
    made = calls[component]
    for expected in EXPECTED[component]:
        verb, _, rest = expected.partition(" ")
        assert any(
            c.verb == verb and str(c).startswith(f"{verb} {rest.replace('/', 'core/', 1) if rest.startswith('/') else rest}") for c in made
        ), (expected, sorted(map(str, made)))
    missing = []
    for call in sorted(made):
        rules = lease_rules if call.resource == "leases" else cluster_rules
        if not any(_covers(r, call) for r in rules):
            missing.append(str(call))
    assert not missing, f"the chart's RBAC for {component} does not allow: {missing}"


@pytest.mark.parametrize("component", list(ROLES))
def test_rbac_grants_only_calls_the_component_makes(calls: dict[str, set[ApiCall]], component: str) -> None:
    cluster_rules = one(objects(), "ClusterRole", ROLES[component][0])["rules"]
    used = {(c.verb, c.group, c.resource) for c in calls[component]}
    unused = sorted(_granted(cluster_rules) - used - GRANTED_AHEAD[component])
    assert not unused, f"granted to {component} but never used by it: {unused}"


def test_serve_writes_nothing_only_the_controllers_write(calls: dict[str, set[ApiCall]]) -> None:
    """The sidecar makes none of the controllers' writes (the chart's split holds in the calls, not only the roles)."""
    controllers_only = {("delete", "", "pods"), ("create", "", "pods/eviction"), ("create", "resource.dra-extender.io", "devicetaintrules")}
    assert not controllers_only & {(c.verb, c.group, c.resource) for c in calls["serve"]}


def test_scheduler_roles_are_bound() -> None:
    bound = {o["roleRef"]["name"] for o in objects() if o["kind"] == "ClusterRoleBinding"}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound
    lease_rules = one(objects(), "Role", "-dra-extender-lease")["rules"]
    assert any(LEASE in (r.get("resourceNames") or []) and {"get", "update"} <= set(r["verbs"]) for r in lease_rules)
