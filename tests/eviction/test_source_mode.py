"""`--source DIR`: evictions land in the overlay, so the demo can show a drain."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import yaml

from allocator.cel import CelEnvironment
from controllers.eviction import EvictionController, Settings
from kubesim.clock import FakeClock
from kubesim.objects import node
from tests.eviction.harness import T0, claim_and_pod, gpu_slice, rule
from tracker.clock import format_time
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState


async def test_an_eviction_removes_the_pod_from_the_view_and_releases_its_claim(tmp_path: Path, caplog) -> None:
    claim, pod = claim_and_pod("trainer", 0)
    kept_claim, kept_pod = claim_and_pod(
        "patient", 1, tolerations=[{"key": "example.com/broken", "operator": "Exists", "tolerationSeconds": 3600}]
    )
    (tmp_path / "cluster.yaml").write_text(
        # timeAdded on the fake clock: the load time (the real clock's) would date the rule after the fake now, which
        # the rate limit reads as a rule of unknown age (no burst), and the fake clock never moves here.
        yaml.safe_dump_all([node("node-a"), gpu_slice(2), claim, pod, kept_claim, kept_pod, rule("drain", timeAdded=format_time(T0))])
    )
    state = ClusterState(CelEnvironment())
    source = ManifestSource(tmp_path, watch=False)
    clock = FakeClock(T0)
    controller = EvictionController(state, source, Settings(), clock=clock)
    tasks = [asyncio.create_task(source.run(state)), asyncio.create_task(controller.run())]
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(300):
                await asyncio.sleep(0.01)
                if "default/trainer" not in state.pods and controller.idle:
                    break
            assert "default/trainer" not in state.pods
            assert state.claims["default/trainer-gpu"].allocation is None  # released: nobody reserves it
            assert "default/patient" in state.pods  # tolerates for an hour
            assert [e["message"] for e in source.events] == ["Marking for deletion"]
            deleted = [r for r in caplog.records if r.getMessage() == "deleted pod"]
            assert len(deleted) == 1 and deleted[0].pod == "default/trainer" and deleted[0].devices == "gpu.example.com/node-a/gpu-0"
            assert "example.com/broken:NoExecute" in deleted[0].taints and deleted[0].claims == "default/trainer-gpu"
            # timeAdded came from the file; the controller only recorded it (no spec write in the overlay).
            status = source.store.rule_status[("resource.dra-extender.io", "drain")]
            assert status["stampedTaint"]["effect"] == "NoExecute"
            condition = status["conditions"][-1]
            assert condition["reason"] == "PodsPendingEviction" and condition["message"].startswith(
                "1 pod needs to be evicted in 1 namespace."
            )
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
