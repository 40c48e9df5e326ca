"""End to end: `dra-extender serve --source DIR` driven over HTTP in the scheduler's wire format."""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

import pytest

from kubesim.objects import claim
from tests.e2e.harness import DEMO, DEMO_UIDS, Extender, demo_pod_args, filter_args, sample

ALL = ["node-a", "node-b", "node-c"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Extender:
    """A read-only demo extender shared by the tests that only filter/prioritize."""
    directory = tmp_path_factory.mktemp("demo")
    shutil.copytree(DEMO, directory, dirs_exist_ok=True)
    ext = Extender("--source", str(directory))
    ext.wait_ready()
    yield ext
    ext.stop()


@pytest.fixture
def fresh(tmp_path) -> tuple[Extender, Path]:
    """A private extender over a private copy of the demo, for tests that change state."""
    directory = tmp_path / "cluster"
    shutil.copytree(DEMO, directory)
    ext = Extender("--source", str(directory))
    ext.wait_ready()
    yield ext, directory
    ext.stop()


def filter_ok(ext: Extender, body: dict) -> dict:
    resp = ext.post("filter", body)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    return result


# ----------------------------------------------------------------------------- filter decisions

FILTER_CASES = [
    # name, pod, passes, {failing node: substring of its reason}
    (
        "rule-taint-not-tolerated",
        "trainer",
        ["node-a", "node-b"],
        {
            "node-c": "claim default/gpu-claim, request gpu: 0 of 1 devices available: 2 tainted (example.com/maintenance=planned:NoSchedule not tolerated)"
        },
    ),
    (
        "rule-taint-tolerated",
        "maintenance-job",
        ["node-c"],
        {"node-a": "0 of 1 devices available: 2 not matching the request's selectors", "node-b": "not matching"},
    ),
    (
        "driver-noexecute-taint-and-none-effect",
        "pair",
        ["node-a"],
        {"node-b": "1 of 2 devices available: 1 tainted (gpu.example.com/xid=79:NoExecute not tolerated)", "node-c": "0 of 2"},
    ),
    ("template-claim", "templated", ["node-a", "node-b"], {"node-c": "claim default/templated-gpu-x7k2p"}),
    (
        "first-available-and-network-pool",
        "gpu-and-nic",
        ["node-a", "node-b"],
        {"node-c": "request gpu: no subrequest can be satisfied: gpu/large: 0 of 1"},
    ),
    ("pod-without-claims", "plain", ALL, {}),
]


@pytest.mark.parametrize(("pod", "passes", "failures"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES])
def test_filter_decisions(demo: Extender, pod: str, passes: list[str], failures: dict[str, str]) -> None:
    result = filter_ok(demo, demo_pod_args(pod, ALL))
    assert result["Error"] == ""
    assert result["NodeNames"] == passes
    assert result["Nodes"] is None
    assert result["FailedNodes"] == {}  # device reasons are never preemptible (docs/design.md#which-map)
    assert set(result["FailedAndUnresolvableNodes"]) == set(failures)
    for node, reason in failures.items():
        assert reason in result["FailedAndUnresolvableNodes"][node]


def test_real_scheduler_sample_without_claims_passes(demo: Extender) -> None:
    body = sample("ncc-true-filter-1.json")
    result = filter_ok(demo, body)
    assert result["NodeNames"] == body["NodeNames"]


def test_missing_claim_fails_every_node_naming_it(demo: Extender) -> None:
    # The real sample: pod "dra" with claim "one-gpu", which the demo does not have.
    result = filter_ok(demo, sample("ncc-true-filter-2.json"))
    assert result["NodeNames"] == []
    assert "claim default/one-gpu" in result["FailedAndUnresolvableNodes"]["fake-node-1"]


def test_unknown_node_name_has_no_devices(demo: Extender) -> None:
    result = filter_ok(demo, demo_pod_args("trainer", ["node-a", "ghost"]))
    assert result["NodeNames"] == ["node-a"]
    assert "ghost" in result["FailedAndUnresolvableNodes"]


def test_nodes_form_answered_in_kind(demo: Extender) -> None:
    body = sample("ncc-false-filter-1.json")
    template = body["Nodes"]["items"][0]
    items = []
    for name in ALL:
        node = copy.deepcopy(template)
        node["metadata"]["name"] = name
        node["metadata"]["labels"] = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "west" if name == "node-c" else "east"}
        items.append(node)
    args = demo_pod_args("gpu-and-nic", [])
    args["NodeNames"] = None
    args["Nodes"] = {**body["Nodes"], "items": items}
    result = filter_ok(demo, args)
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["node-a", "node-b"]
    assert "node-c" in result["FailedAndUnresolvableNodes"]


def test_keys_are_read_case_insensitively(demo: Extender) -> None:
    body = demo_pod_args("trainer", ALL)
    lowered = {"pod": body["Pod"], "nodes": None, "nodenames": body["NodeNames"]}
    result = filter_ok(demo, lowered)
    assert result["NodeNames"] == ["node-a", "node-b"]


def test_never_returns_a_name_not_sent(demo: Extender) -> None:
    result = filter_ok(demo, demo_pod_args("trainer", ["node-b"]))
    assert result["NodeNames"] == ["node-b"]
    assert set(result["FailedAndUnresolvableNodes"]) <= {"node-b"}


# ----------------------------------------------------------------------------- prioritize


def test_prioritize_prefers_healthy_devices(demo: Extender) -> None:
    body = demo_pod_args("pair", ["node-a", "node-b"])
    resp = demo.post("prioritize", body)
    assert resp.status_code == 200
    scores = {e["Host"]: e["Score"] for e in resp.json()}
    assert set(scores) == {"node-a", "node-b"}
    assert all(0 <= s <= 10 for s in scores.values())
    # pair fits only node-a, and uses an unmonitored (None-tainted) GPU there.
    assert scores["node-b"] == 0 and 0 < scores["node-a"] < 10


def test_prioritize_real_sample_without_claims(demo: Extender) -> None:
    body = sample("ncc-true-prioritize-1.json")
    resp = demo.post("prioritize", body)
    assert resp.json() == [{"Host": n, "Score": 0} for n in body["NodeNames"]]


# ----------------------------------------------------------------------------- bind


def bind_args(pod: str, node: str) -> dict:
    body = sample("ncc-true-bind-1.json")
    return {**body, "PodName": pod, "PodUID": DEMO_UIDS[pod], "Node": node}


def test_bind_then_filter_sees_devices_taken(fresh) -> None:
    ext, _ = fresh
    assert ext.post("bind", bind_args("trainer", "node-a")).json() == {"Error": ""}
    # node-a has two GPUs; trainer took gpu-0, so "pair" (two GPUs) no longer fits there.
    result = filter_ok(ext, demo_pod_args("pair", ["node-a"]))
    assert result["NodeNames"] == []
    assert "1 allocated" in result["FailedAndUnresolvableNodes"]["node-a"]
    devices = ext.http.get("/debug/devices", params={"node": "node-a"}).json()["items"]
    assert {d["device"]: d["allocatedTo"] for d in devices} == {"gpu-0": "default/gpu-claim", "gpu-1": None, "nic-0": None, "nic-1": None}
    # The same pod's claim is now allocated: filtering it again only checks the node.
    again = filter_ok(ext, demo_pod_args("trainer", ALL))
    assert again["NodeNames"] == ["node-a"]


def test_bind_conflict_names_the_devices(fresh) -> None:
    ext, _ = fresh
    assert ext.post("bind", bind_args("trainer", "node-b")).json() == {"Error": ""}
    error = ext.post("bind", bind_args("templated", "node-b")).json()["Error"]
    assert "claim default/templated-gpu-x7k2p" in error
    assert "1 allocated" in error and "gpu.example.com/xid=79:NoExecute" in error


def test_bind_pod_without_claims(fresh) -> None:
    ext, _ = fresh
    assert ext.post("bind", bind_args("plain", "node-c")).json() == {"Error": ""}
    # Binding it twice is a conflict the scheduler must hear about.
    assert "already" in ext.post("bind", bind_args("plain", "node-c")).json()["Error"]


def test_bind_unknown_pod(fresh) -> None:
    ext, _ = fresh
    assert "not found" in ext.post("bind", {**bind_args("plain", "node-a"), "PodName": "ghost"}).json()["Error"]


# ----------------------------------------------------------------------------- live reload


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_rule_file_added_then_deleted(fresh) -> None:
    ext, directory = fresh
    rule = directory / "extra" / "node-a-rule.yaml"
    rule.parent.mkdir()
    rule.write_text(
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: DeviceTaintRule\nmetadata: {name: node-a-broken}\n"
        "spec:\n  deviceSelector: {driver: gpu.example.com, pool: node-a}\n"
        "  taint: {key: example.com/broken, effect: NoExecute}\n"
    )

    def node_a_passes() -> bool:
        return "node-a" in filter_ok(ext, demo_pod_args("trainer", ALL))["NodeNames"]

    wait_for(lambda: not node_a_passes())
    reason = filter_ok(ext, demo_pod_args("trainer", ALL))["FailedAndUnresolvableNodes"]["node-a"]
    assert "example.com/broken:NoExecute not tolerated" in reason
    rule.unlink()
    wait_for(node_a_passes)


def test_unknown_effect_and_none_effect_never_block(fresh) -> None:
    ext, directory = fresh
    (directory / "odd.yaml").write_text(
        "apiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: odd}\n"
        "spec:\n  deviceSelector: {driver: gpu.example.com}\n  taint: {key: example.com/odd, effect: SomethingNew}\n"
        "---\napiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: fyi}\n"
        "spec:\n  deviceSelector: {driver: gpu.example.com}\n  taint: {key: example.com/fyi, effect: None}\n"
    )
    wait_for(lambda: any(t["key"] == "example.com/odd" for d in ext.http.get("/debug/devices").json()["items"] for t in d["taints"]))
    assert filter_ok(ext, demo_pod_args("trainer", ALL))["NodeNames"] == ["node-a", "node-b"]


def test_malformed_file_beside_good_ones(tmp_path) -> None:
    directory = tmp_path / "cluster"
    shutil.copytree(DEMO, directory)
    (directory / "broken.yaml").write_text("kind: [unclosed\n  - : :\n")
    (directory / "bad-object.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec: {devices: {requests: [{name: x}]}}\n"
    )
    ext = Extender("--source", str(directory))
    try:
        ext.wait_ready()
        assert filter_ok(ext, demo_pod_args("trainer", ALL))["NodeNames"] == ["node-a", "node-b"]
        logs = ext.logs()
        assert "broken.yaml" in logs and "bad-object.yaml" in logs
    finally:
        ext.stop()


# ----------------------------------------------------------------------------- HTTP edges


@pytest.mark.parametrize(
    ("verb", "body", "field"),
    [
        ("filter", b"", ""),
        ("filter", b"{not json", ""),
        ("filter", b"[]", ""),
        ("filter", json.dumps({"NodeNames": ["a"]}).encode(), "Pod"),
        ("filter", json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}).encode(), "NodeNames"),
        ("prioritize", json.dumps({"Pod": 3}).encode(), "Pod"),
        ("bind", json.dumps({"PodName": "p"}).encode(), "Node"),
        ("bind", json.dumps({"PodName": 1, "Node": "n"}).encode(), "PodName"),
    ],
    ids=["empty", "not-json", "not-object", "no-pod", "nodenames-not-list", "pod-not-object", "bind-no-node", "bind-name-type"],
)
def test_malformed_bodies_get_400_naming_the_field(demo: Extender, verb: str, body: bytes, field: str) -> None:
    resp = demo.post(verb, body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["field"] == field


def test_health_and_metrics(demo: Extender) -> None:
    assert demo.http.get("/livez").status_code == 200
    assert demo.http.get("/healthz").status_code == 200
    assert demo.http.get("/readyz").status_code == 200
    demo.post("filter", demo_pod_args("trainer", ALL))
    text = demo.http.get("/metrics").text
    assert 'dra_extender_request_duration_seconds_count{verb="filter"}' in text
    assert 'dra_extender_devices{state="tainted"}' in text
    assert "dra_extender_ready 1.0" in text


def test_probe_listener_serves_only_probes(tmp_path) -> None:
    from tests.e2e.harness import free_port

    port = free_port()
    ext = Extender("--source", str(DEMO), "--probe-listen", f"127.0.0.1:{port}")
    try:
        ext.wait_ready()
        import httpx

        probe = httpx.Client(base_url=f"http://127.0.0.1:{port}")
        assert probe.get("/readyz").status_code == 200
        assert probe.get("/metrics").status_code == 200
        assert probe.post("/filter", content=b"{}").status_code == 404
        probe.close()
    finally:
        ext.stop()


def test_no_source_exits_2_naming_the_options(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "dra_extender.cli", "serve"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "KUBERNETES_SERVICE_HOST" in proc.stderr and "kubeconfig" in proc.stderr and "--source" in proc.stderr


def test_json_logs(tmp_path) -> None:
    ext = Extender("--source", str(DEMO), "--log-format", "json", command="all")
    try:
        ext.wait_ready()
    finally:
        ext.stop()
    lines = [json.loads(line) for line in ext.logs().splitlines() if line.startswith("{")]
    assert lines and all({"ts", "caller", "msg", "v"} <= set(line) for line in lines)
    # The eviction controller runs (on by default) and says how it is set up.
    started = [line for line in lines if line["msg"] == "eviction controller started"]
    assert started and started[0]["mode"] == "delete" and started[0]["evict_upstream"] is False


def test_no_eviction_warning_with_no_eviction(tmp_path) -> None:
    ext = Extender("--source", str(DEMO), "--no-eviction", command="all")
    try:
        ext.wait_ready()
    finally:
        ext.stop()
    assert "eviction controller" not in ext.logs()


# ----------------------------------------------------------------------------- counts, All, constraints

TOLERATE_ALL = [{"operator": "Exists"}]


def _claim(name: str, exactly: dict, constraints: list | None = None) -> dict:
    out = claim(name, device_class="gpu.example.com", exactly=exactly)
    if constraints:
        out["spec"]["devices"]["constraints"] = constraints
    return out


SHAPE_CLAIMS = [
    _claim("all-gpus", {"allocationMode": "All"}),
    _claim("all-gpus-tolerant", {"allocationMode": "All", "tolerations": TOLERATE_ALL}),
    _claim("three-gpus", {"count": 3, "tolerations": TOLERATE_ALL}),
    _claim("same-numa", {"count": 2, "tolerations": TOLERATE_ALL}, [{"matchAttribute": "gpu.example.com/numa"}]),
    _claim("same-model", {"count": 2, "tolerations": TOLERATE_ALL}, [{"matchAttribute": "gpu.example.com/model"}]),
    _claim("distinct-numa", {"count": 2, "tolerations": TOLERATE_ALL}, [{"distinctAttribute": "gpu.example.com/numa"}]),
]

SHAPE_CASES = [
    # name, claim, nodes that pass, {node: substring of its reason}
    (
        "all-blocked-by-one-untolerated-taint",
        "all-gpus",
        ["node-a"],  # node-a's None taint does not block; node-b's xid and node-c's maintenance do
        {"node-b": "gpu.example.com/xid=79:NoExecute", "node-c": "example.com/maintenance"},
    ),
    ("all-tolerating-everything", "all-gpus-tolerant", ALL, {}),
    ("count-more-than-a-node-has", "three-gpus", [], {n: "2 of 3 devices available: only 2 devices of class gpu.example.com" for n in ALL}),
    ("match-attribute-unsatisfiable", "same-numa", [], {"node-a": "gpu.example.com/numa"}),
    ("match-attribute-satisfied", "same-model", ALL, {}),
    ("distinct-attribute-satisfied", "distinct-numa", ALL, {}),
]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Extender:
    directory = tmp_path_factory.mktemp("shapes") / "cluster"
    shutil.copytree(DEMO, directory)
    (directory / "shape-claims.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": SHAPE_CLAIMS}))
    ext = Extender("--source", str(directory))
    ext.wait_ready()
    yield ext
    ext.stop()


@pytest.mark.parametrize(("claim", "passes", "reasons"), [c[1:] for c in SHAPE_CASES], ids=[c[0] for c in SHAPE_CASES])
def test_counts_all_and_constraints(shapes: Extender, claim: str, passes: list[str], reasons: dict[str, str]) -> None:
    result = filter_ok(shapes, filter_args(f"pod-{claim}", [{"name": "gpu", "resourceClaimName": claim}], ALL))
    assert result["NodeNames"] == passes
    failed = result["FailedAndUnresolvableNodes"]
    assert sorted(failed) == sorted(set(ALL) - set(passes))
    for reason in failed.values():
        assert f"claim default/{claim}" in reason, reason
    for node, substring in reasons.items():
        assert substring in failed[node], failed[node]
