"""deploy/, the kustomize base, generated from the chart: `python -m tests.chart.deploy_base` rewrites it.

For an install without Helm (`kubectl apply -k deploy/`): the objects the
chart renders with its default values, release `dra-extender` in namespace
`dra-system`, less Helm's own bookkeeping labels, plus the Namespace and the
CRDs, and prometheus/dra-extender-rules.yaml (the chart's PrometheusRule spec, for Prometheus's
rule_files; not a kustomize resource). The extender's image is the placeholder `dra-extender`, which
`kustomize edit set image dra-extender=REGISTRY/dra-extender:TAG` replaces.
tests/chart/test_deploy_base.py fails when deploy/ and the chart differ.

The base is the chart rendered for Kubernetes BASE_KUBE_VERSION; kube-scheduler
must be the cluster's minor, so deploy/versions/<minor>/ holds a kustomize
Component per minor of the chart's `scheduler.image.tagByMinor`: what the chart
renders differently for that minor (today the kube-scheduler image alone, an
`images:` entry; the generator refuses any other difference). A Component,
not an overlay: an overlay below deploy/ cannot take deploy/ as its base
(kustomize refuses the cycle), while the base or an own overlay can add the
component.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.chart.render import CHART, render_chart
from tests.e2e.harness import ROOT
from tests.prometheus.rules import RULES, rules_text

DEPLOY = ROOT / "deploy"
NAMESPACE = "dra-system"
RELEASE = "dra-extender"
IMAGE_PLACEHOLDER = "dra-extender"
BASE_KUBE_VERSION = "v1.36.2"  # the minor the docs were measured on
SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"
VERSIONS = "versions"
HELM_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")
HEADER = (
    "# Generated from charts/dra-extender (default values) by `python -m tests.chart.deploy_base`;\n"
    "# tests/chart/test_deploy_base.py keeps it equal to the chart. Edit the chart, then regenerate.\n"
)


def _without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj.get("metadata", {}).get("labels")
    if labels:
        for key in HELM_LABELS:
            labels.pop(key, None)
    return obj


def chart_objects(kube_version: str = BASE_KUBE_VERSION) -> dict[str, list[dict[str, Any]]]:
    """Template file name -> the objects the chart renders from it with its defaults for a cluster of `kube_version` (Helm's labels left out)."""
    values = {"extender": {"image": {"repository": IMAGE_PLACEHOLDER}}}
    rendered = render_chart(str(CHART), json.loads(json.dumps(values)), RELEASE, NAMESPACE, kube_version)
    out: dict[str, list[dict[str, Any]]] = {}
    for path, text in sorted(dict(rendered).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs = [_without_helm_labels(d) for d in yaml.safe_load_all(text) if d]
        if docs:
            out[Path(path).name] = docs
    return out


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def crd_files() -> dict[str, str]:
    return {f"crds/{p.name}": p.read_text() for p in sorted((CHART / "crds").glob("*.yaml"))}


def _dump(docs: list[dict[str, Any]]) -> str:
    return HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=1000) for d in docs)


def render_base() -> dict[str, str]:
    """File under deploy/ -> its text."""
    files = {"namespace.yaml": _dump([namespace()])}
    files.update(crd_files())
    for name, docs in chart_objects().items():
        files[name] = _dump(docs)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(files),
    }
    files["kustomization.yaml"] = (
        HEADER
        + "# The extender's image is a placeholder: `kustomize edit set image dra-extender=REGISTRY/dra-extender:TAG`\n"
        + "# (build and push it from the Dockerfile first), then `kubectl apply -k`.\n"
        + yaml.safe_dump(kustomization, sort_keys=False)
    )
    files[RULES] = rules_text()  # for Prometheus's rule_files, not kustomize
    return files


def scheduler_tags() -> dict[str, str]:
    """Minor ("1.34") -> the kube-scheduler tag the chart runs on it (values.yaml's scheduler.image.tagByMinor)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return dict(values["scheduler"]["image"]["tagByMinor"])


def with_images(objs: list[dict[str, Any]], images: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Kustomize's `images:` transform (name -> newTag) on the pods' containers, as `kubectl apply -k` applies it."""
    tags = {i["name"]: i["newTag"] for i in images}
    out = json.loads(json.dumps(objs))
    for obj in out:
        for c in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            name = c["image"].rpartition(":")[0] or c["image"]
            if name in tags:
                c["image"] = f"{name}:{tags[name]}"
    return out


def version_component(minor: str, tag: str) -> dict[str, Any]:
    """deploy/versions/<minor>: the chart's differences for that minor from the base, refused when not just images."""
    images = [{"name": SCHEDULER_IMAGE, "newTag": tag}]
    base = [o for docs in chart_objects().values() for o in docs]
    there = [o for docs in chart_objects(tag).values() for o in docs]
    if with_images(base, images) != there:
        raise ValueError(
            f"the chart renders Kubernetes {minor} differently from the base beyond the kube-scheduler image: teach version_component() the difference"
        )
    return {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "images": images}


def render_versions() -> dict[str, str]:
    return {
        f"{VERSIONS}/{minor}/kustomization.yaml": HEADER
        + f"# Kubernetes {minor}: kube-scheduler {tag}, as the chart runs on {minor}. In deploy/: `kustomize edit add component\n"
        + f"# {VERSIONS}/{minor}` (or `components: [.../deploy/{VERSIONS}/{minor}]` in an overlay of your own), then `kubectl apply -k`.\n"
        + yaml.safe_dump(version_component(minor, tag), sort_keys=False)
        for minor, tag in sorted(scheduler_tags().items())
    }


def write() -> None:
    for name, text in {**render_base(), **render_versions()}.items():
        path = DEPLOY / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


if __name__ == "__main__":
    write()
