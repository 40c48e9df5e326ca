"""deploy/prometheus/dra-extender-rules.yaml is the chart's PrometheusRule spec at the chart's defaults.

The chart template is the one source; `python -m tests.chart.deploy_base` writes the plain file from it with
the rest of deploy/, and tests/prometheus/test_rules.py fails while the two differ.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.chart.render import render
from tests.e2e.harness import ROOT

TEMPLATE = "dra-extender/templates/prometheusrule.yaml"
RULES = "prometheus/dra-extender-rules.yaml"  # under deploy/
PLAIN = ROOT / "deploy" / RULES
HEADER = (
    "# The dra-extender's alerts for a Prometheus without prometheus-operator (rule_files:); docs/runbook.md explains each.\n"
    "# Generated from charts/dra-extender/templates/prometheusrule.yaml at the chart's defaults (/filter latency: 4 s,\n"
    "# 80% of kube-scheduler's default httpTimeout 5s): edit the template, then run `python -m tests.chart.deploy_base`.\n"
)


def chart_rule(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's PrometheusRule object with `values` (enabled)."""
    over = {"prometheusRule": {"enabled": True, **((values or {}).get("prometheusRule") or {})}}
    rest = {k: v for k, v in (values or {}).items() if k != "prometheusRule"}
    rule: dict[str, Any] = yaml.safe_load(render({**rest, **over})[TEMPLATE])
    return rule


def rules_text() -> str:
    """What deploy/prometheus/dra-extender-rules.yaml must hold."""
    return HEADER + yaml.safe_dump(chart_rule()["spec"], sort_keys=False, width=1000, allow_unicode=True)
