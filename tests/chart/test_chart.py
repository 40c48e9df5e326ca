"""charts/dra-extender rendered by Helm's engine: every object valid, the scheduler wired to the sidecar."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
import yaml

from allocator.api_limits import check_metadata_limits, check_object_name
from allocator.parse import parse_pod
from dra_extender.cli import build_parser
from serving.metrics import Metrics
from tests.chart.render import CHART, IMAGE, NAMESPACE, RELEASE, crds, helm, objects, one, render
from tracker.apiserver.leadership import lease_from_scheduler_config, refuse_in_tree_allocator

# (apiVersion, kind) -> namespaced: what a 1.34+ cluster (plus prometheus-operator) serves.
KNOWN: dict[tuple[str, str], bool] = {
    ("v1", "ServiceAccount"): True,
    ("v1", "ConfigMap"): True,
    ("v1", "Service"): True,
    ("apps/v1", "Deployment"): True,
    ("policy/v1", "PodDisruptionBudget"): True,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): False,
    ("rbac.authorization.k8s.io/v1", "Role"): True,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): True,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): True,
    ("monitoring.coreos.com/v1", "PrometheusRule"): True,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): False,
    ("v1", "Secret"): True,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): False,
    ("cert-manager.io/v1", "Certificate"): True,
    ("cert-manager.io/v1", "Issuer"): True,
}
RBAC_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
ALL_ON = {"dashboard": {"enabled": True}, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything-on": {
        **ALL_ON,
        "extender": {"debug": True, "eviction": {"mode": "evict", "upstream": True}, "extraArgs": ["--placement-wait=0.5"]},
    },
    "eviction-off": {"extender": {"eviction": {"enabled": False}}, "podDisruptionBudget": {"enabled": False}},
    "no-rbac": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "controllers": {"serviceAccount": {"create": False, "name": "existing-controllers"}},
    },
    "webhook": {"webhook": {"enabled": True}},
    "webhook-cert-manager": {"webhook": {"enabled": True, "certManager": {"enabled": True}}},
    "health-alerts": {"extender": {"health": {"alerts": {"enabled": True, "tlsSecret": "alerts-tls"}}}},
    "health-off": {"extender": {"health": {"enabled": False}}},
}


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


SCHEDULER = "-dra-extender"  # the scheduler Deployment's name suffix (kube-scheduler and the sidecar)
CONTROLLERS = "-controllers"  # the controllers' Deployment, and their PodDisruptionBudget, Role, Service ...


def _controllers_args(objs: list[dict[str, Any]]) -> argparse.Namespace:
    dep = one(objs, "Deployment", CONTROLLERS)
    return build_parser().parse_args([_expand(a, {"POD_IP": "10.0.0.8"}) for a in _container(dep, "controllers")["args"]])


def _expand(arg: str, env: dict[str, str]) -> str:
    for k, v in env.items():
        arg = arg.replace(f"$({k})", v)
    return arg


def _validate(obj: dict[str, Any]) -> None:
    key = (obj.get("apiVersion"), obj.get("kind"))
    assert key in KNOWN, f"unknown apiVersion/kind {key}"
    meta = obj["metadata"]
    what = f"{obj['kind']} {meta.get('name')}"
    check_object_name(what, KNOWN[key], meta)  # type: ignore[index]
    check_metadata_limits(what, meta)
    assert ("namespace" in meta) == KNOWN[key], f"{what}: namespace set on a cluster-scoped object or missing"  # type: ignore[index]
    if key[1] in ("ClusterRole", "Role"):
        for rule in obj["rules"]:
            assert rule["apiGroups"] and rule["resources"] and set(rule["verbs"]) <= RBAC_VERBS, rule
    if key[1] in ("ClusterRoleBinding", "RoleBinding"):
        assert obj["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io" and obj["subjects"], obj
    if key[1] == "Deployment":
        template = obj["spec"]["template"]
        assert obj["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        # The project's own Pod parser: what the API server would take as a pod.
        parse_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": NAMESPACE, **template["metadata"]},
                "spec": template["spec"],
            }
        )
        for c in template["spec"]["containers"]:
            assert c["image"] and ":" in c["image"] and not c["image"].endswith(":"), c["image"]
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
    if key[1] == "ConfigMap":
        for name, text in obj["data"].items():
            if name.endswith(".yaml"):
                yaml.safe_load(text)
            elif name.endswith(".json"):
                json.loads(text)


@pytest.mark.parametrize("values", list(VARIANTS.values()), ids=list(VARIANTS))
def test_every_rendered_object_is_valid(values: dict[str, Any]) -> None:
    objs = objects(values)
    assert objs
    for obj in objs + crds():
        _validate(obj)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), names


def test_values_schema_is_enforced_by_helm() -> None:
    chart = helm().Chart.load(str(CHART))
    chart.validate_schema({})
    with pytest.raises(helm().HelmValuesError, match="mode"):
        render({"extender": {"eviction": {"mode": "bogus"}}})
    with pytest.raises(helm().HelmValuesError, match="tag"):
        render({"scheduler": {"image": {"tag": "latest"}}})
    with pytest.raises(helm().HelmValuesError):
        render({"no-such-key": 1})


def test_helm_lint_is_clean() -> None:
    report = helm().lint(str(CHART), IMAGE, strict=True, kube_version="v1.36.2")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


def test_scheduler_configuration_hands_devices_to_the_sidecar(tmp_path) -> None:
    objs = objects()
    config = yaml.safe_load(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
    [profile] = config["profiles"]
    assert profile["schedulerName"] == "dra-scheduler"
    assert profile["percentageOfNodesToScore"] == 100
    assert [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]] == ["DynamicResources"]
    [ext] = config["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == ("filter", "prioritize", "bind")
    assert ext["nodeCacheCapable"] is True and ext["weight"] >= 1 and ext["httpTimeout"] == "5s"
    lease = config["leaderElection"]
    assert lease["leaderElect"] is True and (lease["resourceNamespace"], lease["resourceName"]) == (NAMESPACE, "dra-scheduler")

    deployment = one(objs, "Deployment", SCHEDULER)
    args = build_parser().parse_args([_expand(a, {"POD_IP": "10.0.0.7"}) for a in _container(deployment, "dra-extender")["args"]])
    assert args.listen == "127.0.0.1:8888" and args.probe_listen == "10.0.0.7:8889"
    # The sidecar reads the Lease from the very file the scheduler reads: they cannot disagree.
    assert args.scheduler_config == "/etc/dra-scheduler/config.yaml" and args.follow_scheduler_lease is None
    mounts = {m["mountPath"]: m["name"] for m in _container(deployment, "dra-extender")["volumeMounts"]}
    assert mounts["/etc/dra-scheduler"] == "config"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert lease_from_scheduler_config(str(config_path)) == (NAMESPACE, "dra-scheduler")
    refuse_in_tree_allocator(str(config_path))  # every profile leaves allocation to the sidecar: it starts
    assert args.command == "serve" and args.no_debug and args.in_cluster
    assert args.bind_timeout < 5, "the bind budget must end before kube-scheduler's httpTimeout"
    scheduler = _container(deployment, "kube-scheduler")
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.36.2", "default: the Kubernetes version the docs name"
    assert "--config=/etc/dra-scheduler/config.yaml" in scheduler["command"]
    side = _container(deployment, "dra-extender")
    assert side["livenessProbe"]["httpGet"]["path"] == "/livez" and side["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert side["resources"]["requests"] and scheduler["resources"]["requests"]
    assert deployment["spec"]["replicas"] == 2
    assert one(objs, "PodDisruptionBudget", SCHEDULER)["spec"]["maxUnavailable"] == 1


def test_the_controllers_run_as_their_own_deployment_with_their_own_lease_pdb_and_rbac() -> None:
    """`dra-extender controllers` beside the scheduler pods: 2 replicas electing one leader, its own budget,
    ServiceAccount, roles (only what the controllers read and write) and metrics Service; no selector of one
    component's objects matches the other's pods."""
    objs = objects()
    dep = one(objs, "Deployment", CONTROLLERS)
    args = _controllers_args(objs)
    assert args.command == "controllers" and args.leader_elect and args.in_cluster and args.listen == "10.0.0.8:8091"
    assert args.scheduler_name == ["dra-scheduler"] and args.eviction_mode == "delete" and not args.no_health
    assert dep["spec"]["replicas"] == 2
    container = _container(dep, "controllers")
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "fieldRef" in e.get("valueFrom", {})}
    assert env["POD_NAMESPACE"] == "metadata.namespace", "the Lease lives in the pod's namespace"
    scheduler = one(objs, "Deployment", SCHEDULER)
    pods = {"controllers": dep["spec"]["template"]["metadata"]["labels"], "scheduler": scheduler["spec"]["template"]["metadata"]["labels"]}
    for selector_of, other in (("controllers", "scheduler"), ("scheduler", "controllers")):
        owner = dep if selector_of == "controllers" else scheduler
        assert not owner["spec"]["selector"]["matchLabels"].items() <= pods[other].items(), (
            f"the {selector_of}' selector matches {other} pods"
        )
    pdb = one(objs, "PodDisruptionBudget", CONTROLLERS)
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"] == dep["spec"]["selector"]
    service = one(objs, "Service", f"{CONTROLLERS}-metrics")
    assert service["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"] and service["spec"]["ports"][0]["targetPort"] == "metrics"
    sa = one(objs, "ServiceAccount", CONTROLLERS)["metadata"]["name"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa != scheduler["spec"]["template"]["spec"]["serviceAccountName"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert one(objs, kind, CONTROLLERS if kind == "ClusterRoleBinding" else f"{CONTROLLERS}-lease")["subjects"][0]["name"] == sa
    [lease] = [r for r in one(objs, "Role", f"{CONTROLLERS}-lease")["rules"] if r.get("resourceNames")]
    assert lease["resourceNames"] == ["dra-extender-controllers"] and set(lease["verbs"]) == {"get", "update"}
    # The sidecar's role lost what only the controllers do: no deletion, no eviction, no rule or policy writes.
    sidecar = {(v, r) for rule in one(objs, "ClusterRole", "-extender")["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for gone in (("delete", "pods"), ("create", "pods/eviction"), ("create", "devicetaintrules"), ("patch", "devicehealthpolicies/status")):
        assert gone not in sidecar, gone
    controllers = {(v, r) for rule in one(objs, "ClusterRole", CONTROLLERS)["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("delete", "pods"), ("create", "pods/eviction"), ("create", "devicetaintrules")} <= controllers
    assert not {
        v for v, r in controllers if r in ("pods/binding", "resourceclaims", "resourceclaims/status") and v != "list" and v != "watch"
    }


def test_kube_scheduler_may_read_the_api_servers_authentication_config() -> None:
    """kube-scheduler reads kube-system/extension-apiserver-authentication at start (its authentication
    delegation): the chart binds its ServiceAccount to the Role that grants it, in kube-system, as upstream's
    guide for a second scheduler does."""
    objs = objects()
    binding = one(objs, "RoleBinding", "-authentication-reader")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    scheduler_sa = one(objs, "Deployment", SCHEDULER)["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": scheduler_sa, "namespace": NAMESPACE}]


def test_the_docs_version_is_the_default_scheduler_tag() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["scheduler"]["image"]["tagByMinor"]["1.36"].startswith("v1.36.")
    notes = render()[f"{CHART.name}/templates/NOTES.txt"]
    assert "schedulerName: dra-scheduler" in notes and "ONE ALLOCATOR PER DEVICE POOL" in notes
    assert "must match your cluster's minor version" in notes


def test_flags_toggled_by_values() -> None:
    everything = objects(VARIANTS["everything-on"])
    dep = one(everything, "Deployment", SCHEDULER)
    args = build_parser().parse_args([_expand(a, {"POD_IP": "10.0.0.7"}) for a in _container(dep, "dra-extender")["args"]])
    assert (args.no_debug, args.placement_wait) == (False, 0.5)
    assert (args.node_placement, args.device_placement) == ("binpack", "binpack")
    controllers = _controllers_args(everything)
    assert (controllers.eviction_mode, controllers.evict_upstream) == ("evict", True)
    assert _controllers_args(objects(VARIANTS["eviction-off"])).no_eviction
    assert [o["metadata"]["name"] for o in objects(VARIANTS["eviction-off"]) if o["kind"] == "PodDisruptionBudget"] == [
        "dra-dra-extender-controllers"
    ]
    assert not [
        o
        for o in objects({"controllers": {"podDisruptionBudget": {"enabled": False}}})
        if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"].endswith(CONTROLLERS)
    ]
    assert not [o for o in objects(VARIANTS["no-rbac"]) if o["kind"].startswith(("Role", "ClusterRole", "ServiceAccount"))]


def test_dashboard_ships_as_a_labelled_configmap_only_when_enabled() -> None:
    assert not [o for o in objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    cm = one(objects(ALL_ON), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["dra-extender.json"]) == json.loads((CHART / "dashboards" / "dra-extender.json").read_text())
    for suffix in (SCHEDULER, CONTROLLERS):
        monitor = one(objects(ALL_ON), "ServiceMonitor", suffix)
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
        [service] = [
            o for o in objects(ALL_ON) if o["kind"] == "Service" and o["metadata"]["name"] == f"{monitor['metadata']['name']}-metrics"
        ]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def exported_metrics() -> set[str]:
    """Every series name the extender exports (counters with _total, histograms with _bucket/_sum/_count)."""
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        if family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count", "created")}
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    import re

    dashboard = json.loads((CHART / "dashboards" / "dra-extender.json").read_text())
    exported = exported_metrics()
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert queries
    for q in queries:
        used = set(re.findall(r"\bdra_extender_[a-z_]+", q))
        assert used, f"query names no extender metric: {q}"
        assert used <= exported, f"{q}: {sorted(used - exported)} not exported by serving/metrics.py"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for question in ("latency", "outcomes", "devices by state", "lag", "evictions"):
        assert question in titles, question


def test_extra_args_reach_the_sidecar() -> None:
    dep = one(objects({"extender": {"extraArgs": ["--claim-wait=0.2"]}}), "Deployment", SCHEDULER)
    assert "--claim-wait=0.2" in _container(dep, "dra-extender")["args"]
    dep = one(objects({"controllers": {"extraArgs": ["--evict-upstream"]}}), "Deployment", CONTROLLERS)
    assert "--evict-upstream" in _container(dep, "controllers")["args"]


def test_the_fake_api_server_accepts_the_charts_crds_and_kubectl_dras_rules() -> None:
    """The CRDs as Helm loads them pass the API server's CRD checks; a rule `kubectl dra taint` writes passes their schema."""
    import argparse

    from kubectl_dra.cli import rule_object
    from kubectl_dra.taint_spec import parse_taint
    from tests.e2e.cluster import CRD_GROUP, FakeApi

    api = FakeApi(extra_args=("--no-crds",))
    try:
        loaded = [yaml.safe_load(c["data"]) for c in helm().Chart.load(str(CHART)).crds]
        assert sorted(c["metadata"]["name"] for c in loaded) == sorted(c["metadata"]["name"] for c in crds())
        for crd in loaded:
            r = api.http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
            assert r.status_code == 201, r.text
        args = argparse.Namespace(
            driver="gpu.example.com",
            pool="node-a",
            device=None,
            device_class="gpu.example.com",
            selector=['device.attributes["gpu.example.com"].model == "a100"'],
            upstream=False,
            all_devices=False,
            name="m",
        )
        obj = rule_object(args, parse_taint("example.com/maintenance=planned:NoExecute"), f"{CRD_GROUP}/v1alpha1")
        created = api.create(obj)
        assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubectl-dra"}
    finally:
        api.stop()


def test_health_values_enable_the_receiver_its_service_its_token_and_rbac() -> None:
    objs = objects(VARIANTS["health-alerts"])
    dep = one(objs, "Deployment", CONTROLLERS)
    container = _container(dep, "controllers")
    args = build_parser().parse_args([_expand(a, {"POD_IP": "10.0.0.7"}) for a in container["args"]])
    assert (args.alerts_listen, args.alerts_token_file) == ("10.0.0.7:9095", "/etc/dra-extender/alerts-token/token")
    assert args.alerts_tls_cert_file == "/etc/dra-extender/alerts-tls/tls.crt"
    assert {"name": "alerts", "containerPort": 9095, "protocol": "TCP"} in container["ports"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    secret = one(objs, "Secret", "-alerts-token")
    assert volumes["alerts-token"]["secret"]["secretName"] == secret["metadata"]["name"] and secret["data"]["token"]
    service = one(objs, "Service", "-alerts")
    assert service["spec"]["ports"][0]["targetPort"] == "alerts"
    # The leader alone: the health leader labels its own pod (controllers/health/leader_label.py), named by the downward API.
    assert service["spec"]["selector"]["resource.dra-extender.io/health-leader"] == "true"
    assert set(dep["spec"]["template"]["metadata"]["labels"].items()) >= {
        (k, v) for k, v in service["spec"]["selector"].items() if k != "resource.dra-extender.io/health-leader"
    }
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "fieldRef" in e.get("valueFrom", {})}
    assert (env["POD_NAME"], env["POD_NAMESPACE"]) == ("metadata.name", "metadata.namespace")
    rules = [r for o in objs if o["kind"] == "ClusterRole" for r in o["rules"]]
    assert any("devicehealthpolicies" in r["resources"] and "watch" in r["verbs"] for r in rules)
    assert any("devicehealthpolicies/status" in r["resources"] and "patch" in r["verbs"] for r in rules)
    assert any(
        r["apiGroups"] == ["resource.dra-extender.io"] and "devicetaintrules" in r["resources"] and {"create", "delete"} <= set(r["verbs"])
        for r in rules
    )
    # Off by default: no listener, no Service, no Secret; the controller itself runs (idle without a policy).
    default = objects({})
    assert not [o for o in default if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-alerts-token")]
    assert not any(
        a.startswith("--alerts") or a == "--no-health" for a in _container(one(default, "Deployment", CONTROLLERS), "controllers")["args"]
    )
    assert "--no-health" in _container(one(objects(VARIANTS["health-off"]), "Deployment", CONTROLLERS), "controllers")["args"]


def test_the_docs_name_the_alerts_service_and_secret_the_chart_makes() -> None:
    """docs/health.md gives the receiver's Service and Secret names for `helm install dra`: the chart's, not a guess."""
    names = {o["metadata"]["name"] for o in objects(VARIANTS["health-alerts"]) if o["kind"] in ("Service", "Secret")}
    service, secret = f"{RELEASE}-dra-extender-alerts", f"{RELEASE}-dra-extender-alerts-token"
    assert {service, secret} <= names, names
    text = (CHART.parents[1] / "docs" / "health.md").read_text()
    assert f"`{service}`" in text and f"`{secret}`" in text
