"""deploy/, the kustomize base, generated from the chart: `python -m tests.chart.deploy_base` rewrites it.

For an install without Helm (`kubectl apply -k deploy/`): the objects the
chart renders with its default values, release `dra-extender` in namespace
`dra-system`, less Helm's own bookkeeping labels, plus the Namespace and the
CRDs, and prometheus/dra-extender-rules.yaml (the chart's PrometheusRule spec, for Prometheus's
rule_files; not a kustomize resource). The extender's image is the placeholder `dra-extender`, which
`kustomize edit set image dra-extender=REGISTRY/dra-extender:TAG` replaces.
tests/chart/test_deploy_base.py fails when deploy/ and the chart differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.chart.render import CHART, helm
from tests.e2e.harness import ROOT
from tests.prometheus.rules import RULES, rules_text

DEPLOY = ROOT / "deploy"
NAMESPACE = "dra-system"
RELEASE = "dra-extender"
IMAGE_PLACEHOLDER = "dra-extender"
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


def chart_objects() -> dict[str, list[dict[str, Any]]]:
    """Template file name -> the objects the chart renders from it with its defaults (Helm's labels left out)."""
    values = {"extender": {"image": {"repository": IMAGE_PLACEHOLDER}}}
    rendered = helm().Chart.load(str(CHART)).render(json.loads(json.dumps(values)), name=RELEASE, namespace=NAMESPACE, is_install=True)
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


def write() -> None:
    for name, text in render_base().items():
        path = DEPLOY / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


if __name__ == "__main__":
    write()
