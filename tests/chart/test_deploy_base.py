"""deploy/ (the kustomize base for installs without Helm) holds the chart's default objects, and kustomize finds them all."""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from dra_extender.cli import build_parser
from tests.chart.deploy_base import DEPLOY, IMAGE_PLACEHOLDER, NAMESPACE, chart_objects, crd_files, namespace, render_base
from tests.prometheus.rules import RULES


def _files() -> set[str]:
    return {str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*") if p.is_file()}


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


def _base_objects() -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/` sends (without an image override): every document of every listed resource."""
    return [d for name in _kustomization()["resources"] for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def test_deploy_is_generated_from_the_chart() -> None:
    want = render_base()
    assert _files() == set(want), "regenerate: python -m tests.chart.deploy_base"
    for name, text in want.items():
        assert (DEPLOY / name).read_text() == text, f"deploy/{name} differs from the chart: python -m tests.chart.deploy_base"


def test_the_kustomization_lists_every_file_once() -> None:
    kustomization = _kustomization()
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources)) and set(resources) == _files() - {"kustomization.yaml", RULES}


def test_the_base_holds_exactly_the_charts_default_objects() -> None:
    want = [namespace(), *(yaml.safe_load(t) for t in crd_files().values()), *(o for docs in chart_objects().values() for o in docs)]
    have = _base_objects()
    assert Counter(map(_key, have)) == Counter(map(_key, want))
    by_key = {_key(o): o for o in want}
    for obj in have:
        assert obj == by_key[_key(obj)], f"{_key(obj)} differs from the chart's rendering"
    for obj in have:
        if obj["kind"] not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            # kube-scheduler's read of the API server's authentication config is granted where that ConfigMap lives.
            expected = "kube-system" if obj["metadata"]["name"].endswith("-authentication-reader") else NAMESPACE
            assert obj["metadata"]["namespace"] == expected, _key(obj)


def test_the_base_starts_a_sidecar_that_follows_its_scheduler() -> None:
    [deployment] = [o for o in _base_objects() if o["kind"] == "Deployment" and not o["metadata"]["name"].endswith("-controllers")]
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    extender = containers["dra-extender"]
    assert extender["image"].split(":")[0] == IMAGE_PLACEHOLDER, "the name `kustomize edit set image dra-extender=...` replaces"
    args = build_parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in extender["args"]])
    assert args.scheduler_config == "/etc/dra-scheduler/config.yaml" and args.in_cluster
