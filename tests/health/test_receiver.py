"""The webhook receiver: every bad input with its status code and message; Alertmanager's and Grafana's payloads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from controllers.health.receiver import Receiver
from kubesim.fakeapi.server import RequestInfo
from kubesim.objects import node
from serving.http_thread import Limits
from tests.eviction.harness import seed
from tests.health.harness import TOKEN, HealthCluster, alert, asgi_post, delivery, policy, uuid_slice

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
    seed(cluster.api, node("node-a"), uuid_slice(1), policy())
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
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    assert await cluster.post(grafana(alert("GPU-node-a-1"))) == (200, {"alerts": {"firing": 1}})
    rules = cluster.api.list("devicetaintrules", group="resource.dra-extender.io")
    assert [r["spec"]["deviceSelector"]["device"] for r in rules] == ["gpu-1"]


async def test_deliveries_are_idempotent_by_fingerprint(cluster: HealthCluster) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    assert await cluster.post(GOOD) == (200, {"alerts": {"firing": 1}})
    writes = len(cluster.recorder.writes)
    for _ in range(3):  # repeat_interval, and retries
        assert await cluster.post(GOOD) == (200, {"alerts": {"repeat": 1}})
    assert len(cluster.recorder.writes) == writes


def rules_in(cluster: HealthCluster) -> list[str]:
    return sorted(r["spec"]["deviceSelector"]["device"] for r in cluster.api.list("devicetaintrules", group="resource.dra-extender.io"))


async def test_an_api_server_that_refuses_writes_gets_503s_until_the_writes_succeed_then_the_queue_drains(cluster: HealthCluster) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    cluster.api.set_faults(error_rate=1.0, error_status=500, verbs=("create", "patch", "update", "delete"))  # no write gets through
    # Accepted into memory at once; the loop's write then fails.
    assert await cluster.post(GOOD) == (200, {"alerts": {"firing": 1}})
    assert rules_in(cluster) == []
    second = delivery(alert("GPU-node-a-1"))
    for _ in range(2):  # while the failure lasts, every delivery is refused (and not applied), so Alertmanager retries
        status, answer = await cluster.post(second)
        assert status == 503 and "API server write failed" in answer["error"], answer
        await cluster.advance(1.0)  # the loop retries the write, still refused
    cluster.api.clear_faults()
    await cluster.advance(4.0)  # the retry (with backoff) gets through: the queue drains
    assert rules_in(cluster) == ["gpu-0"]
    assert await cluster.post(second) == (200, {"alerts": {"firing": 1}})  # Alertmanager's retry
    assert rules_in(cluster) == ["gpu-0", "gpu-1"]


@pytest.mark.slow  # a thousand rules written through the fake API server
async def test_a_thousand_new_alerts_are_answered_before_their_rules_are_written_then_all_are_written(cluster: HealthCluster) -> None:
    nodes = [f"node-{i}" for i in range(10)]
    seed(cluster.api, *(node(n) for n in nodes), *(uuid_slice(100, node_name=n) for n in nodes), policy())
    await cluster.start()
    gate = asyncio.Event()
    held = 0

    async def hold_creates(info: RequestInfo) -> None:
        nonlocal held
        if info.verb == "create" and info.resource == "devicetaintrules":
            held += 1
            await gate.wait()  # the API server answers no create until the test says so

    cluster.api.add_reactor(hold_creates)
    alerts = [alert(f"GPU-{n}-{g}", node=n) for n in nodes for g in range(100)]
    assert cluster.receiver is not None
    data = orjson.dumps(delivery(*alerts))
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {TOKEN}".encode())]
    # Answered while no create has been answered (a receiver that waited for its writes would never be).
    status, answer = await asyncio.wait_for(asgi_post(cluster.receiver.app, "/alerts", headers, data), 30)
    assert (status, answer) == (200, {"alerts": {"firing": 1000}})
    assert rules_in(cluster) == []  # answered with none written
    for _ in range(1000):
        if held:
            break
        await asyncio.sleep(0.01)
    assert held and rules_in(cluster) == []  # the writes are under way, held at the API server
    gate.set()
    await cluster.settle(timeout=300)
    assert len(rules_in(cluster)) == 1000


async def test_a_follower_answers_503_so_that_alertmanager_retries(cluster: HealthCluster) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    cluster.leading = False
    assert await cluster.post(GOOD) == (503, {"error": "not the leader: retry"})


# ---------------------------------------------------------------------- the token file (issue 39 row 7)


def _replace_by_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


# name -> what happens to the token file while the receiver runs
TOKEN_FILE_MISHAPS: dict[str, Callable[[Path], object]] = {
    "emptied (a rewrite in place, half done)": lambda p: p.write_text(""),
    "a Secret with an empty token": lambda p: p.write_text("\n"),
    "unreadable (a directory in its place)": _replace_by_directory,
    "missing": lambda p: p.unlink(),
}


def _lines(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    """The log lines with this message, each as its record's fields (the structured extras included)."""
    return [vars(r) for r in caplog.records if r.getMessage() == message]


@pytest.mark.parametrize("case", TOKEN_FILE_MISHAPS)
async def test_an_unusable_token_file_keeps_the_last_good_token(case: str, cluster: HealthCluster, caplog) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    assert await cluster.post(GOOD) == (200, {"alerts": {"firing": 1}})
    TOKEN_FILE_MISHAPS[case](cluster.token_file)
    caplog.set_level(logging.WARNING, "dra_extender.health")
    for _ in range(3):
        assert await cluster.post(GOOD) == (200, {"alerts": {"repeat": 1}}), case
        assert (await cluster.post(GOOD, token="nope"))[0] == 401, case
    warnings = _lines(caplog, "alerts token file unusable; keeping the last good token")
    assert len(warnings) == 1 and warnings[0]["path"] == str(cluster.token_file), case
    cluster.clock.advance(60.0)
    assert (await cluster.post(GOOD))[0] == 200
    warnings = _lines(caplog, "alerts token file unusable; keeping the last good token")
    assert [w["count"] for w in warnings] == [1, 6], case  # the six reads since the first line
    if cluster.token_file.is_dir():
        cluster.token_file.rmdir()
    cluster.token_file.write_text("n3w-token\n")  # the Secret rewritten: the new token, and only it
    assert (await cluster.post(GOOD, token="n3w-token"))[0] == 200
    assert (await cluster.post(GOOD))[0] == 401


async def test_with_no_good_token_ever_every_delivery_is_refused_with_503_and_the_reason(cluster: HealthCluster, caplog) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    assert cluster.health is not None
    cluster.token_file.write_text("")  # emptied between serve's startup check and the receiver's start
    receiver = Receiver(cluster.health, cluster.token_file, Limits(max_body_bytes=1024 * 1024))
    caplog.set_level(logging.WARNING, "dra_extender.health")
    for token in (TOKEN, "", None):
        status, answer = await cluster.post(GOOD, token=token, to=receiver)
        assert status == 503, (token, answer)
        assert f"--alerts-token-file {cluster.token_file}: the file is empty" in answer["error"], answer
    [line] = _lines(caplog, "alert deliveries refused")
    assert line["status"] == 503 and "the file is empty" in line["detail"]
    assert rules_in(cluster) == []
    cluster.token_file.write_text(TOKEN)
    assert await cluster.post(GOOD, to=receiver) == (200, {"alerts": {"firing": 1}})


# ---------------------------------------------------------------------- refused deliveries are logged (issue 39 row 8)


@dataclass(frozen=True)
class Refusal:
    name: str
    status: int
    cause: str
    token: str | None = TOKEN
    body: Any = None
    raw: bytes | None = None
    leading: bool = True


REFUSALS = [
    Refusal("wrong token", 401, "401 wrong bearer token", token="nope", body=GOOD),
    Refusal("no token", 401, "401 missing bearer token", token=None, body=GOOD),
    Refusal("bad payload", 400, "400 bad payload", body=without(GOOD, "version")),
    Refusal("body over the limit", 413, "413 body refused", raw=b" " * (10 * 1024 * 1024 + 1)),
    Refusal("a follower", 503, "503 not the leader", body=GOOD, leading=False),
]


@pytest.mark.parametrize("row", REFUSALS, ids=[r.name for r in REFUSALS])
async def test_refused_deliveries_are_logged_once_per_cause_per_minute_with_a_count(
    row: Refusal, cluster: HealthCluster, caplog: pytest.LogCaptureFixture
) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(2), policy())
    await cluster.start()
    cluster.leading = row.leading
    caplog.set_level(logging.WARNING, "dra_extender.health")

    async def refused(times: int) -> None:
        for _ in range(times):
            status, _ = await cluster.post(row.body, token=row.token, raw=row.raw)
            assert status == row.status, row.name

    await refused(5)
    cluster.clock.advance(30.0)
    await refused(2)
    lines = _lines(caplog, "alert deliveries refused")
    assert [(r["cause"], r["status"], r["count"]) for r in lines] == [(row.cause, row.status, 1)]
    cluster.clock.advance(30.0)  # a minute since the first line
    await refused(1)
    lines = _lines(caplog, "alert deliveries refused")
    assert [(r["cause"], r["count"]) for r in lines] == [(row.cause, 1), (row.cause, 7)]  # the 7 since the first line
    assert lines[1]["since_s"] == 60.0
