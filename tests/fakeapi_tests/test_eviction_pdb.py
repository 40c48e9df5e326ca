"""The fake API server's pods/eviction honours PodDisruptionBudgets, as the real one does."""

from __future__ import annotations

import httpx
import pytest

from kubesim.fakeapi import FakeApiServer
from kubesim.objects import pod


def budget(**spec: object) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


CASES = [
    # name, budget spec, pods covered, evictions that succeed before the first 429
    ("minAvailable 2 of 4", {"minAvailable": 2}, 4, 2),
    ("minAvailable 50% of 4", {"minAvailable": "50%"}, 4, 2),
    ("minAvailable 34% of 3 rounds up to 2", {"minAvailable": "34%"}, 3, 1),
    ("maxUnavailable 1", {"maxUnavailable": 1}, 4, 1),
    ("maxUnavailable 50% of 4", {"maxUnavailable": "50%"}, 4, 2),
    ("maxUnavailable 0 blocks all", {"maxUnavailable": 0}, 3, 0),
    ("no budget", None, 3, 3),
]


@pytest.mark.parametrize("spec,count,allowed", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_evictions_stop_at_the_budget(spec: dict | None, count: int, allowed: int) -> None:
    async with FakeApiServer() as api:
        for i in range(count):
            api.create(pod(f"web-{i}", labels={"app": "web"}, phase="Running"))
        api.create(pod("other", labels={"app": "db"}, phase="Running"))  # not covered: always evictable
        if spec is not None:
            api.create(budget(**spec))
        async with httpx.AsyncClient(base_url=api.url) as http:
            results = []
            for i in range(count):
                r = await http.post(
                    f"/api/v1/namespaces/default/pods/web-{i}/eviction",
                    json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": f"web-{i}"}},
                )
                results.append(r.status_code)
                if r.status_code == 429:
                    body = r.json()
                    assert body["reason"] == "TooManyRequests"
                    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
            assert results == [201] * allowed + [429] * (count - allowed)
            assert (await http.post("/api/v1/namespaces/default/pods/other/eviction", json={"kind": "Eviction"})).status_code == 201
        remaining = api.get("pods", "default", f"web-{allowed}") if allowed < count else None
        if remaining is not None:
            assert not any(c["type"] == "DisruptionTarget" for c in remaining["status"].get("conditions") or ())


async def test_an_eviction_marks_the_pod_before_deleting_it() -> None:
    async with FakeApiServer() as api:
        kept = pod("web-0", labels={"app": "web"}, phase="Running")
        kept["metadata"]["finalizers"] = ["example.com/keep"]
        created = api.create(kept)
        async with httpx.AsyncClient(base_url=api.url) as http:
            r = await http.post(
                "/api/v1/namespaces/default/pods/web-0/eviction",
                json={"kind": "Eviction", "deleteOptions": {"preconditions": {"uid": "not-it"}}},
            )
            assert r.status_code == 409
            r = await http.post(
                "/api/v1/namespaces/default/pods/web-0/eviction",
                json={"kind": "Eviction", "deleteOptions": {"preconditions": {"uid": created["metadata"]["uid"]}}},
            )
            assert r.status_code == 201
        held = api.get("pods", "default", "web-0")  # a finalizer keeps it, deleting
        assert held["metadata"].get("deletionTimestamp")
        assert [(c["type"], c["reason"]) for c in held["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
            ("DisruptionTarget", "EvictionByEvictionAPI")
        ]
