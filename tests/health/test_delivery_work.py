"""A delivery's work grows linearly in its alerts and is cut in slices the event loop turns between (issue 39, row 4).

Counted, not timed: the signal and occurrence entries copied into device
states while one delivery is applied (each new state copies its signals and
occurrences), and the turns the event loop takes meanwhile (each a chance
for /filter to answer). A delivery four times larger may copy at most about
four times as much (a state copied once per slice of alerts), and must
give the loop a turn every ALERTS_PER_SLICE alerts. Before, one device named by N alerts copied N²/2 entries, in one
turn of the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from controllers.health import ladder
from controllers.health.delivery import ALERTS_PER_SLICE as SLICE
from controllers.health.ladder import DeviceState
from kubesim.objects import node
from tests.eviction.harness import seed
from tests.health.harness import TOKEN, HealthCluster, alert, asgi_post, delivery, policy, uuid_slice, xid_rule

NODES = 2  # 8 GPUs each


def one_device(n: int, round_: int) -> list[dict[str, Any]]:
    return [alert(f"GPU-node-{round_:04d}-0", node=f"node-{round_:04d}", fingerprint=f"{round_}-{i:016x}") for i in range(n)]


def eight_devices(n: int, round_: int) -> list[dict[str, Any]]:
    """A whole node failing: n fingerprints over its 8 GPUs (8 rules to write, so the test stays quick)."""
    name = f"node-{round_:04d}"
    return [alert(f"GPU-{name}-{i % 8}", node=name, fingerprint=f"{round_}-{i:016x}") for i in range(n)]


def fire_and_resolve(n: int, round_: int) -> list[dict[str, Any]]:
    firing = one_device(n // 2, round_)
    return firing + [{**a, "status": "resolved"} for a in firing]


@dataclass(frozen=True)
class Row:
    id: str
    alerts: Callable[[int, int], list[dict[str, Any]]]
    n: int


ROWS = [
    Row("one-device-named-by-n-fingerprints", one_device, 2000),
    Row("n-fingerprints-over-the-8-devices-of-a-node", eight_devices, 2000),
    Row("n-fingerprints-fire-and-resolve-in-one-delivery", fire_and_resolve, 2000),
]


async def measured(cluster: HealthCluster, alerts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    """(HTTP status, entries copied into device states, event-loop turns) of one delivery through the receiver."""
    copied = 0
    real = ladder.replace

    def counting(obj: Any, /, **changes: Any) -> Any:
        nonlocal copied
        out = real(obj, **changes)
        if isinstance(out, DeviceState):
            copied += len(out.active) + len(out.occurrences)
        return out

    monkeypatch.setattr(ladder, "replace", counting)
    turns = 0
    stop = False

    async def ticker() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    data = orjson.dumps(delivery(*alerts))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        (b"authorization", f"Bearer {TOKEN}".encode()),
    ]
    assert cluster.health is not None and cluster.receiver is not None
    async with cluster.health.lock:  # the loop's passes wait: only the delivery's own work is counted
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = turns
        status, _ = await asgi_post(cluster.receiver.app, "/alerts", headers, data)
        stop = True
        await task
    monkeypatch.setattr(ladder, "replace", real)
    await cluster.settle()
    return status, copied, turns - start


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
async def test_a_delivery_four_times_larger_does_about_four_times_the_work_in_slices(
    cluster: HealthCluster, row: Row, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(cluster.api, *(o for n in range(NODES) for o in (node(f"node-{n:04d}"), uuid_slice(8, node_name=f"node-{n:04d}"))))
    seed(cluster.api, policy("gpu-health", xid_rule()))
    await cluster.start()
    small = row.alerts(row.n, 0)
    large = row.alerts(4 * row.n, 1)
    status, small_work, _ = await measured(cluster, small, monkeypatch)
    assert status == 200
    status, large_work, turns = await measured(cluster, large, monkeypatch)
    assert status == 200
    state = ladder.ACTIVE_KEPT + ladder.OCCURRENCES_KEPT  # the most one state holds
    assert large_work <= 4.4 * small_work + 4 * state, (small_work, large_work)  # linear (the first slices' states are smaller)
    assert large_work <= len(large) * (state / SLICE + 4), (small_work, large_work)  # at most one state's copy per slice
    assert turns >= (len(large) - 1) // SLICE, f"{len(large)} alerts applied in {turns} turns of the event loop"
