"""The fake API server's journal (--journal): every request as it arrived, with its User-Agent, and a write's body and content type.

bench/bench_isolation.py replays the controllers' writes from it, so what it
records must be what the client sent: checked with the production client
(kubernetes-asyncio, naming itself as the controllers command does) over HTTP.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kubernetes_asyncio import client, config

from kubesim.fakeapi import FakeApiServer
from kubesim.fakeapi.journal import Journal, read
from kubesim.objects import pod
from kubesim.processes import start_fake_api, stop_process
from tracker.apiserver.requests import MERGE_PATCH

AGENT = "dra-extender-controllers/0.0.0"


@dataclass(frozen=True, slots=True)
class Row:
    """A call made with the client and the one journal entry it must leave (`body`: None for a read)."""

    name: str
    call: Callable[[client.CoreV1Api], Awaitable[Any]]
    method: str
    verb: str
    resource: str
    path: str
    content_type: str | None
    body: dict[str, Any] | None


def _uid_precondition(uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


ROWS = [
    Row(
        "create",
        lambda core: core.create_namespaced_pod("default", pod("p")),
        "POST",
        "create",
        "pods",
        "/api/v1/namespaces/default/pods",
        "application/json",
        pod("p"),
    ),
    Row(
        "merge-patch of a subresource",
        lambda core: core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}}, _content_type=MERGE_PATCH),
        "PATCH",
        "patch",
        "pods/status",
        "/api/v1/namespaces/default/pods/p/status",
        MERGE_PATCH,
        {"status": {"phase": "Running"}},
    ),
    Row(
        "get", lambda core: core.read_namespaced_pod("p", "default"), "GET", "get", "pods", "/api/v1/namespaces/default/pods/p", None, None
    ),
    Row("list", lambda core: core.list_namespaced_pod("default"), "GET", "list", "pods", "/api/v1/namespaces/default/pods", None, None),
    Row(
        "delete with a UID precondition",
        lambda core: core.delete_namespaced_pod("p", "default", body=_uid_precondition("not-its-uid")),
        "DELETE",
        "delete",
        "pods",
        "/api/v1/namespaces/default/pods/p",
        "application/json",
        _uid_precondition("not-its-uid"),
    ),
]


async def test_every_request_recorded_as_sent(tmp_path: Path) -> None:
    journal = Journal()
    async with FakeApiServer() as api:
        api.add_reactor(journal)
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=cfg)
        async with client.ApiClient(cfg) as c:
            c.user_agent = AGENT
            core = client.CoreV1Api(c)
            for row in ROWS:
                try:
                    await row.call(core)
                except client.exceptions.ApiException as e:
                    assert row.name == "delete with a UID precondition" and e.status == 409, (row.name, e.status)
    assert len(journal.entries) == len(ROWS)
    times = [e["at"] for e in journal.entries]
    assert times == sorted(times)
    for row, entry in zip(ROWS, journal.entries, strict=True):
        got = {k: entry.get(k) for k in ("method", "verb", "resource", "path", "user_agent", "content_type", "body")}
        want = {
            "method": row.method,
            "verb": row.verb,
            "resource": row.resource,
            "path": row.path,
            "user_agent": AGENT,
            "content_type": row.content_type,
            "body": row.body,
        }
        if row.body is not None and row.name == "create":
            got["body"] = {k: v for k, v in (entry["body"] or {}).items() if k in row.body}  # the client adds empty fields
            got["body"]["metadata"] = {k: v for k, v in got["body"]["metadata"].items() if k in row.body["metadata"]}
        assert got == want, row.name


def test_the_process_writes_its_journal_when_it_stops(tmp_path: Path) -> None:
    """`python -m kubesim.fakeapi --journal PATH`: the file is written on SIGTERM, the write's body in it."""
    path = tmp_path / "journal.jsonl"
    proc, url, _ = start_fake_api(tmp_path, "--journal", str(path))
    try:
        with httpx.Client(base_url=url, headers={"User-Agent": AGENT}) as http:
            http.post("/api/v1/namespaces/default/pods", json=pod("q")).raise_for_status()
        assert not path.exists()  # nothing written while it serves
        proc.send_signal(signal.SIGTERM)
    finally:
        stop_process(proc)
    (entry,) = read(path)
    assert (entry["method"], entry["user_agent"], entry["body"]["metadata"]["name"]) == ("POST", AGENT, "q")
