"""examples/kube-scheduler-config.yaml: the profile and extender entry kube-scheduler needs, and verbs we serve."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import yaml

from extender.app import create_app
from tests.e2e.harness import ROOT, sample
from tracker.apiserver.leadership import refuse_in_tree_allocator

CONFIG = ROOT / "examples" / "kube-scheduler-config.yaml"


def _config() -> dict:
    return yaml.safe_load(Path(CONFIG).read_text())


def test_profile_hands_devices_to_the_extender() -> None:
    config = _config()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    [profile] = [p for p in config["profiles"] if p["schedulerName"] == "dra-scheduler"]
    disabled = [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]]
    assert "DynamicResources" in disabled, "one allocator per pool: the in-tree plugin must not allocate too"
    assert profile["percentageOfNodesToScore"] == 100, "sampled nodes may all lack free devices while others have them"
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == ("filter", "prioritize", "bind")
    assert extender["nodeCacheCapable"] is True
    assert extender["weight"] >= 1 and extender["httpTimeout"]
    assert extender.get("ignorable", False) is False
    refuse_in_tree_allocator(str(CONFIG))  # `serve --scheduler-config` accepts it


async def test_every_configured_verb_is_served(demo_service) -> None:
    """kube-scheduler POSTs <urlPrefix>/<verb>: each configured verb answers the scheduler's own sample."""
    extender = _config()["extenders"][0]
    demo = await demo_service()
    bodies = {
        "filterVerb": sample("ncc-true-filter-1.json"),
        "prioritizeVerb": sample("ncc-true-prioritize-1.json"),
        "bindVerb": {**sample("ncc-true-bind-1.json"), "PodName": "plain", "PodNamespace": "default", "PodUID": ""},
    }
    transport = httpx.ASGITransport(app=create_app(demo.service))
    async with httpx.AsyncClient(transport=transport, base_url=extender["urlPrefix"]) as client:
        for key, body in bodies.items():
            response = await client.post(f"/{extender[key]}", content=json.dumps(body))
            assert response.status_code == 200, (key, response.text)
            if key != "prioritizeVerb":
                assert response.json().get("Error") in ("", None), (key, response.json())
