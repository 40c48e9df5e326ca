"""The writes' own HTTP/1.1 connections (tracker/apiserver/writer.py) against the fake API server and a TLS server.

Every write answers what the same write answered through aiohttp (status and
body, with the server-made fields set aside), carries the client's bearer
token, reuses one kept-alive connection, survives a connection the server
closed, gives up within its timeout, and works over TLS with the
configuration's CA; a path that needs quoting goes through aiohttp.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web

from kubesim.fakeapi import FakeApiServer, Faults
from tests.extender.api_cluster import Held
from tracker.apiserver.requests import MERGE_PATCH
from tracker.apiserver.source import ApiSource
from tracker.apiserver.writer import KEEPALIVE_SECONDS, Writer
from tracker.source import Conflict, Invalid, NotFound, SourceError

NS = "default"
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": NS},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
SERVER_MADE = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def _comparable(status: int, body: bytes) -> tuple[int, Any]:
    """The answer without what the server makes anew per object (uids, versions, timestamps)."""
    data = orjson.loads(body) if body else None
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
        data["metadata"] = {k: v for k, v in data["metadata"].items() if k not in SERVER_MADE}
    return status, data


Write = Callable[[ApiSource], Awaitable[tuple[int, bytes]]]

# (name, the write as ApiSource.send, expected status)
ROWS: list[tuple[str, Write, int]] = [
    (
        "create a claim",
        lambda s: s.send(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", {**CLAIM, "metadata": {"name": "d", "namespace": NS}}
        ),
        201,
    ),
    (
        "patch a claim (merge patch)",
        lambda s: s.send(
            "PATCH",
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c",
            {"metadata": {"labels": {"a": "b"}}},
            content_type=MERGE_PATCH,
        ),
        200,
    ),
    (
        "patch a claim's status at an old resourceVersion (409)",
        lambda s: s.send(
            "PATCH",
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c/status",
            {"metadata": {"resourceVersion": "1"}, "status": {"reservedFor": []}},
            content_type=MERGE_PATCH,
        ),
        409,
    ),
    (
        "patch a claim that does not exist (404)",
        lambda s: s.send(
            "PATCH",
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/none",
            {"metadata": {}},
            content_type=MERGE_PATCH,
        ),
        404,
    ),
    (
        "create an invalid claim (422)",
        lambda s: s.send("POST", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", {**CLAIM, "metadata": {"name": "Not_A_Name"}}),
        422,
    ),
    (
        "bind a pod",
        lambda s: s.send(
            "POST",
            f"/api/v1/namespaces/{NS}/pods/p/binding",
            {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": NS}, "target": {"kind": "Node", "name": "n1"}},
        ),
        201,
    ),
    ("delete a claim", lambda s: s.send("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c", {}), 200),
]


async def _answer(tmp_path: Path, write: Write, *, own_connections: bool) -> tuple[tuple[int, Any], int]:
    """The answer to `write` on a fresh server holding CLAIM and POD, and how many connections the writer opened."""
    async with FakeApiServer(token="secret") as api:
        api.create(CLAIM)
        api.create(POD)
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        await source.connect()
        writer = source._writer
        assert writer is not None, "no proxy configured: writes go on their own connections"
        if not own_connections:
            source._writer = None
        try:
            status, body = await write(source)
        finally:
            await source.close()
        return _comparable(status, body), writer.opened


@pytest.mark.parametrize(("write", "status"), [pytest.param(w, s, id=n) for n, w, s in ROWS])
async def test_a_write_answers_as_through_aiohttp(tmp_path: Path, write: Write, status: int) -> None:
    own, opened = await _answer(tmp_path, write, own_connections=True)
    through_aiohttp, _ = await _answer(tmp_path, write, own_connections=False)
    assert own[0] == status
    assert own == through_aiohttp
    assert opened == 1


async def _source(api: FakeApiServer, tmp_path: Path) -> ApiSource:
    api.create(CLAIM)
    source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    await source.connect()
    return source


async def test_one_kept_alive_connection_for_writes_in_a_row_and_the_errors_as_before(tmp_path: Path) -> None:
    async with FakeApiServer(token="secret") as api:
        source = await _source(api, tmp_path)
        try:
            for i in range(20):
                await source.patch_claim(NS, "c", {"metadata": {"labels": {"i": str(i)}}})
            with pytest.raises(NotFound):
                await source.patch_claim(NS, "none", {"metadata": {}})
            held = api.get("resourceclaims", NS, "c", group="resource.k8s.io")
            assert held is not None
            with pytest.raises(Conflict):
                await source.patch_claim(NS, "c", {"metadata": {"resourceVersion": "1"}, "status": {}}, status=True)
            with pytest.raises(Invalid):
                await source.create_claim(NS, {**CLAIM, "metadata": {"name": "Bad_Name"}})
            assert source._writer is not None
            assert source._writer.opened == 1
            assert held["metadata"]["labels"] == {"i": "19"}
        finally:
            await source.close()


async def test_concurrent_writes_each_on_a_connection_then_reused(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        try:
            api.faults = Faults(latency_ms=50, verbs=frozenset({"patch"}))
            await asyncio.gather(*(source.patch_claim(NS, "c", {"metadata": {"labels": {f"k{i}": "v"}}}) for i in range(5)))
            assert source._writer is not None
            assert source._writer.opened == 5
            api.faults = Faults()
            for i in range(10):
                await source.patch_claim(NS, "c", {"metadata": {"labels": {"again": str(i)}}})
            assert source._writer.opened == 5, "the idle connections are used again"
        finally:
            await source.close()


async def test_a_connection_the_server_closed_is_replaced(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        try:
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "1"}}})
            writer = source._writer
            assert writer is not None and len(writer._idle) == 1
            writer._idle[0][0].transport.close()  # type: ignore[union-attr]  # as if the server dropped the idle connection
            await asyncio.sleep(0.05)
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "2"}}})
            assert writer.opened == 2
            held = api.get("resourceclaims", NS, "c", group="resource.k8s.io")
            assert held is not None and held["metadata"]["labels"] == {"a": "2"}
        finally:
            await source.close()


async def test_a_connection_idle_longer_than_the_keepalive_is_not_used_again(tmp_path: Path) -> None:
    now = [1000.0]
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        try:
            writer = source._writer
            assert writer is not None
            writer.clock = lambda: now[0]
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "1"}}})
            now[0] += KEEPALIVE_SECONDS - 1
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "2"}}})
            assert writer.opened == 1, "idle for less than the keepalive: used again"
            now[0] += KEEPALIVE_SECONDS
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "3"}}})
            assert writer.opened == 2, "idle for longer: closed, a new one opened"
            assert len(writer._idle) == 1
        finally:
            await source.close()


async def test_a_write_answered_after_the_source_closed_leaves_no_connection_open(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        writer = source._writer
        assert writer is not None
        held = Held(lambda info: info.method == "PATCH")
        api.add_reactor(held)
        write = asyncio.create_task(source.patch_claim(NS, "c", {"metadata": {"labels": {"a": "1"}}}))
        await held.arrived.wait()
        await source.close()
        held.release()
        await write
        assert writer.closed and not writer._idle, "the connection is closed with its answer, not kept"


async def test_a_write_that_takes_too_long_times_out_and_its_connection_is_not_reused(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        source = await _source(api, tmp_path)
        try:
            api.faults = Faults(latency_ms=2000, verbs=frozenset({"patch"}), fail_next=0)
            with pytest.raises(TimeoutError):
                await source.send(
                    "PATCH",
                    f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c",
                    {"metadata": {}},
                    content_type=MERGE_PATCH,
                    timeout=0.2,
                )
            writer = source._writer
            assert writer is not None and not writer._idle
            api.faults = Faults()
            await source.patch_claim(NS, "c", {"metadata": {"labels": {"after": "timeout"}}})
            assert writer.opened == 2
        finally:
            await source.close()


async def test_a_wrong_token_is_refused_as_before(tmp_path: Path) -> None:
    async with FakeApiServer(token="secret") as api:
        api.create(CLAIM)
        path = api.write_kubeconfig(tmp_path / "kubeconfig")
        config = yaml.safe_load(path.read_text())
        config["users"][0]["user"]["token"] = "wrong"
        path.write_text(yaml.safe_dump(config))
        source = ApiSource(kubeconfig=str(path))
        await source.connect()
        try:
            with pytest.raises(SourceError) as e:
                await source.patch_claim(NS, "c", {"metadata": {}})
            assert e.value.status == 401
        finally:
            await source.close()


# (name, path, sent as it is)
PATHS = [
    ("a claim", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c-1.x", True),
    ("a status subresource", "/api/v1/namespaces/default/pods/p/status", True),
    ("a space", "/api/v1/namespaces/default/pods/a b", False),
    ("a query", "/api/v1/namespaces/default/pods?x=1", False),
    ("a percent sign", "/api/v1/namespaces/default/pods/a%20b", False),
    ("a line break", "/api/v1/pods\r\nX: y", False),
    ("non-ASCII", "/api/v1/namespaces/default/pods/é", False),
    ("not absolute", "api/v1/pods", False),
]


@pytest.mark.parametrize(("path", "plain"), [pytest.param(p, t, id=n) for n, p, t in PATHS])
def test_only_plain_paths_are_sent_as_they_are(path: str, plain: bool) -> None:
    assert Writer.takes(path) is plain


def test_a_header_with_a_line_break_is_refused() -> None:
    writer = Writer("http://127.0.0.1:1", tls=None)
    with pytest.raises(ValueError, match="line break"):
        writer.head("PATCH", "/x", {"Authorization": "Bearer a\r\nX-Injected: 1"}, 0)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test certificate")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key), "-out", str(cert)),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:TRUE"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_writes_over_tls_with_the_configured_ca(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    ca = cert
    seen: list[tuple[str, str, str | None, bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.method, request.path, request.headers.get("Authorization"), await request.read()))
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=serving)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp keeps the bound socket there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "tls", "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(ca)}}],
                "users": [{"name": "u", "user": {"token": "tok"}}],
                "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "u"}}],
                "current-context": "tls",
            }
        )
    )
    source = ApiSource(kubeconfig=str(kubeconfig))
    await source.connect()
    try:
        await source.bind_pod(NS, "p", "uid-1", "n1")
        await source.bind_pod(NS, "q", "uid-2", "n1")
        assert source._writer is not None and source._writer.opened == 1
    finally:
        await source.close()
        await runner.cleanup()
    assert [(m, p, a) for m, p, a, _ in seen] == [
        ("POST", f"/api/v1/namespaces/{NS}/pods/p/binding", "Bearer tok"),
        ("POST", f"/api/v1/namespaces/{NS}/pods/q/binding", "Bearer tok"),
    ]
    assert orjson.loads(seen[0][3])["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
