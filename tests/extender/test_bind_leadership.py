"""/bind and leadership in-process: leadership is re-checked under the bind lock."""

from __future__ import annotations

import asyncio

from extender.wire import BindingArgs
from tests.e2e.harness import DEMO_UIDS


async def test_bind_queued_behind_the_lock_when_leadership_ends_does_not_allocate(demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    async with svc.binder.lock:
        # The request passed the entry check and waits for the lock (another bind is writing)...
        waiting = asyncio.create_task(svc.bind(args))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        # ...when this process stops leading (a hand-over noticed at the next Lease poll).
        demo.leading = False
    refusal = await waiting
    assert refusal is not None and refusal.message == "not leader"
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
    assert not svc.state.inflight


async def test_bind_while_leading_allocates(demo_service) -> None:
    demo = await demo_service()
    svc = demo.service
    args = BindingArgs("trainer", "default", DEMO_UIDS["trainer"], "node-a")
    assert await svc.bind(args) is None
    claim = await demo.source.get("ResourceClaim", "default", "gpu-claim")
    assert claim is not None
    assert claim["status"]["allocation"]["devices"]["results"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": DEMO_UIDS["trainer"]}]
