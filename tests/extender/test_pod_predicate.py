"""One answer to "does this pod need the extender": the webhook, /filter, /bind and `kubectl dra why` agree.

Each row is one kind of pod on one fake API server (real clients, real
entry points): the webhook's /mutate, the Service's filter and bind as the
HTTP edge calls them, and `kubectl dra why` in process. A pod that uses DRA
is sent to the extender's scheduler by the webhook, gets its devices at
/bind and is never said by `why` to use none; a pod that does not is left
alone, bound without a claim, and `why` says so only when every node fits.
The allocator's three predicates (allocator/pod_claims.py) are checked in
their order on the same pods.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from allocator.extended_resources import IMPLICIT_PREFIX, class_mapping
from allocator.parse import parse_device_class, parse_pod
from allocator.pod_claims import dra_use, may_use_dra, raw_may_use_dra, raw_needs_extender
from kubectl_dra.cli import build_parser, run
from kubesim.fakeapi import FakeApiServer
from kubesim.objects import claim, node
from tests.extender.api_cluster import RESOURCE, ApiCluster, gpu_class, node_slice
from tracker import events as ev
from webhook.app import create_webhook_app
from webhook.classes import DeviceClassNames

SCHEDULER = "dra-scheduler"
NODE = "node-a"
TAINTS = "resource.dra-extender.io/volume-taints"
TOLERATIONS = "resource.dra-extender.io/volume-tolerations"
NO_DRA = "uses no DRA device"


def _pod(name: str, *, limits: dict[str, str] | None = None, claims: list[dict[str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if limits:
        container["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"containers": [container], **extra.pop("spec", {})}
    if claims:
        spec["resourceClaims"] = claims
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **extra.pop("meta", {})},
        "spec": spec,
        **extra,
    }


def _tainted_pvc() -> dict[str, Any]:
    taints = json.dumps([{"key": "example.com/migrating", "effect": "NoUse"}])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default", "annotations": {TAINTS: taints}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


VOLUME = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
TOLERATES = {"annotations": {TOLERATIONS: json.dumps([{"key": "example.com/migrating", "operator": "Exists"}])}}


@dataclass(frozen=True)
class Row:
    name: str
    pod: dict[str, Any]
    uses_dra: bool  # the one answer: sent to the extender's scheduler, devices allocated at /bind
    fits: bool  # node-a passes /filter
    objects: list[dict[str, Any]] = field(default_factory=list)
    refusal: str = ""  # a part of /filter's reason when it does not fit


ROWS = [
    Row("claim-by-name", _pod("named", claims=[{"name": "gpu", "resourceClaimName": "named-c"}]), True, True, [claim("named-c")]),
    Row(
        "claim-by-template",
        _pod(
            "templated",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
            status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "templated-gpu-x1"}]},
        ),
        True,
        True,
        [claim("templated-gpu-x1")],
    ),
    Row("extended-resource-explicit-class-name", _pod("explicit", limits={RESOURCE: "1"}), True, True),
    Row("extended-resource-implicit-class-name", _pod("implicit", limits={IMPLICIT_PREFIX + "gpu": "1"}), True, True),
    Row(
        "extended-resource-more-than-the-node-has",
        _pod("greedy", limits={RESOURCE: "3"}),
        True,
        False,
        refusal="2 of 3 devices available",
    ),
    Row("device-plugin-resource", _pod("plugin", limits={"vendor.example/fpga": "1"}), False, True),
    Row("volume-taint-tolerated", _pod("tolerant", spec=VOLUME, meta=TOLERATES), False, True, [_tainted_pvc()]),
    Row("volume-taint-not-tolerated", _pod("intolerant", spec=VOLUME), False, False, [_tainted_pvc()], "example.com/migrating"),
    Row("none", _pod("plain"), False, True),
]


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


async def _webhook_patch(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """What /mutate answers for the creation of `pod`, the classes listed."""
    classes = DeviceClassNames()
    classes.replace(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, [gpu_class(RESOURCE)])
    classes.mark_synced(ev.DEVICE_CLASS, ev.GROUP_RESOURCE)
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "default",
            "object": pod,
        },
    }
    app = create_webhook_app(SCHEDULER, classes)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook") as client:
        answer = await client.post("/mutate", content=orjson.dumps(review), headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    return orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []


async def _why(cluster: ApiCluster, name: str) -> list[str]:
    lines: list[str] = []
    args = build_parser().parse_args(["--kubeconfig", str(cluster.kubeconfig), "why", "-n", "default", name])
    assert await run(args, lines.append) == 0
    return lines


def _allocated_claims(api: FakeApiServer) -> list[str]:
    claims = api.list("resourceclaims", group="resource.k8s.io")
    return sorted(c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("allocation"))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_the_webhook_filter_bind_and_why_agree(api: FakeApiServer, tmp_path: Path, row: Row) -> None:
    # The allocator's predicates, in their order: with the classes known, without them, on the request body.
    served = class_mapping({"gpu": parse_device_class(gpu_class(RESOURCE))})
    parsed = parse_pod(row.pod)
    assert (dra_use(parsed, served) is not None) == row.uses_dra
    assert may_use_dra(parsed) >= row.uses_dra and raw_may_use_dra(row.pod) >= may_use_dra(parsed)
    assert raw_needs_extender(row.pod) >= (may_use_dra(parsed) or bool(parsed.volume_claims))

    api.create(gpu_class(RESOURCE))
    api.create(node(NODE, hostname=True))
    api.create(node_slice(NODE, 2))
    for obj in row.objects:
        api.create(obj)
    pod = api.create(row.pod)
    cluster = ApiCluster(api, tmp_path)
    try:
        await cluster.start()
        await cluster.caught_up()

        patch = await _webhook_patch(row.pod)
        assert bool(patch) == row.uses_dra, patch
        if patch:
            assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER}]

        passed, failed = await cluster.filter(pod, [NODE])
        assert (passed == [NODE]) == row.fits, failed
        if not row.fits:
            assert row.refusal in failed[NODE], failed

        why = await _why(cluster, row.pod["metadata"]["name"])
        assert any(NO_DRA in line for line in why) == (not row.uses_dra and row.fits), why
        assert not any("passes every node" in line for line in why), why
        assert f"{1 if row.fits else 0} of 1 nodes fit" in "\n".join(why), why
        if not row.fits:
            assert any(line.split(None, 1) == [NODE, failed[NODE]] for line in why), (why, failed)

        if row.fits:
            assert await cluster.bind(pod, NODE) == ""
            await cluster.caught_up()
            bound = api.get("pods", "default", row.pod["metadata"]["name"])
            assert bound is not None and bound["spec"].get("nodeName") == NODE
            assert bool(_allocated_claims(api)) == row.uses_dra, _allocated_claims(api)
    finally:
        await cluster.stop()
