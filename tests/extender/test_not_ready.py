"""Before the initial state is complete the verbs answer 200 with an Error."""

from __future__ import annotations

import httpx

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.app import create_app
from extender.service import build_service
from serving.metrics import Metrics
from tests.e2e.harness import DEMO, demo_pod_args, sample
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState


async def test_not_ready_answers() -> None:
    cel = CelEnvironment()
    state = ClusterState(cel)  # nothing synced yet
    app = create_app(build_service(state, ManifestSource(DEMO), Allocator(cel), Metrics()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and "ResourceSlice" in ready.text
        resp = await client.post("/filter", json=demo_pod_args("trainer", ["node-a"]))
        assert resp.status_code == 200
        assert resp.json()["Error"].startswith("not ready: waiting for the initial state of")
        assert resp.json()["NodeNames"] is None
        # Pods without claims need no state: they pass even now.
        body = sample("ncc-true-filter-1.json")
        plain = await client.post("/filter", json=body)
        assert plain.json()["NodeNames"] == body["NodeNames"]
        bind = await client.post("/bind", json=sample("ncc-true-bind-1.json"))
        assert bind.json()["Error"].startswith("not ready")
        assert (await client.get("/livez")).status_code == 200
