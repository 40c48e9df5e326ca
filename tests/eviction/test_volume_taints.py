"""NoUse volume taints through the eviction controller, on a fake clock against the fake API server."""

from __future__ import annotations

import json
from typing import Any

from allocator.pod_volumes import TOLERATIONS_ANNOTATION
from kubesim import objects
from kubesim.objects import node
from tests.eviction.harness import T0, Cluster, seed
from tracker.clock import format_time, parse_time
from tracker.volumes import TAINTS_ANNOTATION

MIGRATING = {"key": "example.com/migrating", "effect": "NoUse"}


def pv(taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pv-1"}
    if taints is not None:
        meta["annotations"] = {TAINTS_ANNOTATION: json.dumps(taints)}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": {"capacity": {"storage": "1Gi"}}}


def pvc() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"volumeName": "pv-1"},
    }


def pod(
    name: str, tolerations: list[dict[str, Any]] | None = None, *, node_name: str = "node-a", ephemeral: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": f"uid-{name}"}
    if tolerations is not None:
        meta["annotations"] = {TOLERATIONS_ANNOTATION: json.dumps(tolerations)}
    volume: dict[str, Any] = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    if ephemeral:  # a generic ephemeral volume: its PVC is <pod>-<volume>
        volume = {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    return objects.pod(name, node_name=node_name, meta=meta, phase="Running" if node_name else "Pending", volumes=[volume])


def no_use(seconds: int | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse"}
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


async def test_no_use_evicts_at_once_after_toleration_seconds_or_never_and_stamps_time_added(cluster: Cluster) -> None:
    api = cluster.api
    seed(
        api,
        node("node-a"),
        pv(),
        pvc(),
        pod("victim"),
        pod("patient", [no_use(60)]),
        pod("mover", [no_use()]),
        pod("pending", node_name=""),
    )
    await cluster.start()
    api.update(
        {
            **pv([MIGRATING]),
            "metadata": {
                **api.get("persistentvolumes", None, "pv-1")["metadata"],
                "annotations": {TAINTS_ANNOTATION: json.dumps([MIGRATING])},
            },
        }
    )
    await cluster.run_until(lambda: len(cluster.recorder.deleted()) == 2, within=200)
    stamped = json.loads(api.get("persistentvolumes", None, "pv-1")["metadata"]["annotations"][TAINTS_ANNOTATION])
    added = parse_time(stamped[0]["timeAdded"])
    assert added is not None and stamped == [{**MIGRATING, "timeAdded": format_time(added)}]
    at = {w.name: w.at - added for w in cluster.recorder.deletions()}
    assert at["victim"] < 1 and at["patient"] == 60.0
    assert cluster.recorder.for_pod("victim") == ["event:Marking for deletion", "condition:DeletionByVolumeTaintManager", "delete"]
    reasons = {w.body["reason"] for w in cluster.recorder.events() if w.name == "victim"}
    assert reasons == {"VolumeTaintManagerEviction"}
    assert api.get("pods", "default", "mover") is not None and api.get("pods", "default", "pending") is not None


async def test_removing_the_taint_before_the_deadline_cancels(cluster: Cluster) -> None:
    api = cluster.api
    seed(api, node("node-a"), pv([{**MIGRATING, "timeAdded": format_time(T0)}]), pvc(), pod("patient", [no_use(60)]))
    await cluster.start()
    await cluster.advance(30)
    assert "default/patient" in cluster.controller.plan
    current = api.get("persistentvolumes", None, "pv-1")
    api.update({**current, "metadata": {**current["metadata"], "annotations": {}}})
    await cluster.advance(120)
    assert cluster.recorder.deleted() == []
    assert [w.name for w in cluster.recorder.events("Cancelling deletion")] == ["patient"]


async def test_evict_mode_and_generic_ephemeral_volumes(cluster: Cluster) -> None:
    api = cluster.api
    ephemeral_pvc = {**pvc(), "metadata": {"name": "eph-data", "namespace": "default"}}
    seed(api, node("node-a"), pv([{**MIGRATING, "timeAdded": format_time(T0)}]), ephemeral_pvc, pod("eph", ephemeral=True))
    await cluster.start(mode="evict")
    await cluster.run_until(lambda: "evict" in cluster.recorder.for_pod("eph"), within=10)
    assert cluster.recorder.for_pod("eph")[0] == "event:Marking for eviction"
