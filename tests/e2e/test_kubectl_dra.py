"""`kubectl dra` against the fake API server, beside a cluster-mode extender.

The docs' walkthrough (docs/operator-guide.md) is this flow: taint with
effect None, explain the rule (the eviction controller's own dry run),
NoSchedule (/filter rejects), `why` (the same reasons as /filter), untaint
(/filter accepts again).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kubectl_dra.cli import main
from tests.e2e.cluster import (
    CRD_GROUP,
    FakeApi,
    serving,
    wait_converged,
    wait_for,
)
from tests.e2e.harness import DEMO, ROOT, Extender
from tests.e2e.test_cluster_mode import add_node, add_pod, pod_args, reasons
from tests.eviction.harness import claim_and_pod

MANAGED = {"app.kubernetes.io/managed-by": "kubectl-dra"}


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[FakeApi, Extender]]:
    api = FakeApi(DEMO)
    # No waits: every /filter here is a question, never followed by a /bind.
    with serving(api, "--placement-wait", "0", "--claim-wait", "0", command="all") as ext:
        yield api, ext


def dra(api: FakeApi, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl dra --kubeconfig <the fake's> ARGS`, in this process (its entry point; the help test runs the script)."""
    argv = ["--kubeconfig", str(api.kubeconfig), *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse errors
            code = int(e.code or 0)
    result = subprocess.CompletedProcess(["kubectl-dra", *argv], code, out.getvalue(), err.getvalue())
    if ok:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def dra_json(api: FakeApi, *args: str) -> Any:
    return json.loads(dra(api, *args, "-o", "json").stdout)


def all_nodes(api: FakeApi) -> list[str]:
    return sorted(n["metadata"]["name"] for n in api.list("Node"))


def test_taint_rejects_at_filter_and_untaint_accepts_again(live) -> None:
    api, ext = live
    add_node(api, "node-k", 1)
    uid = add_pod(api, "k-pod", "k-claim")
    wait_converged(api, ext)
    assert reasons(ext, pod_args("k-pod", "k-claim", ["node-k"], uid=uid))["node-k"] is None

    out = dra(
        api, "taint", "example.com/maintenance=planned:NoSchedule", "--driver", "gpu.example.com", "--pool", "node-k", "--name", "k-maint"
    ).stdout
    assert out.strip() == f"devicetaintrule.{CRD_GROUP}/k-maint created"
    rule = api.get("DeviceTaintRule", None, "k-maint", group=CRD_GROUP)
    assert rule is not None and rule["metadata"]["labels"] == MANAGED
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.example.com", "pool": "node-k"}
    wait_converged(api, ext)
    why = reasons(ext, pod_args("k-pod", "k-claim", ["node-k"], uid=uid))["node-k"]
    assert why is not None and "example.com/maintenance=planned:NoSchedule not tolerated" in why, why

    devices = dra_json(api, "devices", "--node", "node-k", "--tainted")
    assert [(d["device"], d["taints"], d["sources"]) for d in devices] == [
        ("gpu-0", ["example.com/maintenance=planned:NoSchedule"], ["rule/k-maint"])
    ]
    table = dra(api, "devices", "--node", "node-k").stdout.splitlines()
    assert table[0].split() == ["NODE", "DRIVER", "POOL", "DEVICE", "TAINTS", "SOURCES", "ALLOCATED-TO"]

    assert dra(api, "untaint", "k-maint").stdout.strip() == f"devicetaintrule.{CRD_GROUP}/k-maint deleted"
    assert api.get("DeviceTaintRule", None, "k-maint", group=CRD_GROUP) is None
    wait_converged(api, ext)
    assert reasons(ext, pod_args("k-pod", "k-claim", ["node-k"], uid=uid))["node-k"] is None


def test_why_gives_the_same_reasons_as_filter(live) -> None:
    api, ext = live
    dra(api, "taint", "example.com/why=x:NoSchedule", "--driver", "gpu.example.com", "--pool", "node-a", "--name", "why-rule")
    add_pod(api, "why-missing", "no-such-claim", new_claim=False)
    wait_converged(api, ext)
    nodes = all_nodes(api)
    checked = 0
    for pod in api.list("Pod"):
        spec, meta = pod["spec"], pod["metadata"]
        if spec.get("nodeName"):
            continue
        body = {"Pod": pod, "NodeNames": nodes}
        filtered = reasons(ext, body)
        asked = dra_json(api, "why", "-n", meta["namespace"], meta["name"])
        assert asked["pod"] == f"{meta['namespace']}/{meta['name']}" and asked["nodes"] == filtered, meta["name"]
        scheduler = spec.get("schedulerName") or "default-scheduler"
        assert (asked["schedulerName"], asked["extenderProfile"]) == (scheduler, scheduler == "dra-scheduler"), meta["name"]
        checked += 1
    assert checked >= 5
    text = dra(api, "why", "why-missing").stdout
    assert "0 of" in text and "claim default/no-such-claim (pod claim 'gpu') not found" in text
    dra(api, "untaint", "example.com/why")
    assert api.get("DeviceTaintRule", None, "why-rule", group=CRD_GROUP) is None


def _status_message(api: FakeApi, name: str) -> str | None:
    rule = api.get("DeviceTaintRule", None, name, group=CRD_GROUP) or {}
    for c in (rule.get("status") or {}).get("conditions") or ():
        if c["type"] == "EvictionInProgress" and c.get("reason") == "NoEffect":
            return c["message"]
    return None


def test_explain_rule_counts_equal_the_eviction_controllers_dry_run(live) -> None:
    api, _ext = live
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-e"}})
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-e-gpus"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "node-e",
                "pool": {"name": "node-e", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(4)],
            },
        }
    )
    tolerates = [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}]
    objects = [
        *claim_and_pod("e-victim", 0, node_name="node-e"),
        *claim_and_pod("e-other-ns", 1, node_name="node-e", namespace="team-b"),
        *claim_and_pod("e-tolerant", 2, node_name="node-e", tolerations=tolerates),
    ]
    api.control("POST", "objects", {"kind": "List", "items": objects})
    out = dra(
        api, "taint", "example.com/maintenance=planned:None", "--driver", "gpu.example.com", "--pool", "node-e", "--name", "e-maint"
    ).stdout
    assert "created" in out
    controller_says = wait_for(lambda: _status_message(api, "e-maint"), timeout=20, what="the controller's dry run")
    explained = dra_json(api, "explain-rule", "e-maint")
    assert explained["dryRunMessage"] == controller_says
    assert explained["counts"] == {"publishedDevices": 4, "allocatedDevices": 3, "pods": 2, "namespaces": 2}
    assert sorted(p["pod"] for p in explained["podsToEvict"]) == ["default/e-victim", "team-b/e-other-ns"]
    text = dra(api, "explain-rule", "e-maint").stdout
    assert "would evict 2 pods in 2 namespaces:" in text and controller_says in text
    # Nothing was evicted by effect None.
    assert api.get("Pod", "default", "e-victim") is not None
    dra(api, "untaint", "e-maint")


def test_taint_dry_run_creates_nothing_and_lists_matches(live) -> None:
    api, _ext = live
    out = dra(api, "taint", "example.com/probe:NoSchedule", "--driver", "gpu.example.com", "--pool", "node-a", "--dry-run=server").stdout
    assert "(server dry run)" in out and "matches" in out and "gpu.example.com/node-a/" in out
    assert not [
        r
        for r in api.list("DeviceTaintRule", CRD_GROUP)
        if r["metadata"].get("labels") == MANAGED and r["spec"]["taint"]["key"] == "example.com/probe"
    ]


def test_refusals_and_syntax_errors(live) -> None:
    api, _ = live
    r = dra(api, "taint", "example.com/all:NoExecute", ok=False)
    assert r.returncode == 2 and "--all-devices" in r.stderr and "every pod" in r.stderr
    r = dra(api, "taint", "example.com/x:NoSchedule", "--upstream", "--device-class", "gpu.example.com", ok=False)
    assert r.returncode == 2 and "--upstream rules select by --driver, --pool and --device only" in r.stderr
    for bad, part in [
        ("example.com/x", "effect is missing"),
        ("example.com/x:Evict", "effect 'Evict'"),
        ("-bad-:None", "key '-bad-'"),
        ("k=a b:None", "value 'a b'"),
    ]:
        r = dra(api, "taint", "--", bad, ok=False) if bad.startswith("-") else dra(api, "taint", bad, ok=False)
        assert r.returncode == 2 and part in r.stderr, (bad, r.stderr)
    # A rule kubectl-dra did not create is never deleted by it.
    api.create(
        {
            "apiVersion": f"{CRD_GROUP}/v1alpha1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "hand-made"},
            "spec": {"deviceSelector": {"driver": "gpu.example.com"}, "taint": {"key": "example.com/hand", "effect": "None"}},
        }
    )
    r = dra(api, "untaint", "hand-made", ok=False)
    assert r.returncode == 2 and "not managed by kubectl-dra" in r.stderr
    assert api.get("DeviceTaintRule", None, "hand-made", group=CRD_GROUP) is not None


def test_upstream_rule(live) -> None:
    api, _ = live
    out = dra(
        api, "taint", "example.com/up:None", "--upstream", "--driver", "gpu.example.com", "--device", "gpu-1", "--name", "up-rule"
    ).stdout
    assert out.strip() == "devicetaintrule.resource.k8s.io/up-rule created"
    assert api.get("DeviceTaintRule", None, "up-rule") is not None
    assert "Rule:       up-rule (resource.k8s.io), effect None" in dra(api, "explain-rule", "up-rule", "--upstream").stdout
    assert "deleted" in dra(api, "untaint", "up-rule", "--upstream").stdout


# name -> (untaint arguments, what the one-line error names)
FORGOTTEN_UPSTREAM = {
    "by-name": (["up-forgot"], "devicetaintrule.resource.k8s.io/up-forgot does: add --upstream"),
    "by-key": (["example.com/forgot"], "devicetaintrule.resource.k8s.io/up-forgot does: add --upstream"),
    "by-key-and-effect": (["example.com/forgot:None", "--device", "gpu-1"], "devicetaintrule.resource.k8s.io/up-forgot does"),
    "ignore-not-found-is-no-excuse": (["up-forgot", "--ignore-not-found"], "add --upstream"),
}


@pytest.mark.parametrize("case", FORGOTTEN_UPSTREAM)
def test_untaint_without_upstream_names_the_upstream_rule(live, case: str) -> None:
    """A rule `taint --upstream` made is never reported as "no rule matches": the error says to add --upstream."""
    api, _ = live
    argv, says = FORGOTTEN_UPSTREAM[case]
    if api.get("DeviceTaintRule", None, "up-forgot") is None:
        dra(
            api, "taint", "example.com/forgot:None", "--upstream", "--driver", "gpu.example.com", "--device", "gpu-1", "--name", "up-forgot"
        )
    r = dra(api, "untaint", *argv, ok=False)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert api.get("DeviceTaintRule", None, "up-forgot") is not None, "nothing deleted"
    r = dra(api, "untaint", "c-never", "--upstream", ok=False)
    assert r.returncode == 1 and "no DeviceTaintRule managed by kubectl-dra matches" in r.stderr


def test_untaint_with_upstream_names_the_crd_rule(live) -> None:
    api, _ = live
    dra(api, "taint", "example.com/crd-only:None", "--driver", "gpu.example.com", "--device", "gpu-1", "--name", "crd-only")
    r = dra(api, "untaint", "crd-only", "--upstream", ok=False)
    assert r.returncode == 2 and f"devicetaintrule.{CRD_GROUP}/crd-only does: drop --upstream" in r.stderr, r.stderr
    dra(api, "untaint", "crd-only")


# Selectors the extender's CEL engine refuses: (expression, what the error says)
A = 'device.attributes["gpu.example.com"]'
REFUSED_SELECTORS = {
    "typo-assignment": (f'{A}.model = "h100"', "does not compile: "),
    "over-the-cost-limit": (f"{A}.all(a, {A}.all(b, {A}.all(c, {A}.all(d, a != d))))", "estimated cost"),
    "longer-than-10KiB": (" " * 10237 + "true", "longer than 10240 characters"),
    "undeclared-variable": ('devices.driver == "gpu.example.com"', "undeclared reference to 'devices'"),
}


@pytest.mark.parametrize("dry_run", ["none", "server", "client"])
@pytest.mark.parametrize("case", REFUSED_SELECTORS)
def test_a_selector_the_extender_cannot_compile_is_refused_before_anything_is_written(live, case: str, dry_run: str) -> None:
    api, _ = live
    expression, says = REFUSED_SELECTORS[case]
    before = len(api.requests())
    r = dra(
        api,
        "taint",
        "example.com/x:NoSchedule",
        "--selector",
        'device.driver == "gpu.example.com"',
        "--selector",
        expression,
        "--name",
        f"refused-{case}",
        f"--dry-run={dry_run}",
        ok=False,
    )
    assert r.returncode == 2 and r.stderr.startswith("error: --selector #2 ") and says in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == "", r.stderr
    mine = [
        q for q in api.requests(before) if (q["method"] == "POST" and "devicetaintrules" in q["path"]) or f"refused-{case}" in q["path"]
    ]
    assert mine == [] and api.get("DeviceTaintRule", None, f"refused-{case}", group=CRD_GROUP) is None


@pytest.mark.parametrize("dry_run", ["none", "server"])
def test_a_device_class_that_does_not_exist_is_refused(live, dry_run: str) -> None:
    api, _ = live
    r = dra(
        api,
        "taint",
        "example.com/x:NoSchedule",
        "--device-class",
        "gpu.exmaple.com",
        "--name",
        "no-class",
        f"--dry-run={dry_run}",
        ok=False,
    )
    assert r.returncode == 2 and "--device-class gpu.exmaple.com: no such DeviceClass" in r.stderr, r.stderr
    assert api.get("DeviceTaintRule", None, "no-class", group=CRD_GROUP) is None


def test_devices_and_explain_rule_flag_a_rule_that_does_not_compile(live) -> None:
    """A rule written by hand (kubectl apply) with a CEL typo: the API server takes it, the extender selects no device with it."""
    api, _ = live
    api.create(
        {
            "apiVersion": f"{CRD_GROUP}/v1alpha1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "typo-rule"},
            "spec": {
                "deviceSelector": {"driver": "gpu.example.com", "selectors": [{"cel": {"expression": f'{A}.model = "h100"'}}]},
                "taint": {"key": "example.com/typo", "effect": "NoSchedule"},
            },
        }
    )
    says = (
        'invalid: spec.deviceSelector.selectors[0].cel.expression: \'device.attributes["gpu.example.com"].model = "h100"\' does not compile'
    )
    text = dra(api, "explain-rule", "typo-rule").stdout
    assert f"Problem:    {says}" in text and "the rule taints no device" in text, text
    explained = dra_json(api, "explain-rule", "typo-rule")
    assert explained["devices"] == [] and explained["problems"][0].startswith(says), explained["problems"]
    r = dra(api, "devices", "--tainted")
    assert f"Warning: rule/typo-rule: {says}" in r.stderr, r.stderr
    r = dra(api, "devices", "-o", "json")
    assert json.loads(r.stdout) and "rule/typo-rule" in r.stderr, "the warning goes to stderr: -o json stays parseable"
    api.delete("DeviceTaintRule", None, "typo-rule", group=CRD_GROUP)


def test_the_crd_refuses_an_effect_it_does_not_know(live) -> None:
    """`kubectl apply` of the project's rule with a typo in its effect: refused by the schema, like a real API server's enum."""
    api, _ = live
    body = {
        "apiVersion": f"{CRD_GROUP}/v1alpha1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-typo"},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "node-a"},
            "taint": {"key": "example.com/drain", "effect": "NoExecuted"},
        },
    }
    r = api.http.post(f"/apis/{CRD_GROUP}/v1alpha1/devicetaintrules", json=body)
    assert r.status_code == 422, r.text
    (cause,) = r.json()["details"]["causes"]
    assert cause["field"] == "spec.taint.effect"
    assert cause["message"] == 'Unsupported value: "NoExecuted": supported values: "None", "NoSchedule", "NoExecute"'
    assert api.get("DeviceTaintRule", None, "drain-typo", group=CRD_GROUP) is None


def test_an_upstream_rule_with_an_unknown_effect_says_nothing_is_evicted_or_blocked(live) -> None:
    """resource.k8s.io allows effects newer versions may add: every output says plainly that this one does nothing here."""
    api, _ = live
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "up-typo"},
            "spec": {
                "deviceSelector": {"driver": "gpu.example.com", "pool": "node-c"},
                "taint": {"key": "example.com/drain", "effect": "NoExecuted"},
            },
        }
    )
    plainly = "unknown effect 'NoExecuted': nothing is evicted or blocked (known: None, NoSchedule, NoExecute)"
    text = dra(api, "explain-rule", "up-typo", "--upstream").stdout
    assert f"Problem:    spec.taint.effect: {plainly}" in text, text
    r = dra(api, "devices", "--node", "node-c")
    assert f"Warning: rule.resource.k8s.io/up-typo: spec.taint.effect: {plainly}" in r.stderr, r.stderr

    def warned() -> list[str]:
        return [
            e["message"]
            for e in api.list("Event")
            if e["involvedObject"].get("name") == "up-typo" and e.get("reason") == "UnknownTaintEffect"
        ]

    assert wait_for(warned, what="the rule's Warning Event") == [f"spec.taint.effect: {plainly}"]
    api.delete("DeviceTaintRule", None, "up-typo")


def test_help_has_examples_and_completion_scripts() -> None:
    for command in ("taint", "untaint", "devices", "explain-rule", "why"):
        out = subprocess.run(
            [sys.executable, "-m", "kubectl_dra.cli", command, "--help"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout
        assert "examples:" in out and "kubectl dra " + command in out, command
    from kubectl_dra.cli import completions

    assert completions(["ex"]) == ["explain-rule"]
    assert completions(["taint", "k=v:No"]) == ["k=v:None", "k=v:NoSchedule", "k=v:NoExecute"]
    assert "--all-devices" in completions(["taint", "k:None", "--"])
    assert completions(["devices", "-o", ""]) == ["table", "wide", "json", "yaml", "name"]
    bash = subprocess.run(
        [sys.executable, "-m", "kubectl_dra.cli", "completion", "bash"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    assert "complete -F _kubectl_dra kubectl-dra" in bash


def test_client_dry_run_sends_nothing_and_prints_the_rule(live) -> None:
    api, _ = live
    before = len(api.requests())
    out = dra(
        api, "taint", "example.com/c:NoSchedule", "--driver", "gpu.example.com", "--pool", "node-a", "--name", "c-rule", "--dry-run=client"
    )
    assert out.stdout.startswith(f"devicetaintrule.{CRD_GROUP}/c-rule created (dry run)"), out.stdout
    writes = [r for r in api.requests(before) if r["method"] != "GET" and "devicetaintrules" in r["path"]]  # the extender writes too
    assert writes == [], writes
    rule = json.loads(
        dra(api, "taint", "example.com/c:NoSchedule", "--pool", "node-a", "--name", "c-rule", "--dry-run=client", "-o", "json").stdout
    )
    assert rule["spec"]["deviceSelector"] == {"pool": "node-a"} and rule["metadata"]["name"] == "c-rule"
    assert api.get("DeviceTaintRule", None, "c-rule", group=CRD_GROUP) is None
    r = dra(api, "taint", "example.com/c:NoSchedule", "--pool", "node-a", "--dry-run", ok=False)
    assert r.returncode == 2 and "--dry-run" in r.stderr


# (verb arguments after the rule exists, what -o name prints)
NAME_OUTPUT = {
    "taint": (["taint", "example.com/o:None", "--pool", "node-b", "--name", "o-rule"], [f"devicetaintrule.{CRD_GROUP}/o-rule"]),
    "explain-rule": (["explain-rule", "o-rule"], [f"devicetaintrule.{CRD_GROUP}/o-rule"]),
    "devices": (["devices", "--node", "node-b", "--tainted"], ["gpu.example.com/node-b/gpu-0", "gpu.example.com/node-b/gpu-1"]),
    "why": (["why", "trainer"], ["node/node-a", "node/node-b"]),
    "untaint": (["untaint", "o-rule"], [f"devicetaintrule.{CRD_GROUP}/o-rule"]),
}


def test_one_output_vocabulary_for_every_verb(live) -> None:
    api, _ = live
    demo = ("node-a", "node-b", "node-c")  # other tests add nodes to this module's cluster
    for verb, (argv, want) in NAME_OUTPUT.items():
        lines = dra(api, *argv, "-o", "name").stdout.splitlines()
        assert [line for line in lines if verb != "why" or line.endswith(demo)] == want, verb
    parser_help = {verb: _help(verb) for verb in NAME_OUTPUT}
    for verb, text in parser_help.items():
        assert "{table,wide,json,yaml,name}" in text, verb


def _help(*argv: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "kubectl_dra.cli", *argv, "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_untaint_ignore_not_found(live) -> None:
    api, _ = live
    r = dra(api, "untaint", "never-made", ok=False)
    assert r.returncode == 1 and "no DeviceTaintRule managed by kubectl-dra matches 'never-made'" in r.stderr
    r = dra(api, "untaint", "never-made", "--ignore-not-found")
    assert r.stdout == "" and r.stderr == ""


def test_explain_rule_without_pods_to_evict(live) -> None:
    api, _ = live
    dra(api, "taint", "example.com/idle:None", "--driver", "gpu.example.com", "--pool", "node-c", "--name", "idle-rule")
    out = dra(api, "explain-rule", "idle-rule").stdout
    assert "As NoExecute it would evict no pods." in out and "pod(s)" not in out and "Dry run" not in out
    assert re.search(r"^Status: +\d+ published devices? selected", out, re.M), out
    dra(api, "untaint", "idle-rule")


def test_why_completes_pod_names(live) -> None:
    api, _ = live
    from kubectl_dra.cli import completions

    kc = str(api.kubeconfig)
    assert "trainer" in completions(["--kubeconfig", kc, "why", ""])
    assert completions(["--kubeconfig", kc, "why", "trai"]) == ["trainer"]
    assert completions(["--kubeconfig", kc, "why", "-n", "no-such-ns", ""]) == []
    assert completions(["--kubeconfig", "/nonexistent", "why", ""]) == []  # never a traceback into the shell


# name -> (kubeconfig file content or None for a missing file, what the one-line error says)
BAD_KUBECONFIGS = {
    "missing": (None, "no such file; pass --kubeconfig PATH or set KUBECONFIG"),
    "not-yaml": ("clusters: [\n", "not valid YAML"),
    "not-a-kubeconfig": ("apiVersion: v1\n", "no clusters in it"),
    "no-context": ("clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n", "no current-context"),
    "unknown-context": (
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: a, context: {cluster: c}}]\n"
        "current-context: b\n",
        "context 'b' not found (have: a)",
    ),
}


@pytest.mark.parametrize("case", BAD_KUBECONFIGS)
def test_bad_kubeconfig_is_one_line_and_exit_2(case: str, tmp_path) -> None:
    content, says = BAD_KUBECONFIGS[case]
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    r = subprocess.run(
        [sys.executable, "-m", "kubectl_dra.cli", "--kubeconfig", str(path), "devices"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and str(path) in r.stderr and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bare_command_prints_help_and_verbs_show_global_flags() -> None:
    r = subprocess.run([sys.executable, "-m", "kubectl_dra.cli"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "usage: kubectl dra" in r.stdout and "explain-rule" in r.stdout, r.stderr
    for verb in ("taint", "untaint", "devices", "explain-rule", "why"):
        text = _help(verb)
        assert "global flags" in text and "--kubeconfig PATH" in text and "--context" in text, verb
    assert "none,client,server" in _help("taint") and "--ignore-not-found" in _help("untaint")
    assert "kubectl_complete-dra" in _help("completion")


def test_an_unreachable_api_server_is_one_line(tmp_path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "kubectl_dra.cli", "--kubeconfig", str(kubeconfig), "devices"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and r.stderr.startswith("error: cannot reach the API server:") and r.stderr.count("\n") == 1, r.stderr


def _fabric_node(api: FakeApi, name: str) -> None:
    """A node whose devices bind only once the driver reports `ready` (binding conditions), of their own class."""
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-fabric"},
            "spec": {
                "driver": "fabric.example.com",
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "link-0", "bindsToNode": True, "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}
                ],
            },
        }
    )
    if api.get("DeviceClass", None, "fabric.example.com") is None:
        api.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "fabric.example.com"},
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "fabric.example.com"'}}]},
            }
        )


def _fabric_pod(api: FakeApi, name: str, scheduler: str = "dra-scheduler") -> dict[str, Any]:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "link", "exactly": {"deviceClassName": "fabric.example.com"}}]}},
        }
    )
    return api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "link"}]}}],
                "resourceClaims": [{"name": "link", "resourceClaimName": name}],
            },
        }
    )


def test_why_a_pod_waits_for_binding_conditions_is_filters_answer(live) -> None:
    """The claim is allocated on fabric-node and waits for the driver: /filter refuses every node, and so does `why`."""
    api, ext = live
    _fabric_node(api, "fabric-node")
    pod = _fabric_pod(api, "fabric-pod")
    wait_converged(api, ext)
    nodes = all_nodes(api)
    assert reasons(ext, {"Pod": pod, "NodeNames": nodes})["fabric-node"] is None
    error = ext.post("bind", {"PodName": "fabric-pod", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "fabric-node"})
    assert "waiting for binding conditions" in error.json()["Error"], error.text
    wait_converged(api, ext)
    filtered = reasons(ext, {"Pod": api.get("Pod", "default", "fabric-pod"), "NodeNames": nodes})
    assert all(r is not None and "waiting for binding conditions for device on node fabric-node" in r for r in filtered.values()), filtered
    asked = dra_json(api, "why", "fabric-pod")
    assert asked["nodes"] == filtered
    text = dra(api, "why", "fabric-pod").stdout
    assert f"0 of {len(nodes)} nodes fit" in text and "waiting for binding conditions" in text, text
    assert "waits for scheduler dra-scheduler, the dra-extender profile" in text, text
    assert api.get("ResourceClaim", "default", "fabric-pod")["status"].get("allocation"), "why deallocates nothing"

    # The driver reports failure: /filter would deallocate the claim; `why` says so and leaves it allocated.
    def failed(obj: dict[str, Any]) -> None:
        cond = {
            "type": "failed",
            "status": "True",
            "reason": "Driver",
            "message": "link down",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        obj["status"]["devices"] = [{"driver": "fabric.example.com", "pool": "fabric-node", "device": "link-0", "conditions": [cond]}]

    api.mutate("ResourceClaim", "default", "fabric-pod", failed, subresource="status")
    wait_converged(api, ext)
    asked = dra_json(api, "why", "fabric-pod")
    assert all(r is not None and "the claim is being deallocated" in r for r in asked["nodes"].values()), asked
    assert api.get("ResourceClaim", "default", "fabric-pod")["status"].get("allocation"), "why deallocates nothing"
    assert asked["nodes"] == reasons(ext, {"Pod": api.get("Pod", "default", "fabric-pod"), "NodeNames": nodes})


def test_why_says_when_the_pod_waits_for_another_scheduler(live) -> None:
    api, _ = live
    _fabric_node(api, "fabric-node-2")
    _fabric_pod(api, "elsewhere-pod", scheduler="default-scheduler")
    text = dra(api, "why", "elsewhere-pod").stdout
    assert "waits for scheduler default-scheduler, not the dra-extender profile dra-scheduler (--scheduler-name)" in text, text
    assert "the extender is never asked about it" in text
    asked = dra_json(api, "why", "elsewhere-pod", "--scheduler-name", "default-scheduler")
    assert (asked["schedulerName"], asked["extenderProfile"]) == ("default-scheduler", True)
