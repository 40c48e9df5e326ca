"""Counters as allocated survive an extender restart (row 1 of issue 39).

A 40Gi counter; pod A binds `part-a` (20Gi); the extender stops; the driver
republishes the pool with `part-a` lowered (to 0 or 1Gi: same generation, a
new generation, or new slices beside the old ones); a new extender (its state
built from the fake API server) starts; pod B asks for `full` (40Gi; or
`part-c`, 30Gi, where part-a now says 1Gi). Before records, B was bound
(60Gi or 50Gi of 40Gi promised). Now the claim's record
(written with A's allocation) keeps part-a charged 20Gi: B fits nowhere, and
the lowered slice is reported on A's claim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from allocator.counter_record import COUNTERS_ANNOTATION
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import claim, node
from tests.extender.api_cluster import DRIVER, ApiCluster, gpu_class, pod_with_claim, until
from tracker.state import COUNTERS_LOWERED, Problem

GROUP = "resource.k8s.io"
NODE = "cnt-a"
SIZES = {"full": "40Gi", "part-a": "20Gi", "part-c": "30Gi"}


def pool_slices(generation: int, part_a: str = "20Gi", suffix: str = "") -> list[dict[str, Any]]:
    """The pool: a counters slice and a devices slice, `part-a` consuming `part_a`."""
    pool = {"name": NODE, "generation": generation, "resourceSliceCount": 2}
    sizes = {**SIZES, "part-a": part_a}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-counters{suffix}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-devices{suffix}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": pool,
                "devices": [
                    {
                        "name": name,
                        "attributes": {"id": {"string": name}},
                        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}],
                    }
                    for name, size in sizes.items()
                ],
            },
        },
    ]


def device_claim(name: str, device: str) -> dict[str, Any]:
    return claim(name, exactly={"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].id == "{device}"'}}]})


def same_generation(api: FakeApiServer, part_a: str) -> None:
    for s in pool_slices(1, part_a):
        current = api.get("resourceslices", None, s["metadata"]["name"], group=GROUP)
        assert current is not None
        api.update({**s, "metadata": current["metadata"]})


def new_generation(api: FakeApiServer, part_a: str) -> None:
    for s in pool_slices(2, part_a):
        current = api.get("resourceslices", None, s["metadata"]["name"], group=GROUP)
        assert current is not None
        api.update({**s, "metadata": current["metadata"]})


def beside_the_old(api: FakeApiServer, part_a: str) -> None:
    for s in pool_slices(2, part_a, suffix="-v2"):  # the old generation's slices stay (a driver mid-way through its update)
        api.create(s)


@dataclass(frozen=True)
class Row:
    name: str
    republish: Callable[[FakeApiServer, str], None]
    part_a: str
    b_wants: str  # the device B asks for: what fits the counter only if part-a is charged what the slice says now


ROWS = [
    Row("same generation, lowered to 0", same_generation, "0", "full"),
    Row("same generation, lowered to 1Gi", same_generation, "1Gi", "part-c"),
    Row("new generation, lowered to 0", new_generation, "0", "full"),
    Row("new generation, lowered to 1Gi", new_generation, "1Gi", "part-c"),
    Row("new slices beside the old, lowered to 0", beside_the_old, "0", "full"),
    Row("new slices beside the old, lowered to 1Gi", beside_the_old, "1Gi", "part-c"),
]


class Reported:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def __call__(self, problem: Problem) -> None:
        self.problems.append(problem)

    def reasons(self, claim_key: str) -> list[str]:
        return [p.reason for p in self.problems if p.name == claim_key]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class())
        api.create(node(NODE, hostname=True))
        for s in pool_slices(1):
            api.create(s)
        c = ApiCluster(api, tmp_path)
        yield c
        await c.stop()


async def _slices_caught_up(c: ApiCluster) -> None:
    want = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in c.api.list("ResourceSlice")}
    await until(lambda: c.state.versions.get(("ResourceSlice", GROUP), {}) == want, "the slices")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_a_lowered_partition_stays_charged_across_a_restart(cluster: ApiCluster, row: Row) -> None:
    api = cluster.api
    api.create(device_claim("a", "part-a"))
    api.create(device_claim("b", row.b_wants))
    pod_a = api.create(pod_with_claim("a", "a"))
    pod_b = api.create(pod_with_claim("b", "b"))
    await cluster.start()
    await cluster.caught_up()
    assert await cluster.bind(pod_a, NODE) == ""
    held = api.get("resourceclaims", "default", "a", group=GROUP)
    assert held is not None and COUNTERS_ANNOTATION in held["metadata"]["annotations"]

    await cluster.stop()  # the extender stops; the driver republishes meanwhile
    row.republish(api, row.part_a)
    reported = Reported()
    await cluster.start(on_problem=reported)  # a new process: its state read from the API server
    await cluster.caught_up()
    await _slices_caught_up(cluster)

    passed, failed = await cluster.filter(pod_b, [NODE])
    wants = SIZES[row.b_wants]
    assert passed == [], f"{row.name}: B's {row.b_wants} ({wants}) beside A's part-a (20Gi as allocated) promises more than 40Gi"
    assert f"memory: 20Gi left, {wants} needed" in failed[NODE], failed
    assert await cluster.bind(pod_b, NODE) != ""
    b = api.get("resourceclaims", "default", "b", group=GROUP)
    assert b is not None and not (b.get("status") or {}).get("allocation"), row.name
    assert reported.reasons("default/a") == [COUNTERS_LOWERED], reported.problems
