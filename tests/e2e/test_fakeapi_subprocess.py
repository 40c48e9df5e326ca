"""The fake API server as `python -m kubesim.fakeapi`: its flags (--load, --no-crds), the control endpoints over HTTP, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client, config

from tests.fakeapi_tests.test_fakeapi import ROOT, RULES, node, pod, raw


def test_subprocess_mode(tmp_path):
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n---\n"
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: resource.k8s.io/v1\n  kind: DeviceClass\n  metadata:\n    name: gpu.example.com\n"
        "- apiVersion: resource.k8s.io/v1\n  kind: ResourceClaim\n  metadata:\n    name: c1\n    namespace: team-a\n"
        "  spec:\n    devices:\n      requests: []\n  status:\n    reservedFor: [{resource: pods, name: p, uid: u}]\n"
    )
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "n2.json").write_text(json.dumps(node("n2")))
    kubeconfig = tmp_path / "kc.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim.fakeapi",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            "--load",
            str(manifest),
            "--load",
            str(tmp_path / "more"),
            "--no-crds",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = proc.stdout.readline()
        ready = json.loads(line)
        url = ready["url"]
        assert url.startswith("http://127.0.0.1:") and Path(ready["kubeconfig"]) == kubeconfig

        async def drive() -> None:
            cfg = client.Configuration()
            await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
            async with client.ApiClient(cfg) as kc:
                nodes = await client.CoreV1Api(kc).list_node()
                assert [n.metadata.name for n in nodes.items] == ["n1", "n2"]
                status, body = await raw(kc, "GET", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c1")
                assert status == 200 and body["status"]["reservedFor"][0]["uid"] == "u"  # --load keeps status
                assert (await raw(kc, "GET", f"/apis/{RULES}/v1alpha1"))[0] == 404  # --no-crds
            async with aiohttp.ClientSession(url) as s:
                async with s.post("/_fake/faults", json={"error_rate": 1.0, "error_status": 500, "verbs": ["get"]}) as r:
                    assert r.status == 200
                async with s.get("/api/v1/nodes/n1") as r:
                    assert r.status == 500 and (await r.json())["kind"] == "Status"
                async with s.delete("/_fake/faults") as r:
                    assert r.status == 200
                async with s.post("/_fake/compact") as r:
                    compacted = (await r.json())["compactedResourceVersion"]
                async with s.get("/_fake/state") as r:
                    state = await r.json()
                assert state["compactedResourceVersion"] == compacted and state["objects"]["nodes"] == 2
                async with s.get("/_fake/requests") as r:
                    log = await r.json()
                assert any(rec["status"] == 500 and rec["fault"] == "error" for rec in log)
                async with s.post("/_fake/objects", json={"kind": "List", "items": [node("n3"), pod("p1", "ns1")]}) as r:
                    assert (await r.json())["applied"] == 2
                async with s.get("/api/v1/nodes", params={"watch": "true", "resourceVersion": "0"}) as w:
                    assert json.loads(await w.content.readline())["type"] == "ADDED"
                    async with s.post("/_fake/drop-watches", json={"abrupt": False}) as r:
                        assert (await r.json())["dropped"] == 1
                    lines = [ln async for ln in w.content]
                    assert [json.loads(ln)["object"]["metadata"]["name"] for ln in lines] == ["n2", "n3"]
                async with s.post("/_fake/serve", json={"group": "coordination.k8s.io", "served": False}) as r:
                    assert r.status == 200
                async with s.get("/apis/coordination.k8s.io/v1") as r:
                    assert r.status == 404

        asyncio.run(drive())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0
