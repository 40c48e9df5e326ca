"""examples/webhook-outside-cluster/: the chart's MutatingWebhookConfiguration with `url:`, otherwise the same."""

from __future__ import annotations

import yaml

from tests.chart.render import objects, one
from tests.e2e.harness import ROOT

EXAMPLE = ROOT / "examples" / "webhook-outside-cluster" / "mutatingwebhookconfiguration.yaml"


def test_the_outside_webhook_configuration_differs_from_the_charts_only_where_it_must() -> None:
    [chart] = one(objects({"webhook": {"enabled": True}}), "MutatingWebhookConfiguration")["webhooks"]
    [example] = yaml.safe_load(EXAMPLE.read_text())["webhooks"]
    url = example["clientConfig"]["url"]
    assert url.startswith("https://") and url.endswith("/mutate") and "service" not in example["clientConfig"]
    assert chart["clientConfig"]["service"]["path"] == "/mutate"
    # No release namespace outside a cluster: only kube-system is left out.
    assert example["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
    }
    skip = ("clientConfig", "namespaceSelector")
    assert {k: v for k, v in example.items() if k not in skip} == {k: v for k, v in chart.items() if k not in skip}
