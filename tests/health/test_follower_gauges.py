"""A replica that stops leading drops the health gauges of its leadership: the new leader's are the fleet's.

DraExtenderHealthGuardTripped (docs/runbook.md) reads the waiting devices with `max` over the controllers'
replicas; a former leader still reporting its last figures would keep it firing after the devices cleared.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kubesim.objects import node
from tests.eviction.harness import claim_and_pod, seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule

pytestmark = pytest.mark.slow  # five fake minutes of ladder, in process


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    series: str  # the sample while leading


ROWS = (
    Row("guard's waiting devices", 'dra_extender_health_guard_waiting_devices{policy="gpu-health",rule="xid-79"} 1.0'),
    Row("devices at NoExecute", 'dra_extender_health_devices{effect="NoExecute",policy="gpu-health",rule="xid-79"} 2.0'),
    Row("devices at NoSchedule", 'dra_extender_health_devices{effect="NoSchedule",policy="gpu-health",rule="xid-79"} 1.0'),
)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_a_former_leader_reports_no_health_gauges(cluster: HealthCluster, row: Row) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(8), *(o for i in range(8) for o in claim_and_pod(f"job-{i}", i)))
    seed(cluster.api, policy("gpu-health", xid_rule(guard={"maxNoExecute": 2})))
    await cluster.start()
    await cluster.post(delivery(*(alert(f"GPU-node-a-{i}") for i in (5, 6, 7))))
    await cluster.advance(301)
    assert row.series in cluster.metrics.render().decode()
    cluster.leading = False
    await cluster.advance(30)
    name = row.series.split("{", 1)[0]
    left = [line for line in cluster.metrics.render().decode().splitlines() if line.startswith(name + "{")]
    assert left == [], left
