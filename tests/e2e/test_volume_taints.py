"""End to end: volume taints (PVC/PV annotations) in `--source` and cluster mode, over HTTP.

The same scenario runs against a manifest directory and against the fake API
server: a NoAttachOrMount taint on the PV keeps a non-tolerating pod off every
node while its populator is accepted, and removing the taint admits the pod; a
NoUse taint evicts the non-tolerating running pod after its tolerationSeconds
and leaves the tolerating one; a malformed annotation closes the volume and is
reported with an Event.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import FakeApi, cluster_extender, wait_for
from tests.e2e.harness import DEMO, Extender, filter_args

NODES = ["node-a", "node-b", "node-c"]
TAINTS = "resource.dra-extender.io/volume-taints"
TOLERATIONS = "resource.dra-extender.io/volume-tolerations"
NOT_READY = [{"key": "example.com/data-not-ready", "value": "true", "effect": "NoAttachOrMount"}]
SECOND = {"key": "example.com/second-look", "effect": "NoAttachOrMount"}
SECOND_TEXT = "example.com/second-look:NoAttachOrMount"
REASON = "volume claim default/dataset (pv pv-dataset): taint example.com/data-not-ready=true:NoAttachOrMount not tolerated"


def volume_pod(
    name: str, *, tolerations: list[dict[str, Any]] | None = None, node: str = "", raw_tolerations: str | None = None
) -> dict[str, Any]:
    annotations = {}
    if tolerations is not None:
        annotations[TOLERATIONS] = json.dumps(tolerations)
    if raw_tolerations is not None:
        annotations[TOLERATIONS] = raw_tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", **({"annotations": annotations} if annotations else {})},
        "spec": {
            "schedulerName": "dra-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}}],
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def volume_filter(pod: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's /filter body for a pod without resource claims that mounts a PVC."""
    body = filter_args(pod["metadata"]["name"], None, NODES, uid=pod["metadata"]["uid"])
    body["Pod"]["metadata"]["annotations"] = pod["metadata"].get("annotations") or {}
    body["Pod"]["spec"]["volumes"] = pod["spec"]["volumes"]
    return body


def pending_evictions(ext: Extender) -> float:
    """dra_extender_eviction_pending_pods: the pods in the eviction controller's plan not yet evicted."""
    line = next(line for line in ext.http.get("/metrics").text.splitlines() if line.startswith("dra_extender_eviction_pending_pods "))
    return float(line.rsplit(" ", 1)[1])


def view_version(ext: Extender, kind: str, key: str) -> str | None:
    """The object's resourceVersion in the extender's view (opaque: only compared for equality)."""
    return ext.http.get("/debug/objects").json()["objects"].get(kind, {}).get(key)


def filtered(ext: Extender, pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    resp = ext.post("filter", volume_filter(pod))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert not body["Error"], body
    return list(body["NodeNames"] or []), dict(body["FailedAndUnresolvableNodes"] or {})


def demo_volumes() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEMO / "volumes.yaml").read_text()) if d]
    pv = next(d for d in docs if d["kind"] == "PersistentVolume")
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    return pv, pvc


def with_taints(obj: dict[str, Any], taints: list[dict[str, Any]] | str | None) -> dict[str, Any]:
    annotations = dict(obj["metadata"].get("annotations") or {})
    annotations.pop(TAINTS, None)
    if taints is not None:
        annotations[TAINTS] = taints if isinstance(taints, str) else json.dumps(taints)
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


class World:
    """One way to change the cluster: a manifest directory or the fake API server."""

    def __init__(
        self,
        put: Callable[[dict[str, Any]], None],
        events: Callable[[], list[dict[str, Any]]],
        pod_gone: Callable[[str], bool],
        *,
        cluster: bool,
    ) -> None:
        self.cluster = cluster
        self.put = put
        self.events = events
        self.pod_gone = pod_gone


@pytest.fixture(params=["source", "cluster"])
def world(request, tmp_path: Path):
    """(extender, World) over the demo cluster, in --source or cluster mode."""
    if request.param == "source":
        directory = tmp_path / "cluster"
        shutil.copytree(DEMO, directory)

        def put(obj: dict[str, Any]) -> None:
            name = f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            (directory / name).write_text(yaml.safe_dump(obj))

        # One file per volume object, so a test can rewrite one of them.
        for doc in yaml.safe_load_all((directory / "volumes.yaml").read_text()):
            if doc:
                put(doc)
        (directory / "volumes.yaml").unlink()
        ext = Extender("--source", str(directory), command="all")

        def events() -> list[dict[str, Any]]:
            return []  # --source: Events are logged (checked through the logs)

        def gone(name: str) -> bool:
            pods = [p["pod"] for item in ext.http.get("/debug/volumes").json()["items"] for p in item["pods"]]
            return f"default/{name}" not in pods

        ext.wait_ready()
        yield ext, World(put, events, gone, cluster=False)
        ext.stop()
        return
    api = FakeApi(DEMO)
    ext = cluster_extender(api, command="all")

    def put_api(obj: dict[str, Any]) -> None:
        current = api.get(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if current is None:
            api.create(obj)
        else:
            meta = {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"], "uid": current["metadata"]["uid"]}
            api.replace({**obj, "metadata": meta})

    try:
        ext.wait_ready()
        yield ext, World(put_api, lambda: api.list("Event"), lambda name: api.get("Pod", "default", name) is None, cluster=True)
    finally:
        ext.stop()
        api.stop()


def test_no_attach_or_mount_keeps_the_reader_off_and_admits_the_populator(world) -> None:
    ext, w = world
    pv, _ = demo_volumes()
    reader = volume_pod("reader")
    populator = volume_pod("populator", tolerations=[{"key": "example.com/data-not-ready", "operator": "Exists"}])
    passed, failed = filtered(ext, reader)
    assert passed == [] and failed == {n: REASON for n in NODES}
    assert filtered(ext, populator) == (NODES, {})
    view = {item["name"]: item for item in ext.http.get("/debug/volumes").json()["items"]}
    assert view["pv-dataset"]["taints"] == NOT_READY
    assert 'dra_extender_volume_rejections_total{effect="NoAttachOrMount"}' in ext.http.get("/metrics").text
    w.put(with_taints(pv, None))  # the populator is done
    wait_for(lambda: filtered(ext, reader) == (NODES, {}), timeout=15, what="the reader admitted")


def test_no_use_evicts_the_non_tolerating_pod_after_its_toleration_seconds(world) -> None:
    ext, w = world
    pv, _ = demo_volumes()
    w.put(
        volume_pod(
            "migrating-reader",
            tolerations=[{"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse", "tolerationSeconds": 3}],
            node="node-a",
        )
    )
    w.put(volume_pod("mover", tolerations=[{"key": "example.com/migrating", "operator": "Exists", "effect": "NoUse"}], node="node-b"))
    wait_for(
        lambda: len(next((i["pods"] for i in ext.http.get("/debug/volumes").json()["items"] if i["name"] == "pv-dataset"), [])) == 4,
        timeout=15,
        what="the pods in the view",
    )
    started = time.monotonic()
    w.put(with_taints(pv, [{"key": "example.com/migrating", "effect": "NoUse"}]))
    wait_for(lambda: w.pod_gone("migrating-reader"), timeout=20, what="the non-tolerating pod evicted")
    # After its tolerationSeconds (3 s), not at once; timeAdded has second resolution, as metav1.Time.
    assert time.monotonic() - started >= 1.9
    # The plan after the eviction holds no pod: the mover, tolerating NoUse without tolerationSeconds, is never due.
    wait_for(lambda: pending_evictions(ext) == 0, timeout=10, what="no eviction pending")
    assert not w.pod_gone("mover")
    logs = ext.logs()
    assert "stamped timeAdded on volume taints" in logs
    assert "deleted pod" in logs and "pod=default/migrating-reader" in logs
    if w.cluster:
        events = [e for e in w.events() if e["involvedObject"].get("name") == "migrating-reader"]
        assert [e["reason"] for e in events] == ["VolumeTaintManagerEviction"]
    assert 'dra_extender_volume_evictions_total{result="ok"} 1.0' in ext.http.get("/metrics").text


def test_a_malformed_taint_annotation_closes_the_volume_and_is_reported(world) -> None:
    ext, w = world
    _, pvc = demo_volumes()
    populator = volume_pod("populator", tolerations=[{"operator": "Exists"}])  # tolerates everything
    w.put(with_taints(pvc, '[{"key": "example.com/oops", "effect": "NoUse"'))  # truncated JSON

    def closed() -> bool:
        passed, failed = filtered(ext, populator)
        return not passed and all("volume-taints annotation of the claim is malformed" in r for r in failed.values())

    wait_for(closed, timeout=15, what="the volume closed")
    wait_for(lambda: "malformed volume taints" in ext.logs(), timeout=10, what="the warning logged")
    if w.cluster:  # a Warning Event on the PVC (--source mode logs it)
        wait_for(
            lambda: [e for e in w.events() if e["involvedObject"].get("kind") == "PersistentVolumeClaim" and e["type"] == "Warning"],
            timeout=10,
            what="the Warning Event on the PVC",
        )
    assert 'dra_extender_object_problems_total{kind="PersistentVolumeClaim"} 1.0' in ext.http.get("/metrics").text
    assert 'dra_extender_volume_rejections_total{effect="Malformed"}' in ext.http.get("/metrics").text


def test_a_no_attach_taint_on_a_volume_in_use_is_announced_once(world) -> None:
    ext, w = world
    pv, _ = demo_volumes()
    w.put(volume_pod("running-reader", node="node-c"))
    wait_for(lambda: "volume taint not effective for running pods" in ext.logs(), timeout=15, what="the announcement")
    assert "pods=default/running-reader" in ext.logs()
    assert not w.pod_gone("running-reader")  # NoAttachOrMount evicts nobody
    if w.cluster:
        notes = wait_for(
            lambda: [e for e in w.events() if e["reason"] == "VolumeTaintNotEffective"], timeout=10, what="the Event on the PV"
        )
        assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in notes] == [("PersistentVolume", "pv-dataset")]
    announced = ext.logs().count("volume taint not effective for running pods")
    assert announced == 1
    seen = view_version(ext, "Pod", "default/running-reader")
    w.put(volume_pod("running-reader", node="node-c", tolerations=[]))  # an unrelated change: no second Event
    wait_for(lambda: view_version(ext, "Pod", "default/running-reader") != seen, timeout=15, what="the change in the view")
    # A second taint is announced on its own, by a pass that has seen the change above: the first is not announced again.
    w.put(with_taints(pv, [*NOT_READY, SECOND]))
    wait_for(lambda: f"taints={SECOND_TEXT}" in ext.logs(), timeout=15, what="the second taint announced")
    lines = [line for line in ext.logs().splitlines() if "volume taint not effective for running pods" in line]
    assert len(lines) == 2 and sum(f"taints={SECOND_TEXT}" in line for line in lines) == 1, lines


def test_a_malformed_toleration_annotation_counts_as_none_and_is_reported(world) -> None:
    ext, _ = world
    typo = volume_pod("populator", raw_tolerations='[{"key": "example.com/data-not-ready", "operator": "exists"}]')
    passed, failed = filtered(ext, typo)
    assert passed == [] and failed == {n: REASON for n in NODES}
    wait_for(lambda: "malformed volume tolerations, counted as none" in ext.logs(), timeout=10, what="the report")
    assert 'dra_extender_object_problems_total{kind="Pod"} 1.0' in ext.http.get("/metrics").text
