"""DRA pods another scheduler schedules are never left silent: a metric, a warning log, one Warning Event per pod.

The extender serves the dra-scheduler profile; the schedulerName webhook
leaves kube-system (and the release namespace) out. A DRA pod there, or one
the webhook missed, keeps the default scheduler, which allocates beside the
extender when its DynamicResources plugin is on.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kubesim.objects import pod
from tests.e2e.cluster import FakeApi, cluster_extender, wait_for
from tests.e2e.harness import DEMO
from tests.e2e.test_hostile import metric

METRIC = "dra_extender_foreign_scheduler_pods_total"
REASON = "ScheduledByAnotherScheduler"


_pod = partial(pod, namespace="ml", scheduler="default-scheduler")  # these rows' defaults (kubesim/objects.py)


def _claims() -> dict[str, Any]:
    return {"resourceClaims": [{"name": "gpu", "resourceClaimName": "some-claim"}]}


def _asks(resource: str) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "x", "resources": {"limits": {resource: "1"}}}]}


# name -> (the pod, whether it is flagged)
PODS: dict[str, tuple[dict[str, Any], bool]] = {
    "claims, default scheduler, pending": (_pod("claims-default", **_claims()), True),
    "claims, no schedulerName (the default)": (_pod("claims-unnamed", scheduler=None, **_claims()), True),
    "claims, another scheduler named": (_pod("claims-volcano", scheduler="volcano", **_claims()), True),
    "a class's extended resource": (_pod("extended-default", **_asks("example.com/fresh-gpu")), True),
    "the implicit deviceclass name": (_pod("implicit-default", **_asks("deviceclass.resource.kubernetes.io/gpu.example.com")), True),
    "claims, our scheduler": (_pod("claims-ours", scheduler="dra-scheduler", **_claims()), False),
    "a device-plugin resource": (_pod("plugin-default", **_asks("nvidia.com/gpu")), False),
    "no DRA at all": (_pod("plain-default"), False),
}


def _events(api: FakeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in api.list("Event")
        if e["involvedObject"].get("kind") == "Pod"
        and e["involvedObject"].get("name") == name
        and e["involvedObject"].get("namespace") == namespace
        and e["reason"] == REASON
    ]


def test_dra_pods_of_another_scheduler_are_counted_and_told_once() -> None:
    api = FakeApi(DEMO)
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "fresh-gpu"},
            "spec": {"selectors": [{"cel": {"expression": "true"}}], "extendedResourceName": "example.com/fresh-gpu"},
        }
    )
    # Already bound by the default scheduler before the extender starts, in a namespace the webhook leaves out.
    early = _pod("early", namespace="kube-system", nodeName="node-a", **_claims())
    api.create(early)
    # Finished before the extender starts: its devices are no longer anyone's to allocate.
    done = api.create(_pod("done", namespace="kube-system", nodeName="node-a", **_claims()))
    api.replace({**done, "status": {"phase": "Succeeded"}}, "status")
    ext = cluster_extender(
        api,
        "--scheduler-name",
        "dra-scheduler",
        "--webhook-excluded-namespace",
        "kube-system",
        "--webhook-excluded-namespace",
        "dra-system",
        command="controllers",
    )
    try:
        ext.wait_ready()
        # The startup check found the pod bound before it started.
        [event] = wait_for(lambda: _events(api, "kube-system", "early"), what="the Event on the pod bound before the start")
        assert event["type"] == "Warning" and event["involvedObject"]["uid"] == api.get("Pod", "kube-system", "early")["metadata"]["uid"]
        message = event["message"]
        assert "'default-scheduler'" in message and "bound to node-a" in message and "'dra-scheduler'" in message, message
        assert "namespace kube-system is excluded from the schedulerName webhook" in message, message
        logs = ext.logs()
        assert "the schedulerName webhook leaves these namespaces out" in logs and "dra-system,kube-system" in logs, logs[-3000:]
        for pod, _ in PODS.values():
            api.create(pod)
        sentinel = _pod("sentinel", **_claims())
        api.create(sentinel)  # created last: once its Event is in, every pod before it has been seen
        wait_for(lambda: _events(api, "ml", "sentinel"), what="the sentinel's Event")
        for case, (pod, flagged) in PODS.items():
            if flagged:
                wait_for(lambda pod=pod: _events(api, "ml", pod["metadata"]["name"]), what=f"the Event of {case}")
            else:
                assert not _events(api, "ml", pod["metadata"]["name"]), case
        assert not _events(api, "kube-system", "done")
        flagged_count = 2 + sum(flagged for _, flagged in PODS.values())  # early and the sentinel too
        assert metric(ext, METRIC) == flagged_count
        # Told once: a change of a flagged pod adds no Event and no count.
        changed = api.get("Pod", "ml", "claims-default")
        changed["metadata"]["labels"] = {"touched": "yes"}
        api.replace(changed)
        api.create(_pod("sentinel-2", **_claims()))
        wait_for(lambda: _events(api, "ml", "sentinel-2"), what="the second sentinel's Event")
        assert len(_events(api, "ml", "claims-default")) == 1
        assert metric(ext, METRIC) == flagged_count + 1
        assert "Traceback" not in ext.logs()
    finally:
        ext.stop()
        api.stop()


def test_without_profiles_nothing_is_flagged_and_the_log_says_why() -> None:
    """No --scheduler-name, no --scheduler-config: the extender cannot tell its pods from others', and says so."""
    api = FakeApi(DEMO)
    api.create(_pod("claims-default", **_claims()))
    ext = cluster_extender(api, command="controllers")
    try:
        ext.wait_ready()
        assert "DRA pods of other schedulers are not checked" in ext.logs()
        assert metric(ext, METRIC) == 0
    finally:
        ext.stop()
        api.stop()


def test_a_default_scheduler_pod_beside_the_kube_scheduler_model_is_flagged() -> None:
    """Row 7 end to end: the kube-scheduler model (profile dra-scheduler) schedules its pod through the extender,
    while a pod of the same template left to the default scheduler (no webhook in its namespace) is flagged:
    counted, one Warning Event, never scheduled by the model."""
    import asyncio

    from kubesim.scheduler import ClaimControllerConfig, SchedulerConfig, Workload
    from kubesim.scheduler.api import Api
    from kubesim.scheduler.config import NAMESPACE, SCHEDULER_NAME
    from kubesim.scheduler.cycle import KubeSchedulerModel
    from kubesim.scheduler.workloads import cluster_objects, pod_object

    api = FakeApi()
    api.control("POST", "objects", {"kind": "List", "items": cluster_objects(Workload("foreign", nodes=2, devices_per_node=1, pods=1))})
    ext = cluster_extender(api, "--scheduler-name", SCHEDULER_NAME, command="all")  # the model's extender and the check, as `make run`
    ours = pod_object(0)
    theirs = pod_object(1)
    theirs["spec"]["schedulerName"] = "default-scheduler"

    async def drive() -> KubeSchedulerModel:
        async with Api(api.url) as client:
            model = KubeSchedulerModel(client, ext.url, SchedulerConfig(http_timeout=5.0, seed=1), ClaimControllerConfig(delay=0.1))
            await model.start()
            try:
                for pod in (ours, theirs):
                    status, body = await client.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
                    assert status == 201, body
                deadline = asyncio.get_running_loop().time() + 20
                while f"{NAMESPACE}/pod-0" not in model.bound_at or not _events(api, NAMESPACE, "pod-1"):
                    assert asyncio.get_running_loop().time() < deadline, (model.bound_at, model.last_rejection)
                    await asyncio.sleep(0.05)
            finally:
                await model.stop()
            return model

    try:
        ext.wait_ready()
        model = asyncio.run(drive())
        assert f"{NAMESPACE}/pod-1" not in model.bound_at  # the model only schedules its own profile's pods
        [event] = _events(api, NAMESPACE, "pod-1")
        assert "'default-scheduler' (pending)" in event["message"] and "resourceClaims" in event["message"], event["message"]
        assert not _events(api, NAMESPACE, "pod-0")
        assert metric(ext, METRIC) == 1
    finally:
        ext.stop()
        api.stop()
