"""A DRA driver stand-in for devices with binding conditions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubesim.scheduler.api import Api
from kubesim.scheduler.config import key_of, now
from kubesim.scheduler.cycle import KubeSchedulerModel
from kubesim.scheduler.readings import summary_ms
from kubesim.scheduler.workloads import Workload
from tracker.apiserver.requests import MERGE_PATCH
from tracker.timestamps import rfc3339


class FakeDriver:
    """A DRA driver for devices with binding conditions: `ready` (or, every Nth allocation, `failed`) after a delay.

    It watches allocations through the model's claim informer and writes the
    condition into the claim's status.devices; a pod must not be bound before
    its claim's devices are ready, and a failed one must be scheduled again.
    """

    def __init__(self, api: Api, model: KubeSchedulerModel, w: Workload) -> None:
        self.api, self.model, self.w = api, model, w
        self.seen: set[tuple[str, str]] = set()  # (claim key, allocationTimestamp + devices) handled
        self.ready_at: dict[str, float] = {}  # claim key -> when its devices were reported ready
        self.failures = 0
        self.allocations = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            while True:
                for k, c in list(self.model.informers["ResourceClaim"].cache.items()):
                    alloc = (c.get("status") or {}).get("allocation") or {}
                    results = (alloc.get("devices") or {}).get("results") or []
                    if not any(r.get("bindingConditions") for r in results) or (c.get("status") or {}).get("devices"):
                        continue
                    ident = (k, json.dumps([alloc.get("allocationTimestamp"), results], sort_keys=True))
                    if ident in self.seen:
                        continue
                    self.seen.add(ident)
                    self.allocations += 1
                    fail = bool(self.w.binding_failure_every) and self.allocations % self.w.binding_failure_every == 0
                    task = asyncio.create_task(self._report(c, results, fail))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                await asyncio.sleep(0.05)
        finally:
            for t in self.tasks:
                t.cancel()

    async def _report(self, claim: dict[str, Any], results: list[dict[str, Any]], fail: bool) -> None:
        await asyncio.sleep(self.w.binding_delay or 0.0)
        meta = claim["metadata"]
        stamp = rfc3339()
        ctype = "failed" if fail else "ready"
        devices = [
            {
                "driver": r["driver"],
                "pool": r["pool"],
                "device": r["device"],
                "conditions": [{"type": ctype, "status": "True", "reason": "FakeDriver", "message": ctype, "lastTransitionTime": stamp}],
            }
            for r in results
        ]
        status, _ = await self.api.request(
            "PATCH",
            f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}/status",
            {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {"devices": devices}},
            MERGE_PATCH,
        )
        if status == 200:
            if fail:
                self.failures += 1
            else:
                self.ready_at[key_of(claim)] = now()

    def report(self, bound_at: dict[str, float]) -> dict[str, Any]:
        """Per bound pod: time from its claim's last ready report to its binding; pods bound before that."""
        claims = self.model.informers["ResourceClaim"].cache
        pods = self.model.informers["Pod"].cache
        after: list[float] = []
        before = 0
        for k, t in bound_at.items():
            pod = pods.get(k) or {}
            ns = k.split("/")[0]
            names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
            names.append(((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
            ready = [self.ready_at.get(f"{ns}/{n}") for n in names if n and f"{ns}/{n}" in claims]
            if not ready or any(r is None or r > t for r in ready):
                before += 1
                continue
            after.append((t - max(r for r in ready if r is not None)) * 1000)
        return {
            "allocations_seen": self.allocations,
            "failures_reported": self.failures,
            "pods_bound_before_ready": before,
            "ready_to_bound_ms": summary_ms(after),
        }
