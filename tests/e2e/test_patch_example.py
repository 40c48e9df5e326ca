"""The documented ResourceSlicePatch, installed and created as an admin would, changes what the scheduler is told.

The fake API server starts without the project's CRDs; the test applies the
chart's CRD files over HTTP (what `kubectl apply -f charts/dra-extender/crds/`
sends), so they pass the same checks a real server makes, then creates the
example from `examples/` and watches `dra-extender serve --kubeconfig`
change its `/filter` answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import CRD_GROUP, FakeApi, cluster_extender, wait_converged, wait_for
from tests.e2e.harness import DEMO, demo_pod_args

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "charts" / "dra-extender" / "crds"
EXAMPLE = ROOT / "examples" / "resourceslicepatches" / "node-b-gpu-0-h100.yaml"
PATCHES = f"/apis/{CRD_GROUP}/v1alpha1/resourceslicepatches"
ALL = ["node-a", "node-b", "node-c"]


def reasons(ext: Any, body: dict[str, Any]) -> dict[str, str | None]:
    """node -> None when it passes, else why not."""
    resp = ext.post("filter", body)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["Error"] == "", result
    return {**{n: None for n in result["NodeNames"]}, **result["FailedAndUnresolvableNodes"]}


def test_documented_patch_changes_filter_decisions() -> None:
    api = FakeApi(DEMO, extra_args=("--no-crds",))
    ext = None
    try:
        for path in sorted(CRDS.glob("*.yaml")):
            r = api.http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=yaml.safe_load(path.read_text()))
            assert r.status_code == 201, r.text
        ext = cluster_extender(api)
        ext.wait_ready()
        wait_converged(api, ext)

        # The maintenance job asks for an H100: only node-c has them.
        job = demo_pod_args("maintenance-job", ALL)
        before = reasons(ext, job)
        assert before["node-c"] is None
        assert "not matching the request's selectors" in (before["node-b"] or "")

        # An edit a real server refuses is refused here too, and changes nothing.
        bad = yaml.safe_load(EXAMPLE.read_text())
        bad["spec"]["devices"]["attributes"]["gpu.example.com/model"]["int"] = 100
        r = api.http.post(PATCHES, json=bad)
        assert r.status_code == 422, r.text
        assert r.json()["details"]["causes"][0]["field"] == "spec.devices.attributes[gpu.example.com/model]"

        # kubectl create -f examples/resourceslicepatches/node-b-gpu-0-h100.yaml
        r = api.http.post(PATCHES, json=yaml.safe_load(EXAMPLE.read_text()))
        assert r.status_code == 201, r.text
        wait_for(lambda: reasons(ext, job)["node-b"] is None, what="node-b passing once its gpu-0 reads h100")
        assert reasons(ext, job) == {**before, "node-b": None}
        devices = ext.http.get("/debug/devices", params={"node": "node-b", "driver": "gpu.example.com"}).json()["items"]
        models = {d["device"]: d["attributes"]["effective"]["gpu.example.com/model"] for d in devices}
        assert models == {"gpu-0": "h100", "gpu-1": "a100"}, devices

        # kubectl delete resourceslicepatch node-b-gpu-0-h100
        assert api.http.delete(f"{PATCHES}/node-b-gpu-0-h100").status_code == 200
        wait_for(lambda: reasons(ext, job) == before, what="the driver's model back once the patch is gone")
    finally:
        if ext is not None:
            ext.stop()
        api.stop()
