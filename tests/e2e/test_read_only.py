"""`serve --read-only` (the workstation recipe) looks at a cluster and never writes to it.

Against a cluster where a leader would evict (a NoExecute rule over a running
pod's device) and record a Warning Event (a DeviceClass whose CEL does not
compile), a read-only extender answers /filter, refuses /bind, and sends the
API server nothing but reads.
"""

from __future__ import annotations

from kubesim.objects import node
from tests.e2e.cluster import FakeApi, cluster_extender, holds, wait_converged
from tests.eviction.harness import claim_and_pod, gpu_slice, rule

FAULTY_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "broken"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
}


def test_read_only_answers_filter_and_never_writes() -> None:
    api = FakeApi()
    try:
        api.control("POST", "objects", {"kind": "List", "items": [node("node-a"), gpu_slice(2), *claim_and_pod("victim", 0), FAULTY_CLASS]})
        api.create(rule("drain", selector={"driver": "gpu.example.com", "device": "gpu-0"}))
        seen = len(api.requests())
        ext = cluster_extender(api, "--read-only", command="all")
        try:
            ext.wait_ready()
            wait_converged(api, ext)
            assert "read-only (--read-only)" in ext.logs()
            filtered = ext.post(
                "filter", b'{"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}, "NodeNames": ["node-a"]}'
            )
            assert filtered.status_code == 200 and filtered.json()["NodeNames"] == ["node-a"], filtered.text
            assert ext.post("bind", b'{"PodName": "victim", "PodNamespace": "default", "PodUID": "x", "Node": "node-a"}').json() == {
                "Error": "not leader"
            }
            holds(lambda: api.get("Pod", "default", "victim") is not None, 1.5, what="the victim kept")
            writes = [
                (r["method"], r["path"])
                for r in api.requests()[seen:]
                if r["method"] not in ("GET", "HEAD")
                and not r["path"].startswith("/_fake")
                and not r["user_agent"].startswith("python-httpx")
            ]
            assert writes == [], writes
            assert api.list("Event") == []
            assert 'dra_extender_leader{role="verbs"} 0.0' in ext.http.get("/metrics").text
        finally:
            ext.stop()
    finally:
        api.stop()
