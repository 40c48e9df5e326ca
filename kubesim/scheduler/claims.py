"""The resourceclaim-controller stand-in: claims from templates through a token bucket, released with their pods."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kubesim.scheduler.api import Api
from kubesim.scheduler.config import DELETE_PROTECTION, ClaimControllerConfig, key_of, now
from tracker.apiserver.requests import MERGE_PATCH


class TokenBucket:
    """client-go's default rate limiter: qps tokens per second, at most burst saved."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens = float(burst)
        self.last = now()
        self.lock = asyncio.Lock()

    async def take(self) -> None:
        async with self.lock:
            t = now()
            self.tokens = min(self.burst, self.tokens + (t - self.last) * self.qps)
            self.last = t
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.qps)
                self.tokens = 1.0
                self.last = now()
            self.tokens -= 1


class ClaimController:
    """Creates each pod's claims from its templates (name <pod>-<podclaim>-xxxxx, owner the pod) and sets status.resourceClaimStatuses."""

    def __init__(self, api: Api, cfg: ClaimControllerConfig) -> None:
        self.api, self.cfg = api, cfg
        self.bucket = TokenBucket(cfg.qps, cfg.burst)
        self.queue: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self.seen: set[str] = set()
        self.pods: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}
        self.created: dict[tuple[str, str], str] = {}  # (pod uid, pod claim) -> claim name
        self.claims_created = 0
        self.claims_released = 0
        self.errors: Counter[str] = Counter()

    def on_pod(self, pod: dict[str, Any] | None) -> None:
        if pod is None:
            return
        k = key_of(pod)
        self.pods[k] = pod
        if k in self.seen or pod["metadata"].get("deletionTimestamp"):
            return
        if any(c.get("resourceClaimTemplateName") for c in (pod.get("spec") or {}).get("resourceClaims") or []):
            self.seen.add(k)
            self.queue.put_nowait((now() + self.cfg.delay, k))

    def on_pod_deleted(self, pod: dict[str, Any] | None) -> None:
        """A deleted pod's generated claims: deallocated, then deleted (steady state returns their devices)."""
        if pod is None:
            return
        ns = pod["metadata"]["namespace"]
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("resourceClaimName"):
                self.queue.put_nowait((now(), f"release:{ns}/{st['resourceClaimName']}"))

    async def _release(self, k: str) -> None:
        ns, _, name = k.partition("/")
        path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
        status, claim = await self.api.request("GET", path)
        if status == 404:
            return
        if status != 200:
            raise RuntimeError(f"get claim {k}: HTTP {status}")
        if (claim.get("status") or {}).get("allocation") or (claim.get("status") or {}).get("reservedFor"):
            claim["status"] = {}
            await self.bucket.take()
            status, claim = await self.api.request("PUT", f"{path}/status", claim)
            if status != 200:
                raise RuntimeError(f"deallocate claim {k}: HTTP {status}: {str(claim)[:200]}")
            self.claims_released += 1
        if DELETE_PROTECTION in (claim["metadata"].get("finalizers") or []):
            claim["metadata"]["finalizers"] = [f for f in claim["metadata"]["finalizers"] if f != DELETE_PROTECTION]
            await self.bucket.take()
            status, body = await self.api.request("PUT", path, claim)
            if status == 404:
                return
            if status != 200:
                raise RuntimeError(f"drop finalizer of claim {k}: HTTP {status}: {str(body)[:200]}")
        await self.bucket.take()
        status, body = await self.api.request("DELETE", path)
        if status not in (200, 202, 404):
            raise RuntimeError(f"delete claim {k}: HTTP {status}: {str(body)[:200]}")

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.cfg.workers)))

    async def _worker(self) -> None:
        while True:
            due, k = await self.queue.get()
            await asyncio.sleep(max(0.0, due - now()))
            try:
                if k.startswith("release:"):
                    await self._release(k.removeprefix("release:"))
                    continue
                await self._sync(k)
            except Exception as e:  # retried, as the controller's workqueue would
                self.errors[type(e).__name__ + ": " + str(e)[:100]] += 1
                self.queue.put_nowait((now() + 0.2, k))

    async def _template(self, ns: str, name: str) -> dict[str, Any]:
        if f"{ns}/{name}" not in self.templates:
            status, body = await self.api.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/{name}")
            if status != 200:
                raise RuntimeError(f"template {ns}/{name}: HTTP {status}")
            self.templates[f"{ns}/{name}"] = body
        return self.templates[f"{ns}/{name}"]

    async def _sync(self, k: str) -> None:
        pod = self.pods[k]
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        have = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        statuses = []
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            tmpl_name = pc.get("resourceClaimTemplateName")
            if not tmpl_name:
                continue
            if pc["name"] in have:
                statuses.append({"name": pc["name"], "resourceClaimName": have[pc["name"]]})
                continue
            claim_name = self.created.get((uid, pc["name"]))
            if claim_name is None:
                tmpl = await self._template(ns, tmpl_name)
                tmeta = (tmpl.get("spec") or {}).get("metadata") or {}
                claim = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {
                        "generateName": f"{name}-{pc['name']}"[:57] + "-",
                        "namespace": ns,
                        "labels": tmeta.get("labels") or {},
                        "annotations": {**(tmeta.get("annotations") or {}), "resource.kubernetes.io/pod-claim-name": pc["name"]},
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}
                        ],
                    },
                    "spec": (tmpl.get("spec") or {}).get("spec") or {},
                }
                await self.bucket.take()
                status, body = await self.api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", claim)
                if status != 201:
                    raise RuntimeError(f"create claim for {k}: HTTP {status}: {str(body)[:200]}")
                claim_name = self.created[(uid, pc["name"])] = body["metadata"]["name"]
                self.claims_created += 1
            statuses.append({"name": pc["name"], "resourceClaimName": claim_name})
        if not statuses or all(s["name"] in have for s in statuses):
            return
        await self.bucket.take()
        status, body = await self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            {"metadata": {"uid": uid}, "status": {"resourceClaimStatuses": statuses}},
            MERGE_PATCH,
        )
        if status == 404:
            return
        if status != 200:
            raise RuntimeError(f"pod status {k}: HTTP {status}: {str(body)[:200]}")
