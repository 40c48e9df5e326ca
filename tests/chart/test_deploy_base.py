"""deploy/ (the kustomize base for installs without Helm) holds the chart's default objects, and kustomize finds them all."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_extender.cli import build_parser
from tests.chart.deploy_base import (
    DEPLOY,
    IMAGE_PLACEHOLDER,
    NAMESPACE,
    SCHEDULER_IMAGE,
    VERSIONS,
    chart_objects,
    crd_files,
    namespace,
    render_base,
    render_versions,
    scheduler_tags,
    with_images,
)
from tests.chart.test_scheduler_version import CONFIG_VERSIONS
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
    want = {**render_base(), **render_versions()}
    assert _files() == set(want), "regenerate: python -m tests.chart.deploy_base"
    for name, text in want.items():
        assert (DEPLOY / name).read_text() == text, f"deploy/{name} differs from the chart: python -m tests.chart.deploy_base"


def test_the_kustomization_lists_every_file_once() -> None:
    kustomization = _kustomization()
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources)) and set(resources) == {f for f in _files() if not f.startswith(f"{VERSIONS}/")} - {
        "kustomization.yaml",
        RULES,
    }


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


MINORS = sorted(CONFIG_VERSIONS)


def _component(minor: str) -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / VERSIONS / minor / "kustomization.yaml").read_text())


def _scheduler(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [o for o in objs if o["kind"] == "Deployment" and not o["metadata"]["name"].endswith("-controllers")]
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")


@pytest.mark.parametrize("minor", MINORS)
def test_each_minor_has_a_component_that_makes_the_base_the_charts_install_there(minor: str) -> None:
    """deploy/ plus versions/<minor> is what the chart installs on a cluster of that minor: its kube-scheduler, and nothing else differs."""
    component = _component(minor)
    assert component["kind"] == "Component" and component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    tag = scheduler_tags()[minor]
    assert tag.startswith(f"v{minor}."), (minor, tag)
    there = [o for docs in chart_objects(tag).values() for o in docs]
    base = [o for docs in chart_objects().values() for o in docs]
    assert with_images(base, component["images"]) == there
    assert _scheduler(there)["image"] == f"{SCHEDULER_IMAGE}:{tag}"
    [config] = [yaml.safe_load(o["data"]["config.yaml"]) for o in there if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    assert config["apiVersion"] in CONFIG_VERSIONS[minor]


@pytest.mark.parametrize("minor", MINORS)
def test_kustomize_builds_the_base_with_a_minors_component(tmp_path: Path, minor: str) -> None:
    """What the operator guide says to run: add the component to the base, build it with kustomize (kubectl's)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (its kustomize) is not installed")
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    with (copy / "kustomization.yaml").open("a") as f:
        f.write(f"components:\n- {VERSIONS}/{minor}\n")
    built = subprocess.run([kubectl, "kustomize", str(copy)], capture_output=True, text=True, timeout=60, check=True).stdout
    objs = [d for d in yaml.safe_load_all(built) if d]
    assert _scheduler(objs)["image"] == f"{SCHEDULER_IMAGE}:{scheduler_tags()[minor]}"
    assert Counter(map(_key, objs)) == Counter(map(_key, _base_objects()))
