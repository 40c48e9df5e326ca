"""The chart's install path: the image the operator builds, and the optional scheduler-name admission webhook."""

from __future__ import annotations

import base64
import itertools
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from dra_extender.cli import build_parser
from tests.chart.render import NAMESPACE, helm, objects, one, render

WEBHOOK = {"webhook": {"enabled": True}}


def test_no_image_fails_with_how_to_build_it() -> None:
    with pytest.raises(helm().HelmError) as e:
        render(image=False)
    message = str(e.value)
    assert "extender.image.repository is not set" in message and "docker build" in message and "docker push" in message


def test_the_webhook_is_off_by_default() -> None:
    assert not [o for o in objects() if o["kind"] == "MutatingWebhookConfiguration" or o["metadata"]["name"].endswith("-webhook")]


def _webhook_objects(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects(values) if "webhook" in o["metadata"]["name"]}


# name -> (webhook values, failurePolicy, the extra namespace expression the values add, the namespaces left out)
POLICIES: dict[str, tuple[dict[str, Any], str, list[dict[str, Any]], list[str]]] = {
    "defaults": ({}, "Ignore", [], [NAMESPACE, "kube-system"]),
    "fail closed, opted-in namespaces": (
        {"failurePolicy": "Fail", "namespaceSelector": {"matchExpressions": [{"key": "dra", "operator": "Exists"}]}},
        "Fail",
        [{"key": "dra", "operator": "Exists"}],
        [NAMESPACE, "kube-system"],
    ),
    "more namespaces left out": (
        {"excludedNamespaces": ["kube-system", "monitoring"]},
        "Ignore",
        [],
        [NAMESPACE, "kube-system", "monitoring"],
    ),
    "kube-system sent too": ({"excludedNamespaces": []}, "Ignore", [], [NAMESPACE]),
    "the release namespace is always left out": ({"excludedNamespaces": [NAMESPACE, "batch"]}, "Ignore", [], [NAMESPACE, "batch"]),
}


@pytest.mark.parametrize("case", POLICIES)
def test_webhook_configuration(case: str) -> None:
    values, policy, extra, excluded = POLICIES[case]
    objs = _webhook_objects({"webhook": {"enabled": True, **values}})
    [hook] = one(list(objs.values()), "MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == policy and hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}
    ]
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert expressions[0] == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
    assert expressions[1:] == extra
    service = objs["Service"]
    assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    # The container runs `dra-extender webhook` with the chart's scheduler name and the mounted certificate.
    deployment = objs["Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "webhook" and args.scheduler_name == "dra-scheduler" and args.in_cluster
    # The webhook leaves out what its namespaceSelector leaves out, and the extender names them when it flags a pod.
    assert args.excluded_namespace == excluded
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    controllers = build_parser().parse_args(
        [a.replace("$(POD_IP)", "10.0.0.1") for a in _controllers_container({"webhook": {"enabled": True, **values}})["args"]]
    )
    assert controllers.command == "controllers" and controllers.webhook_excluded_namespace == excluded
    [mount] = container["volumeMounts"]
    assert args.tls_cert_file.startswith(mount["mountPath"]) and args.tls_key_file.startswith(mount["mountPath"])
    [volume] = deployment["spec"]["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == objs["Secret"]["metadata"]["name"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert objs["ClusterRole"]["rules"] == [{"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["list", "watch"]}]


def _controllers_container(values: dict[str, Any]) -> dict[str, Any]:
    """The foreign-pod check runs in the controllers' Deployment: it names the webhook's exclusions."""
    deployment = one(objects(values), "Deployment", "-controllers")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "controllers")


def test_without_the_webhook_the_controllers_name_no_exclusions() -> None:
    controllers = build_parser().parse_args([a.replace("$(POD_IP)", "10.0.0.1") for a in _controllers_container({})["args"]])
    assert not controllers.webhook_excluded_namespace and controllers.scheduler_name == ["dra-scheduler"]  # the chart's one profile


def test_the_ca_bundle_verifies_the_serving_certificate_for_the_service_name(tmp_path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to verify the certificate")
    objs = _webhook_objects(WEBHOOK)
    [hook] = objs["MutatingWebhookConfiguration"]["webhooks"]
    secret = objs["Secret"]
    assert secret["type"] == "kubernetes.io/tls"
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert = tmp_path / "tls.crt"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    host = f"{objs['Service']['metadata']['name']}.{NAMESPACE}.svc"
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_hostname", host, str(cert)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), "-verify_hostname", "evil.example.com", str(cert)], capture_output=True
    )
    assert wrong.returncode != 0


def test_cert_manager_issues_and_injects_instead() -> None:
    objs = _webhook_objects({"webhook": {"enabled": True, "certManager": {"enabled": True}}})
    assert "Secret" not in objs
    config = objs["MutatingWebhookConfiguration"]
    [hook] = config["webhooks"]
    assert "caBundle" not in hook["clientConfig"]
    certificate = objs["Certificate"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{certificate['metadata']['name']}"
    assert f"{objs['Service']['metadata']['name']}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": objs["Issuer"]["metadata"]["name"], "kind": "Issuer"}
    external = _webhook_objects(
        {"webhook": {"enabled": True, "certManager": {"enabled": True, "issuerName": "corp-ca", "issuerKind": "ClusterIssuer"}}}
    )
    assert "Issuer" not in external and external["Certificate"]["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_webhook_values_are_checked() -> None:
    with pytest.raises(helm().HelmValuesError, match="failurePolicy"):
        render({"webhook": {"enabled": True, "failurePolicy": "Sometimes"}})
    with pytest.raises(helm().HelmValuesError, match="excludedNamespaces"):
        render({"webhook": {"enabled": True, "excludedNamespaces": ["Kube_System"]}})
    with pytest.raises(helm().HelmValuesError, match="excludedNamespaces"):
        render({"webhook": {"enabled": True, "excludedNamespaces": "kube-system"}})
    assert yaml.safe_load(render(WEBHOOK)["dra-extender/templates/webhook.yaml"].split("---")[0])["kind"] == "Secret"


def _helm_installs() -> list[tuple[str, dict[str, Any]]]:
    """Every `helm install` in README and docs, as the values its --set flags give."""
    import re
    import shlex

    from tests.e2e.harness import ROOT

    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text().replace("\\\n", " ")
        for line in re.findall(r"^helm install .*$", text, re.M):
            words = shlex.split(line, comments=True)
            values: dict[str, Any] = {}
            for flag, value in itertools.pairwise(words):
                if flag == "--set":
                    key, _, raw = value.partition("=")
                    *parents, leaf = key.split(".")
                    node = values
                    for part in parents:
                        node = node.setdefault(part, {})
                    node[leaf] = {"true": True, "false": False}.get(raw, raw)
            found.append((path.name, values))
    return found


def test_every_documented_helm_install_renders() -> None:
    installs = _helm_installs()
    assert {name for name, _ in installs} >= {"README.md", "operator-guide.md"}
    for name, values in installs:
        assert render(values, image=False), name  # no HelmError: the image is named, the values pass the schema
