"""A restarted or crash-looping controller never evicts faster than the rule's rate (docs/eviction.md#rate-limit).

The buckets live in the process; what a new process reads back is the
rule's `timeAdded`, and a taint in effect before it began leading gets no
fresh burst. Checked on the deletions the fake API server saw, on the fake
clock: over every stretch of time, at most burst + rate x its length.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kubesim.objects import node
from tests.eviction.harness import Cluster, claim_and_pod, gpu_slice, rule, seed
from tracker.clock import format_time

RATE = 0.5
BURST = 10


def over_rate(times: list[float]) -> list[tuple[float, float, int]]:
    """The stretches (from, to, evictions) with more evictions than a token bucket of RATE and BURST allows."""
    times = sorted(times)
    return [
        (times[i], times[j], j - i + 1)
        for i in range(len(times))
        for j in range(i, len(times))
        if j - i + 1 > BURST + RATE * (times[j] - times[i]) + 1e-6
    ]


@dataclass(frozen=True)
class Row:
    name: str
    deleted_before_restart: int  # the process dies once this many are gone
    restarts: int = 1
    up_for: float = 0.0  # fake seconds each later process runs before it dies too (a crash loop)


ROWS = [
    Row("killed during the burst", 5),
    Row("killed just after the burst", 11),
    Row("killed while draining at the rate", 14),
    Row("crash loop: up 3 s, then dies again, five times", 11, restarts=5, up_for=3.0),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_a_restart_gives_no_fresh_burst(cluster: Cluster, row: Row) -> None:
    api, pods = cluster.api, 40
    seed(api, node("node-a"), gpu_slice(pods), *(o for i in range(pods) for o in claim_and_pod(f"p{i:03d}", i)))
    await cluster.start()
    api.create(rule("drain", timeAdded=format_time(cluster.clock.now()), evictionsPerSecond=RATE))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) >= row.deleted_before_restart, within=120)
    for n in range(row.restarts):
        await cluster.stop()
        cluster.clock.advance(1.0)  # a new process takes a moment to start, list and lead
        await cluster.start()
        if n < row.restarts - 1:
            await cluster.advance(row.up_for)
    await cluster.advance(20)
    times = [w.at for w in cluster.recorder.deletions()]
    assert len(times) > row.deleted_before_restart, "it goes on after the restart"
    assert over_rate(times) == []


async def test_a_rule_created_after_the_restart_still_gets_its_burst(cluster: Cluster) -> None:
    api = cluster.api
    seed(api, node("node-a"), gpu_slice(30), *(o for i in range(30) for o in claim_and_pod(f"p{i:03d}", i)))
    await cluster.start()
    await cluster.stop()
    cluster.clock.advance(5)  # no controller runs meanwhile
    await cluster.start()
    api.create(rule("fresh", timeAdded=format_time(cluster.clock.now()), evictionsPerSecond=RATE))
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) >= BURST, within=1)
    assert len({w.at for w in cluster.recorder.deletions()}) == 1, "the burst, at once"
