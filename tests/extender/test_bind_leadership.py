"""/bind and leadership in-process: leadership is re-checked under the bind lock."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.metrics import Metrics
from extender.service import Service
from extender.wire import BindingArgs
from tests.e2e.harness import DEMO, DEMO_UIDS
from tracker.manifest_source import ManifestSource
from tracker.state import ClusterState


@pytest.fixture
async def service(tmp_path: Path):
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    cel = CelEnvironment()
    state = ClusterState(cel)
    source = ManifestSource(directory, watch=False)
    task = asyncio.create_task(source.run(state))
    for _ in range(200):
        if state.ready:
            break
        await asyncio.sleep(0.01)
    assert state.ready
    leader = {"now": True}
    yield Service(state, source, Allocator(cel), Metrics(), is_leader=lambda: leader["now"]), leader
    task.cancel()


async def test_bind_queued_behind_the_lock_when_leadership_ends_does_not_allocate(service) -> None:
    svc, leader = service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    async with svc.bind_lock:
        # The request passed the entry check and waits for the lock (another bind is writing)...
        waiting = asyncio.create_task(svc.bind(args))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        # ...when this process stops leading (a hand-over noticed at the next Lease poll).
        leader["now"] = False
    assert await waiting == "not leader"
    claim = svc.state.raw_claims["default/gpu-claim"]
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
    assert not svc.state.inflight


async def test_bind_while_leading_allocates(service) -> None:
    svc, leader = service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    assert await svc.bind(args) == ""
    claim = svc.state.raw_claims["default/gpu-claim"]
    assert claim["status"]["allocation"]["devices"]["results"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": DEMO_UIDS["trainer"]}]
