"""End to end: `dra-extender controllers --kubeconfig` evicts for a NoExecute rule, unless `--no-eviction` (here in `all`, whose /debug shows the rule held)."""

from __future__ import annotations

from kubesim.objects import node
from tests.e2e.cluster import CRD_GROUP, FakeApi, cluster_extender, holds, wait_converged, wait_for
from tests.eviction.harness import claim_and_pod, gpu_slice, rule


def rule_condition(api: FakeApi, name: str) -> dict | None:
    obj = api.get("DeviceTaintRule", None, name, group=CRD_GROUP) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "EvictionInProgress"), None)


def test_controllers_evict_for_a_noexecute_rule_and_not_with_no_eviction() -> None:
    api = FakeApi()
    try:
        api.control(
            "POST",
            "objects",
            {"kind": "List", "items": [node("node-a"), gpu_slice(2), *claim_and_pod("victim", 0), *claim_and_pod("bystander", 1)]},
        )
        off = cluster_extender(api, "--no-eviction", command="all")
        try:
            off.wait_ready()
            wait_for(lambda: "NoExecute evictions off" in off.logs(), timeout=10, what="the evictions-off log line")
            api.create(rule("drain", selector={"driver": "gpu.example.com", "device": "gpu-0"}))
            wait_converged(api, off)  # the rule is in the view: a running controller would now evict
            holds(
                lambda: api.get("Pod", "default", "victim") is not None and rule_condition(api, "drain") is None,
                1.0,
                what="the victim kept and the rule without status",
            )
        finally:
            off.stop()

        on = cluster_extender(api, command="controllers")
        try:
            on.wait_ready()
            wait_for(lambda: api.get("Pod", "default", "victim") is None, timeout=15, what="the victim deleted")
            assert api.get("Pod", "default", "bystander") is not None
            events = [e for e in api.list("Event") if e["involvedObject"].get("name") == "victim"]
            assert [(e["reason"], e["message"]) for e in events] == [("DeviceTaintManagerEviction", "Marking for deletion")]
            assert wait_for(lambda: rule_condition(api, "drain"), timeout=15, what="rule status")["type"] == "EvictionInProgress"
            metrics = on.http.get("/metrics").text
            assert f'dra_extender_eviction_pod_deletions_total{{result="ok",rule="DeviceTaintRule/{CRD_GROUP}/drain"}} 1.0' in metrics
        finally:
            on.stop()
        assert "deleted pod" in on.logs() and "pod=default/victim" in on.logs()
    finally:
        api.stop()
