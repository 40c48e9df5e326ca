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


@cache
def _render(values_json: str) -> dict[str, str]:
    import json

    chart = helm().Chart.load(str(CHART))
    return dict(chart.render(json.loads(values_json), name=RELEASE, namespace=NAMESPACE, is_install=True))


# The image nobody publishes: every install names the one the operator built (the chart fails without it).
IMAGE = {"extender": {"image": {"repository": "registry.example.com/dra-extender"}}}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(values: dict[str, Any] | None = None, *, image: bool = True) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would print it (with IMAGE unless image=False)."""
    import json

    return _render(json.dumps(merged(IMAGE, values or {}) if image else values or {}, sort_keys=True))


def objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every rendered Kubernetes object (NOTES.txt and empty documents left out)."""
    out = []
    for path, text in sorted(render(values).items()):
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
