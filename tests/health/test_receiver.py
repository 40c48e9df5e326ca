"""The webhook receiver: every bad input with its status code and message; Alertmanager's and Grafana's payloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from tests.eviction.harness import node, seed
from tests.health.harness import TOKEN, HealthCluster, alert, delivery, policy, uuid_slice

GOOD = delivery(alert("GPU-node-a-0"))


def without(d: dict[str, Any], *path: Any) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(d))
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    del cur[path[-1]]
    return out


def with_(d: dict[str, Any], value: Any, *path: Any) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(d))
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out


@dataclass(frozen=True)
class Bad:
    name: str
    body: Any
    status: int
    message: str
    token: str | None = TOKEN
    raw: bytes | None = None


BAD = [
    Bad("no token", GOOD, 401, "missing or wrong bearer token", token=None),
    Bad("wrong token", GOOD, 401, "missing or wrong bearer token", token="nope"),
    Bad("not JSON", None, 400, "body: is not JSON", raw=b"{nope"),
    Bad("not an object", [1], 400, "body: must be a JSON object, got list"),
    Bad("no version", without(GOOD, "version"), 400, 'version: is required ("4" from Alertmanager, "1" from Grafana)'),
    Bad("unknown version", with_(GOOD, "3", "version"), 400, "version: unknown webhook version '3'"),
    Bad("version as a number", with_(GOOD, 4, "version"), 400, "version: unknown webhook version 4"),
    Bad("no alerts", without(GOOD, "alerts"), 400, "alerts: is required (a list)"),
    Bad("alerts not a list", with_(GOOD, {}, "alerts"), 400, "alerts: is required (a list)"),
    Bad("alert not an object", with_(GOOD, ["x"], "alerts"), 400, "alerts[0]: must be an object, got str"),
    Bad("no status", without(GOOD, "alerts", 0, "status"), 400, "alerts[0].status: must be firing or resolved, got None"),
    Bad(
        "unknown status", with_(GOOD, "pending", "alerts", 0, "status"), 400, "alerts[0].status: must be firing or resolved, got 'pending'"
    ),
    Bad("no fingerprint", without(GOOD, "alerts", 0, "fingerprint"), 400, "alerts[0].fingerprint: is required (a non-empty string)"),
    Bad("no labels", without(GOOD, "alerts", 0, "labels"), 400, "alerts[0].labels: is required"),
    Bad("labels not an object", with_(GOOD, [], "alerts", 0, "labels"), 400, "alerts[0].labels: must be an object of strings, got list"),
    Bad("label not a string", with_(GOOD, 79, "alerts", 0, "labels", "xid"), 400, "alerts[0].labels.xid: must be a string, got int"),
    Bad("no startsAt", without(GOOD, "alerts", 0, "startsAt"), 400, "alerts[0].startsAt: is required"),
    Bad(
        "bad startsAt",
        with_(GOOD, "yesterday", "alerts", 0, "startsAt"),
        400,
        "alerts[0].startsAt: must be an RFC 3339 time, got 'yesterday'",
    ),
    Bad("receiver not a string", with_(GOOD, 1, "receiver"), 400, "receiver: must be a string"),
    Bad("10 MiB body", None, 413, "is over the limit of 10485760 bytes", raw=b" " * (10 * 1024 * 1024 + 1)),
]


@pytest.mark.parametrize("row", BAD, ids=[b.name for b in BAD])
async def test_bad_input(cluster: HealthCluster, row: Bad) -> None:
    seed(cluster.api, node(), uuid_slice(1), policy())
    await cluster.start()
    status, answer = await cluster.post(row.body, token=row.token, raw=row.raw)
    assert status == row.status
    assert row.message in (answer.get("error") or answer.get("text", ""))
    if status == 400:
        assert answer["field"] == row.message.split(":")[0]
    assert cluster.api.list("devicetaintrules", group="resource.dra-extender.io") == []


def grafana(*alerts: dict[str, Any]) -> dict[str, Any]:
    """Grafana's webhook contact point (version 1)."""
    return {
        "receiver": "dra-extender",
        "status": "firing",
        "orgId": 1,
        "alerts": [{**a, "values": {"A": 1}, "silenceURL": "http://grafana/silence", "dashboardURL": ""} for a in alerts],
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://grafana/",
        "version": "1",
        "groupKey": "{}",
        "truncatedAlerts": 0,
        "title": "[FIRING:1] GPUXid",
        "state": "alerting",
        "message": "XID 79",
    }


async def test_grafanas_payload_is_taken_as_alertmanagers(cluster: HealthCluster) -> None:
    seed(cluster.api, node(), uuid_slice(2), policy())
    await cluster.start()
    assert await cluster.post(grafana(alert("GPU-node-a-1"))) == (200, {"alerts": {"firing": 1}})
    rules = cluster.api.list("devicetaintrules", group="resource.dra-extender.io")
    assert [r["spec"]["deviceSelector"]["device"] for r in rules] == ["gpu-1"]


async def test_deliveries_are_idempotent_by_fingerprint(cluster: HealthCluster) -> None:
    seed(cluster.api, node(), uuid_slice(2), policy())
    await cluster.start()
    assert await cluster.post(GOOD) == (200, {"alerts": {"firing": 1}})
    writes = len(cluster.recorder.writes)
    for _ in range(3):  # repeat_interval, and retries
        assert await cluster.post(GOOD) == (200, {"alerts": {"repeat": 1}})
    assert len(cluster.recorder.writes) == writes


async def test_an_api_server_that_refuses_writes_gets_a_503_and_the_retry_succeeds(cluster: HealthCluster) -> None:
    seed(cluster.api, node(), uuid_slice(2), policy())
    await cluster.start()
    cluster.api.set_faults(error_rate=1.0, error_status=500, verbs=("create",), paths=("devicetaintrules",))
    status, answer = await cluster.post(GOOD)
    assert status == 503 and "API server write failed" in answer["error"]
    cluster.api.clear_faults()
    assert await cluster.post(GOOD) == (200, {"alerts": {"repeat": 1}})
    assert len(cluster.api.list("devicetaintrules", group="resource.dra-extender.io")) == 1


async def test_a_follower_answers_503_so_that_alertmanager_retries(cluster: HealthCluster) -> None:
    seed(cluster.api, node(), uuid_slice(2), policy())
    await cluster.start()
    cluster.leading = False
    assert await cluster.post(GOOD) == (503, {"error": "not the leader: retry"})
