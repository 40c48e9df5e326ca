"""The shipped alerting rules: one source (the chart), promtool's checks and unit tests, a runbook section each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.chart.render import render
from tests.e2e.harness import ROOT
from tests.prometheus.rules import PLAIN, TEMPLATE, chart_rule, rules_text
from tests.prometheus.tools import run

RUNBOOK = ROOT / "docs" / "runbook.md"
UNIT_TESTS = ROOT / "tests" / "prometheus"


def alerts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in spec["groups"] for r in g["rules"]]


def test_the_plain_rules_file_is_the_charts_prometheusrule_at_its_defaults() -> None:
    assert yaml.safe_load(PLAIN.read_text()) == chart_rule()["spec"], "run `python -m tests.chart.deploy_base`"
    assert PLAIN.read_text() == rules_text(), "run `python -m tests.chart.deploy_base`"


def test_the_chart_makes_no_prometheusrule_unless_asked() -> None:
    assert not render().get(TEMPLATE, "").strip()


def test_promtool_check_rules() -> None:
    done = run("promtool", "check", "rules", PLAIN)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules() -> None:
    files = sorted(UNIT_TESTS.glob("*.test.yaml"))
    assert files, f"no promtool unit tests under {UNIT_TESTS}"
    done = run("promtool", "test", "rules", *(f.name for f in files), cwd=UNIT_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {t["alertname"] for f in files for case in yaml.safe_load(f.read_text())["tests"] for t in case.get("alert_rule_test", ())}
    assert tested == {a["alert"] for a in alerts(chart_rule()["spec"])}, "every alert has a promtool unit test"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_runbook_section_that_its_runbook_url_names() -> None:
    text = RUNBOOK.read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for rule in alerts(chart_rule()["spec"]):
        name = rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbook.md#{name.lower()}", (name, url)
        assert name.lower() in anchors, f"docs/runbook.md has no section {name}"
        section = text[text.index(f"### {name}\n") :].split("\n### ", 1)[0]
        for part in ("Meaning", "Impact", "Check", "Do"):
            assert f"**{part}.**" in section, f"docs/runbook.md {name}: no **{part}**"


@dataclass(frozen=True, slots=True)
class Threshold:
    name: str
    values: dict[str, Any]
    want: str  # the number after `>=` in DraExtenderFilterSlow's expression


THRESHOLDS = (
    Threshold("kube-scheduler's default 5s: 80%", {}, "4"),
    Threshold("2s", {"extender": {"httpTimeout": "2s"}}, "1.6"),
    Threshold("500ms", {"extender": {"httpTimeout": "500ms"}}, "0.4"),
    Threshold("10s: the histogram's largest bucket, 5 s", {"extender": {"httpTimeout": "10s"}}, "5"),
    Threshold("1m: 5 s as well", {"extender": {"httpTimeout": "1m"}}, "5"),
    Threshold("set explicitly", {"prometheusRule": {"filterLatencySeconds": 2.5}}, "2.5"),
)


@pytest.mark.parametrize("row", THRESHOLDS, ids=[t.name for t in THRESHOLDS])
def test_the_filter_latency_alert_follows_httptimeout(row: Threshold) -> None:
    [rule] = [r for r in alerts(chart_rule(row.values)["spec"]) if r["alert"] == "DraExtenderFilterSlow"]
    assert rule["expr"].rsplit(">= ", 1)[1] == row.want


@pytest.mark.parametrize("bad", [6, 0, -1, "4"], ids=["past the largest bucket", "zero", "negative", "a string"])
def test_a_filter_latency_the_histogram_cannot_show_is_refused(bad: object) -> None:
    with pytest.raises(Exception, match="filterLatencySeconds"):
        chart_rule({"prometheusRule": {"filterLatencySeconds": bad}})


def test_the_runbook_url_can_point_at_a_copy_and_the_rule_carries_extra_labels() -> None:
    rule = chart_rule({"prometheusRule": {"runbookURL": "https://wiki.example.com/dra-runbook", "labels": {"release": "kps"}}})
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert {r["annotations"]["runbook_url"] for r in alerts(rule["spec"])} == {
        f"https://wiki.example.com/dra-runbook#{r['alert'].lower()}" for r in alerts(rule["spec"])
    }
