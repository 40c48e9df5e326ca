"""Every request names its program in User-Agent, so the API server records it as the field manager of its writes.

kubernetes-asyncio sends `OpenAPI-Generator/...` unless told otherwise; the
API server derives a write's default field manager from the User-Agent, so
managedFields and audit logs would name no program. Checked on the fake API
server's request log, for each way a request leaves the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from kubectl_dra.cli import build_parser, run
from kubesim.fakeapi import FakeApiServer
from tracker.apiserver.source import ApiSource

NS = "default"
VERSION = version("dra-extender")
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


async def _get(s: ApiSource) -> None:
    await s.request("GET", f"/api/v1/namespaces/{NS}/pods")


async def _watch(s: ApiSource) -> None:
    resp = await s.open_watch(f"/api/v1/namespaces/{NS}/pods", [("watch", "1"), ("timeoutSeconds", "1")], 5.0)
    resp.release()


async def _write(s: ApiSource) -> None:
    await s.send("POST", f"/api/v1/namespaces/{NS}/pods", {**POD, "metadata": {"name": "q", "namespace": NS}})


async def _write_through_aiohttp(s: ApiSource) -> None:
    s._writer = None  # as behind a proxy: the client's own session
    await _write(s)


# (name, program, what the client does)
ROWS: list[tuple[str, str, Callable[[ApiSource], Awaitable[None]]]] = [
    ("extender: a read", "dra-extender", _get),
    ("extender: a watch", "dra-extender", _watch),
    ("extender: a write on its own connections", "dra-extender", _write),
    ("extender: a write through aiohttp", "dra-extender", _write_through_aiohttp),
    ("kubectl dra: a read", "kubectl-dra", _get),
]


@pytest.mark.parametrize(("program", "act"), [pytest.param(p, a, id=n) for n, p, a in ROWS])
async def test_requests_carry_the_program(tmp_path: Path, program: str, act: Callable[[ApiSource], Awaitable[None]]) -> None:
    async with FakeApiServer() as api:
        api.create(POD)
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")), program=program)
        try:
            await source.connect()
            api.clear_requests()
            await act(source)
        finally:
            await source.close()
        agents = {r.user_agent for r in api.requests}
    assert agents == {f"{program}/{VERSION}"}


async def test_kubectl_dra_commands_carry_kubectl_dra(tmp_path: Path) -> None:
    """A whole command (`devices`: discovery and one list per kind) sends nothing as anything else."""
    async with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        out: list[Any] = []
        assert await run(build_parser().parse_args(["--kubeconfig", str(kubeconfig), "devices"]), out.append) == 0
        agents = {r.user_agent for r in api.requests}
    assert agents == {f"kubectl-dra/{VERSION}"}
