"""Every metric the dashboard and the alerting rules read is one a live `serve` or `controllers` exports.

The names come from each process's /metrics, started against the fake API server: the `# TYPE` lines, which
prometheus_client prints for every declared family, a labelled one before its first sample too (so a series
that appears only after an event, such as a guard trip or a refused delivery, is still listed), plus the
suffixes Prometheus sees (counters' `_total`, histograms' `_bucket`, `_sum`, `_count`). Each rule group must
fit the process it is about: the serve group reads only serve's series, the controllers group only the
controllers', the sources group both; `dra_extender_leader` carries the role of each Lease the process
follows or holds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from tests.chart.render import CHART
from tests.e2e.cluster import FakeApi, cluster_extender
from tests.e2e.harness import DEMO, Extender
from tests.prometheus.rules import chart_rule

METRIC = re.compile(r"\bdra_extender_[a-z_]+")


def exported(ext: Extender) -> tuple[set[str], str]:
    """The series names a process's /metrics declares (with Prometheus's suffixes), and the page itself."""
    text = ext.http.get("/metrics").text
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
            if kind == "histogram":
                names |= {f"{name}_{s}" for s in ("bucket", "sum", "count")}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names, text


def rule_metrics(group: str) -> set[str]:
    """The metric names a rule group of the shipped rules reads."""
    [found] = [g for g in chart_rule()["spec"]["groups"] if g["name"] == group]
    return {m for r in found["rules"] for m in METRIC.findall(r["expr"])}


def dashboard_metrics() -> set[str]:
    dashboard = json.loads((CHART / "dashboards" / "dra-extender.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return {m for q in queries for m in METRIC.findall(q)}


@dataclass(frozen=True, slots=True)
class Process:
    name: str
    command: str
    roles: tuple[str, ...]  # dra_extender_leader's role labels on its /metrics
    groups: tuple[str, ...]  # the rule groups whose metrics it must export


PROCESSES = (
    Process("serve", "serve", ("verbs",), ("dra-extender-serve", "dra-extender-sources")),
    Process("controllers", "controllers", ("controllers",), ("dra-extender-controllers", "dra-extender-sources")),
    Process("all", "all", ("verbs", "controllers"), ("dra-extender-serve", "dra-extender-controllers", "dra-extender-sources")),
)


@pytest.fixture(scope="module")
def live() -> dict[str, tuple[set[str], str]]:
    """Each process's exported names and /metrics page, every process against one fake API server."""
    api = FakeApi(DEMO)
    out = {}
    try:
        for p in PROCESSES:  # one at a time: three starting at once on two shared cores can take longer than wait_ready
            ext = cluster_extender(api, command=p.command)
            try:
                ext.wait_ready(timeout=90)
                out[p.name] = exported(ext)
            finally:
                ext.stop()
        return out
    finally:
        api.stop()


@pytest.mark.parametrize("proc", PROCESSES, ids=[p.name for p in PROCESSES])
def test_each_process_exports_what_its_rules_read_and_its_leader_roles(proc: Process, live: dict[str, tuple[set[str], str]]) -> None:
    names, text = live[proc.name]
    for group in proc.groups:
        missing = rule_metrics(group) - names
        assert not missing, f"{proc.name} does not export {sorted(missing)}, read by the rule group {group}"
    roles = tuple(sorted(re.findall(r'^dra_extender_leader\{role="([a-z]+)"\} 1\.0$', text, re.M)))
    assert roles == tuple(sorted(proc.roles)), text[text.find("dra_extender_leader") :][:400]


def test_the_serve_and_controllers_rule_groups_read_only_their_own_processes_series(live: dict[str, tuple[set[str], str]]) -> None:
    serve, _ = live["serve"]
    controllers, _ = live["controllers"]
    own = {"dra-extender-serve": serve - controllers, "dra-extender-controllers": controllers - serve}
    shared = {"dra_extender_leader"}  # told apart by its role label
    for group, names in own.items():
        stray = rule_metrics(group) - names - shared
        assert not stray, f"{group} reads {sorted(stray)}, which the other process exports too: the alert would mix them"


def test_every_dashboard_and_rule_metric_is_exported_by_serve_or_controllers(live: dict[str, tuple[set[str], str]]) -> None:
    both = live["serve"][0] | live["controllers"][0]
    read = dashboard_metrics() | {m for g in chart_rule()["spec"]["groups"] for m in rule_metrics(g["name"])}
    assert read, "no metric read"
    assert not read - both, f"not exported by a live serve or controllers: {sorted(read - both)}"
    for panel_metric in (
        "dra_extender_health_devices",
        "dra_extender_health_guard_waiting_devices",
        "dra_extender_health_guard_trips_total",
        "dra_extender_health_signals_total",
        "dra_extender_health_delivery_duration_seconds_bucket",
        "dra_extender_followed_lease_stale",
        "dra_extender_foreign_scheduler_pods_total",
    ):
        assert panel_metric in dashboard_metrics(), f"the dashboard has no panel on {panel_metric}"
