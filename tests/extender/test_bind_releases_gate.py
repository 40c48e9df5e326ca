"""Every way out of /bind tells the placement gate that the pod's bind is decided.

A /filter waits (up to --placement-wait) for the binds of pods placed before it;
a /bind that returns without releasing its pod would make later filters wait
for a bind that never comes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from extender.app import create_app
from extender.wire import BindingArgs
from tests.e2e.harness import DEMO_UIDS
from tests.extender.conftest import DemoService

UID = DEMO_UIDS["plain"]


def _not_leader(demo: DemoService) -> None:
    demo.lease.held = False


def _not_ready(demo: DemoService) -> None:
    demo.state._synced.clear()  # white-box: as before the initial lists complete


def _binder_raises(demo: DemoService) -> None:
    async def broken(args: BindingArgs) -> Any:
        raise RuntimeError("injected")

    demo.service.binder._pod = broken  # type: ignore[method-assign]


PATHS = [
    # name, how the demo is set up, the pod bound, /bind's error (a substring; "" = bound)
    ("bound", None, "plain", ""),
    ("not-leader", _not_leader, "plain", "not leader"),
    ("not-ready", _not_ready, "plain", "not ready"),
    ("pod-missing", None, "no-such-pod", "no-such-pod"),
    ("internal-error", _binder_raises, "plain", "internal error"),
]


@pytest.mark.parametrize(("name", "setup", "pod", "error"), PATHS, ids=[p[0] for p in PATHS])
async def test_every_bind_outcome_releases_the_gate(
    demo_service: Callable[..., Awaitable[DemoService]], name: str, setup: Any, pod: str, error: str
) -> None:
    demo = await demo_service()
    gate = demo.service.placements
    gate.expect_bind(UID)
    if setup is not None:
        setup(demo)
    transport = httpx.ASGITransport(app=create_app(demo.service))
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        r = await client.post("/bind", json={"PodName": pod, "PodNamespace": "default", "PodUID": UID, "Node": "node-a"})
    assert r.status_code == 200
    got = r.json().get("Error", "")
    assert (error in got) if error else got == "", got
    assert gate.pending() == 0, f"{name}: the gate still expects the bind"


async def test_unreadable_bind_with_a_pod_uid_releases_the_gate(demo_service: Callable[..., Awaitable[DemoService]]) -> None:
    demo = await demo_service()
    gate = demo.service.placements
    gate.expect_bind(UID)
    transport = httpx.ASGITransport(app=create_app(demo.service))
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        r = await client.post("/bind", json={"PodName": "plain", "PodUID": UID})  # no Node
    assert r.status_code == 400
    assert gate.pending() == 0
