"""Render charts/dra-extender with Helm's own Go engine (libhelm_c from the helm-python-sdk wheel).

No home-made template renderer: when the wheel is missing the chart checks
skip and say so.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ROOT

CHART = ROOT / "charts" / "dra-extender"
NAMESPACE = "dra-system"
RELEASE = "dra"

helm_python: Any
try:  # pragma: no cover - depends on the test extra
    import helm_python
except ImportError:  # pragma: no cover
    helm_python = None


def helm() -> Any:
    if helm_python is None:
        pytest.skip("helm-python-sdk (Helm's Go engine) is not installed: pip install -e '.[test]'")
    return helm_python


# The Kubernetes version Helm's capabilities report when none is given (its client-go's minor): what
# `helm template` without --kube-version renders, and what `helm install` reads from the cluster instead.
HELM_DEFAULT_KUBE_VERSION = "v1.36.0"


def render_chart(chart_path: str, values: dict[str, Any], name: str, namespace: str, kube_version: str | None) -> dict[str, str]:
    """Helm's render at `kube_version` (`.Capabilities.KubeVersion`, as `helm template --kube-version`).

    The SDK's Chart.render takes no kube version; its native render does (the option `helm template`
    passes), so the call goes there with the same options Chart.render sends.
    """
    import json

    chart = helm().Chart.load(chart_path)
    if kube_version is None:
        return dict(chart.render(values, name=name, namespace=namespace, is_install=True))
    from helm_python import _native

    opts = {"name": name, "namespace": namespace, "is_install": True, "kube_version": kube_version}
    rendered: dict[str, str] = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts)))
    return rendered


@cache
def _render(values_json: str, kube_version: str | None = None) -> dict[str, str]:
    import json

    return render_chart(str(CHART), json.loads(values_json), RELEASE, NAMESPACE, kube_version)


# The image nobody publishes: every install names the one the operator built (the chart fails without it).
IMAGE = {"extender": {"image": {"repository": "registry.example.com/dra-extender"}}}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(values: dict[str, Any] | None = None, *, image: bool = True, kube_version: str | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template [--kube-version]` would print it (with IMAGE unless image=False)."""
    import json

    return _render(json.dumps(merged(IMAGE, values or {}) if image else values or {}, sort_keys=True), kube_version)


def objects(values: dict[str, Any] | None = None, *, kube_version: str | None = None) -> list[dict[str, Any]]:
    """Every rendered Kubernetes object (NOTES.txt and empty documents left out)."""
    out = []
    for path, text in sorted(render(values, kube_version=kube_version).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(doc)
    return out


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]


def one(objs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"{kind} *{name_suffix}: {[o['metadata']['name'] for o in found]}"
    return found[0]
