"""A write the API server refuses for one object stays that object's problem; 503 only while no write gets through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from controllers.health.failures import server_wide
from controllers.health.policy import GROUP
from controllers.health.rules import POLICY_LABEL
from kubesim.fakeapi import RequestInfo
from kubesim.fakeapi.store import ApiError
from kubesim.objects import node
from tests.eviction.harness import CRD, T0, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule
from tracker.source import status_error

XID_48 = xid_rule(name="xid-48", signal={"alert": {"matchLabels": {"alertname": "GPUXid", "xid": "48"}}}, steps=[{"effect": "NoSchedule"}])


def rule_names(cluster: HealthCluster) -> list[str]:
    return sorted(r["metadata"]["name"] for r in cluster.api.list("devicetaintrules", group=CRD, label_selector=POLICY_LABEL))


def conditions(cluster: HealthCluster, name: str) -> dict[str, dict[str, Any]]:
    obj = cluster.api.get("devicehealthpolicies", None, name, group=GROUP)
    assert obj is not None
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


class Refuse:
    """A reactor: the API server refuses (422, as for an annotation over its size limit) every PATCH of one object."""

    def __init__(self, cluster: HealthCluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.at: list[float] = []

    def __call__(self, info: RequestInfo) -> ApiError | None:
        if info.verb != "patch" or info.name != self.name:
            return None
        self.at.append(self.cluster.clock.now() - T0)
        return ApiError(
            422, f'DeviceTaintRule.resource.dra-extender.io "{self.name}" is invalid: metadata.annotations: Too long', "Invalid"
        )


async def two_policies(cluster: HealthCluster) -> str:
    """Policies a (xid 79) and b (xid 48) over one node's 4 GPUs; a holds gpu-0. The name of a's rule."""
    seed(cluster.api, node("node-a"), uuid_slice(4), policy("a", xid_rule(clearAfter="1h")), policy("b", XID_48))
    await cluster.start()
    assert await cluster.post(delivery(alert("GPU-node-a-0"))) == (200, {"alerts": {"firing": 1}})
    [name] = rule_names(cluster)
    return name


async def test_a_rule_the_api_server_refuses_is_retried_with_backoff_and_every_other_delivery_is_applied(cluster: HealthCluster) -> None:
    refused = await two_policies(cluster)
    refuse = Refuse(cluster, refused)
    cluster.api.add_reactor(refuse)
    # a's rule changes (the alert resolves): its PATCH is refused.
    assert await cluster.post(delivery(alert("GPU-node-a-0", status="resolved"))) == (200, {"alerts": {"resolved": 1}})
    assert refuse.at == [0.0]
    # b's alerts are answered and written meanwhile, and so are a's other devices.
    assert await cluster.post(delivery(alert("GPU-node-a-1", xid="48"))) == (200, {"alerts": {"firing": 1}})
    assert await cluster.post(delivery(alert("GPU-node-a-2"))) == (200, {"alerts": {"firing": 1}})
    assert len(rule_names(cluster)) == 3
    ready = conditions(cluster, "a")["RulesWritten"]
    assert (ready["status"], ready["reason"]) == ("False", "RuleWriteFailed")
    assert refused in ready["message"] and "Too long" in ready["message"]
    assert conditions(cluster, "b")["RulesWritten"]["status"] == "True"
    [event] = [w.body for w in cluster.recorder.events() if w.body["reason"] == "RuleWriteFailed"]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "a" and refused in event["message"]
    # Retried with exponential backoff on the controller's clock, capped at 5 minutes.
    await cluster.advance(1200)
    gaps = [b - a for a, b in zip(refuse.at, refuse.at[1:], strict=False)]
    assert gaps[:8] == [1, 2, 4, 8, 16, 32, 64, 128] and set(gaps[9:]) == {300}, gaps
    assert len([w for w in cluster.recorder.events() if w.body["reason"] == "RuleWriteFailed"]) == 1  # told once per streak
    # Once the API server takes it, the policy says so again.
    cluster.api.remove_reactor(refuse)
    await cluster.advance(300)
    assert conditions(cluster, "a")["RulesWritten"]["status"] == "True"
    patched = [w.at - T0 for w in cluster.recorder.writes if w.verb == "patch" and w.name == refused]
    assert refuse.at[-1] == 1111 and patched[-1] == 1411  # the retry due after the last refusal, taken


@dataclass(frozen=True, slots=True)
class Outage:
    name: str
    faults: dict[str, Any]
    answer: int  # what a delivery for policy b gets while it lasts


OUTAGES = [
    Outage("one rule refused (422)", {"error_status": 422, "verbs": ("patch",), "paths": (r"/devicetaintrules/a\.",)}, 200),
    Outage("every write answered 500", {"error_status": 500, "verbs": ("create", "patch", "update", "delete")}, 503),
    Outage("every write answered 503", {"error_status": 503, "verbs": ("create", "patch", "update", "delete")}, 503),
]


@pytest.mark.parametrize("outage", OUTAGES, ids=lambda o: o.name)
async def test_deliveries_are_refused_only_while_the_api_server_as_a_whole_cannot_be_written(
    cluster: HealthCluster, outage: Outage
) -> None:
    await two_policies(cluster)
    cluster.api.set_faults(error_rate=1.0, **outage.faults)
    await cluster.post(delivery(alert("GPU-node-a-0", status="resolved")))  # a write of a's rule, and of its status
    await cluster.advance(1)
    status, answer = await cluster.post(delivery(alert("GPU-node-a-1", xid="48")))
    assert status == outage.answer, answer
    cluster.api.clear_faults()
    await cluster.advance(60)
    assert await cluster.post(delivery(alert("GPU-node-a-1", xid="48"))) == (
        200,
        {"alerts": {"firing" if outage.answer == 503 else "repeat": 1}},
    )
    assert len(rule_names(cluster)) == 2


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    error: BaseException
    server_wide: bool


VERDICTS = [
    Verdict("422: the schema refuses the object", status_error(422, b'{"message": "Too long"}', "patch"), False),
    Verdict("404: the object is gone", status_error(404, b"{}", "patch"), False),
    Verdict("409: a conflict on the object", status_error(409, b"{}", "patch"), False),
    Verdict("400: a bad request for the object", status_error(400, b"{}", "patch"), False),
    Verdict("500", status_error(500, b"{}", "patch"), True),
    Verdict("503", status_error(503, b"{}", "patch"), True),
    Verdict("429: throttled", status_error(429, b"{}", "patch"), True),
    Verdict("403: our identity may not write", status_error(403, b"{}", "patch"), True),
    Verdict("connection refused", ConnectionRefusedError(111, "Connection refused"), True),
    Verdict("timeout", TimeoutError(), True),
]


@pytest.mark.parametrize("verdict", VERDICTS, ids=lambda v: v.name)
def test_which_failures_say_the_api_server_cannot_be_written(verdict: Verdict) -> None:
    assert server_wide(verdict.error) is verdict.server_wide
