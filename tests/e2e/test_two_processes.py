"""The chart's layout end to end: `serve` (the verbs) and `controllers` as two processes against the fake API server.

Eviction and a health delivery work with the controllers in their own process; `serve` holds no controller
state (no eviction or health metrics, no controller log lines, no write of its own: the fake API's request log,
by user agent); and a second process that elects the controllers' Lease never leads beside the first.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubesim.objects import node
from tests.e2e.cluster import CRD_GROUP, FakeApi, cluster_extender, holds, wait_for
from tests.e2e.harness import DEMO, ROOT, Extender, demo_pod_args, free_port
from tests.eviction.harness import DRIVER, claim_and_pod, gpu_slice, rule

HEALTH = ROOT / "examples" / "health"
NAMESPACE = "dra-system"
CONTROLLERS_LEASE = "dra-extender-controllers"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
# Series only a controller writes; `serve` must not even declare them.
CONTROLLER_SERIES = (
    "dra_extender_eviction_",
    "dra_extender_volume_evictions",
    "dra_extender_health_",
    "dra_extender_foreign_scheduler_pods",
)
CONTROLLER_LOGGERS = ("dra_extender.eviction", "dra_extender.health", "dra_extender.foreign_pods")
VERB_SERIES = ("dra_extender_requests", "dra_extender_request_duration_seconds", "dra_extender_binds", "dra_extender_placement_wait")


def series(ext: Extender) -> set[str]:
    """The metric families a process's /metrics declares."""
    return {line.split()[2] for line in ext.http.get("/metrics").text.splitlines() if line.startswith("# TYPE ")}


def writes_by(api: FakeApi, agent: str) -> list[tuple[str, str, str]]:
    """(verb, resource, path) of every write whose user agent starts with `agent`."""
    return [(r["verb"], r["resource"], r["path"]) for r in api.requests() if r["user_agent"].startswith(agent) and r["verb"] in WRITES]


def deliver(port: int, token: str) -> httpx.Response:
    """POST the worked example's firing alert, retrying the 503 answered while the controllers sync (as Alertmanager would)."""
    deadline = time.monotonic() + 30
    while True:
        r = httpx.post(
            f"http://127.0.0.1:{port}/alerts",
            content=(HEALTH / "alert-firing.json").read_bytes(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=10,
        )
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def xid_rules(api: FakeApi) -> list[dict[str, Any]]:
    """The rules the health controller made for the policy's xid-79 rule (the alert's)."""
    return [r for r in api.list("DeviceTaintRule", group=CRD_GROUP) if r["spec"]["taint"]["key"] == "health.dra-extender.io/xid"]


def test_serve_and_controllers_as_two_processes(tmp_path: Path) -> None:
    api = FakeApi(DEMO, HEALTH / "policy.yaml")
    # A node of its own for the eviction (pool node-x), beside the demo's node-a that the alert names.
    api.control(
        "POST",
        "objects",
        {
            "kind": "List",
            "items": [
                node("node-x"),
                gpu_slice(2, node_name="node-x"),
                *claim_and_pod("victim", 0, node_name="node-x"),
                *claim_and_pod("bystander", 1, node_name="node-x"),
            ],
        },
    )
    alerts = free_port()
    token = (HEALTH / "token").read_text().strip()
    serve = cluster_extender(api, "--placement-wait", "0")
    controllers = cluster_extender(
        api, "--leader-elect", "--alerts-listen", f"127.0.0.1:{alerts}", "--alerts-token-file", str(HEALTH / "token"),
        env={"POD_NAMESPACE": NAMESPACE}, command="controllers",
    )  # fmt: skip
    try:
        serve.wait_ready()
        controllers.wait_ready()
        # The controllers' own Lease, in their namespace.
        wait_for(
            lambda: (api.get("Lease", NAMESPACE, CONTROLLERS_LEASE) or {}).get("spec", {}).get("holderIdentity"), what="the Lease held"
        )
        assert api.get("Lease", NAMESPACE, "dra-extender") is None and api.get("Lease", "default", "dra-extender") is None

        # Eviction: a NoExecute rule on the victim's device deletes it, and only it.
        api.create(rule("drain", selector={"driver": DRIVER, "pool": "node-x", "device": "gpu-0"}))
        wait_for(lambda: api.get("Pod", "default", "victim") is None, timeout=20, what="the victim deleted")
        assert api.get("Pod", "default", "bystander") is not None

        # A health delivery: the alert makes a rule.
        r = deliver(alerts, token)
        assert (r.status_code, r.json()) == (200, {"alerts": {"firing": 1}}), r.text
        [made] = wait_for(lambda: xid_rules(api), timeout=20, what="the health rule")
        assert made["spec"]["taint"]["effect"] == "NoSchedule", made

        # The verbs still answer from serve, which sees what the controllers wrote.
        assert serve.post("filter", demo_pod_args("plain", ["node-a"])).status_code == 200

        # serve holds no controller state: no series, no log line, no write.
        declared = series(serve)
        assert not [s for s in declared if s.startswith(CONTROLLER_SERIES)], declared
        assert [s for s in declared if s.startswith(VERB_SERIES)], declared
        assert not [s for s in series(controllers) if s.startswith(VERB_SERIES)]
        assert {"dra_extender_eviction_pod_deletions_total", "dra_extender_health_signals_total"} <= series(controllers)
        logs = serve.logs()
        for logger in CONTROLLER_LOGGERS:
            assert f" {logger}: " not in logs, (logger, logs[-3000:])
        assert " dra_extender.eviction: " in controllers.logs()
        assert writes_by(api, "dra-extender-serve/") == []
        done = writes_by(api, "dra-extender-controllers/")
        assert ("delete", "pods", "/api/v1/namespaces/default/pods/victim") in done, done
        assert any(verb == "create" and resource == "devicetaintrules" for verb, resource, _ in done), done
        assert any(resource == "leases" for _, resource, _ in done), done
    finally:
        serve.stop()
        controllers.stop()
        api.stop()


def _leads_controllers(ext: Extender) -> bool | None:
    """The last change of the controllers' leadership this process logged (json logs), None before any."""
    last = None
    for line in ext.logs().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("msg") == "leadership changed" and str(entry.get("lease", "")).endswith(f"/{CONTROLLERS_LEASE}"):
                last = entry["leader"]
    return last


# name -> the command of the second process (it elects the controllers' Lease either way)
SECOND = {
    "a second controllers replica": "controllers",
    "all from a workstation": "all",
}


@pytest.mark.parametrize("case", list(SECOND))
def test_a_second_process_never_leads_the_controllers_beside_the_first(case: str) -> None:
    api = FakeApi(DEMO)
    env = {"POD_NAMESPACE": NAMESPACE}
    first = cluster_extender(api, "--leader-elect", "--log-format", "json", env={**env, "HOSTNAME": "first"}, command="controllers")
    second = None
    try:
        first.wait_ready()
        wait_for(lambda: _leads_controllers(first), what="the first process leading")
        second = cluster_extender(
            api, "--leader-elect", "--lease-namespace", NAMESPACE, "--log-format", "json", env={"HOSTNAME": "second"}, command=SECOND[case]
        )
        second.wait_ready()
        wait_for(lambda: "electing the controllers' leader" in second.logs(), what="the second process electing")

        def one_leader() -> bool:
            holder = (api.get("Lease", NAMESPACE, CONTROLLERS_LEASE) or {}).get("spec", {}).get("holderIdentity", "")
            return holder.startswith("first_") and _leads_controllers(first) is True and _leads_controllers(second) is not True

        holds(one_leader, 3.0, what="the first process alone leading the controllers")
        # The first stops (its Lease released): the second takes over.
        assert first.stop() == 0
        wait_for(lambda: _leads_controllers(second), timeout=20, what="the second process leading once the first is gone")
    finally:
        first.stop()
        if second is not None:
            second.stop()
        api.stop()
