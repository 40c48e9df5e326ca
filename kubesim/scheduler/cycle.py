"""The scheduler: informer events, the scheduling loop, one scheduling cycle (filter, prioritize, assume) and the bind."""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from typing import Any

import aiohttp
import orjson

from kubesim.scheduler.api import Api, Informer
from kubesim.scheduler.claims import ClaimController
from kubesim.scheduler.config import WATCHED, ClaimControllerConfig, SchedulerConfig, key_of, now, num_feasible_nodes_to_find, short_reason
from kubesim.scheduler.oracle import FitOracle, claim_allocated, pod_devices
from kubesim.scheduler.queue import QueuedPod, SchedulingQueue
from kubesim.scheduler.stats import Stats
from tracker.apiserver.requests import MERGE_PATCH
from tracker.timestamps import rfc3339


class KubeSchedulerModel:
    """kube-scheduler with one extender (filter, prioritize, bind; nodeCacheCapable) against an API server.

    With `extender_url` None, kube-scheduler with no extender at all (the "no DRA" ceiling): every sampled
    node passes, in-tree scores are 0 (a random pick among the sample, as selectHost among equal scores), and
    the model writes the Binding itself, as the DefaultBinder plugin does.
    """

    def __init__(
        self,
        api: Api,
        extender_url: str | None,
        cfg: SchedulerConfig | None = None,
        claims: ClaimControllerConfig | None = None,
    ) -> None:
        self.api = api
        self.extender_url = extender_url.rstrip("/") if extender_url is not None else None
        self.cfg = cfg or SchedulerConfig()
        self.rng = random.Random(self.cfg.seed)
        self.queue = SchedulingQueue(self.cfg)
        self.stats = Stats()
        self.claim_controller = ClaimController(api, claims) if claims is not None else None
        self.informers = {kind: Informer(api, kind, path, self._on_event) for kind, (path, _) in WATCHED.items()}
        self.oracle = FitOracle(self.informers)
        self.nodes: list[str] = []
        self.next_start = 0
        self.assumed: dict[str, str] = {}  # pod key -> node, until the informer sees it bound
        self.bound_at: dict[str, float] = {}
        self.bound_node: dict[str, str] = {}
        # Bound pods whose claim allocations the claim informer may not show yet: the Pod and ResourceClaim
        # watches are separate streams, so a binding can arrive before the allocation written ahead of it.
        self.allocation_unseen: set[str] = set()
        self.last_rejection: dict[str, str] = {}
        self.rejected_pods: set[str] = set()
        self.rejected_with_claims: set[str] = set()  # rejected while every claim of the pod existed
        self.tasks: list[asyncio.Task[None]] = []
        self.bind_tasks: set[asyncio.Task[None]] = set()
        self.session: aiohttp.ClientSession | None = None

    # -- events from the informers (eventhandlers.go)
    def _on_event(self, kind: str, typ: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if kind == "Pod":
            self._on_pod(typ, old, new)
            if self.claim_controller is not None:
                if typ == "DELETED":
                    self.claim_controller.on_pod_deleted(old or new)
                else:
                    self.claim_controller.on_pod(new)
            return
        if kind == "Node":
            name = (new or old or {}).get("metadata", {}).get("name")
            if typ == "ADDED" and name not in self.nodes:
                self.nodes.append(name)
            elif typ == "DELETED" and name in self.nodes:
                self.nodes.remove(name)
        if WATCHED[kind][1]:
            self.stats.requeue_events[f"{kind}/{typ}"] += 1
            self.queue.move_all(f"{kind}/{typ}")
        else:
            self.stats.ignored_events[f"{kind}/{typ}"] += 1

    def _on_pod(self, typ: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        pod = new or old
        assert pod is not None
        k = key_of(pod)
        assigned_new = bool(new and (new.get("spec") or {}).get("nodeName"))
        assigned_old = bool(old and (old.get("spec") or {}).get("nodeName"))
        mine = (pod.get("spec") or {}).get("schedulerName") == self.cfg.scheduler_name
        if typ == "DELETED":
            self.assumed.pop(k, None)
            self.queue.forget(k)
            if assigned_old:
                self.stats.requeue_events["Pod/AssignedPodDelete"] += 1
                self.queue.move_all("AssignedPodDelete")
            return
        if assigned_new:
            if not assigned_old:  # the binding arrived: the cache adds an assigned pod
                self.bound_at.setdefault(k, now())
                self.bound_node[k] = new["spec"]["nodeName"]  # type: ignore[index]  # assigned_new: the pod has a spec
                self.assumed.pop(k, None)
                if new is not None and pod_devices(new):
                    self.allocation_unseen.add(k)
                self.queue.forget(k)
                self.stats.requeue_events["Pod/AssignedPodAdd"] += 1
                self.queue.move_all("AssignedPodAdd")
            else:
                self.stats.requeue_events["Pod/AssignedPodUpdate"] += 1
                self.queue.move_all("AssignedPodUpdate")
            return
        if not mine or new is None:
            return
        if typ == "ADDED":
            self.queue.add(new)
        elif k not in self.assumed and (old or {}).get("metadata", {}).get("resourceVersion") != new["metadata"].get("resourceVersion"):
            self.queue.update(old or {}, new)

    # -- lifecycle
    async def start(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), read_bufsize=2**22)
        for inf in self.informers.values():
            self.tasks.append(asyncio.create_task(inf.run(), name=f"informer-{inf.kind}"))
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))
        self.tasks.append(asyncio.create_task(self._flush_backoff(), name="flush-backoff"))
        self.tasks.append(asyncio.create_task(self._flush_unschedulable(), name="flush-unschedulable"))
        if self.claim_controller is not None:
            self.tasks.append(asyncio.create_task(self.claim_controller.run(), name="claim-controller"))
        self.tasks.append(asyncio.create_task(self._loop(), name="scheduling-loop"))

    async def stop(self) -> None:
        for t in [*self.tasks, *self.bind_tasks]:
            t.cancel()
        await asyncio.gather(*self.tasks, *self.bind_tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    def served_kinds(self) -> dict[str, bool]:
        return {k: inf.served for k, inf in self.informers.items()}

    async def _flush_backoff(self) -> None:
        while True:  # aligned to the 1 s ordering window, as waitUntilAlignedWithOrderingWindow
            await asyncio.sleep(math.floor(now()) + 1 - now())
            self.queue.flush_backoff_completed()

    async def _flush_unschedulable(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.unschedulable_flush_interval)
            self.queue.flush_unschedulable_leftover()

    # -- the extender protocol
    async def _post(self, verb: str, body: Any) -> Any:
        assert self.session is not None
        async with self.session.post(
            f"{self.extender_url}/{verb}",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=self.cfg.http_timeout),
        ) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"failed {verb} with extender, code {resp.status}")
            return orjson.loads(raw)

    # -- the scheduling loop (scheduleOne)
    async def _loop(self) -> None:
        while True:
            p = await self.queue.pop()
            try:
                await self._schedule_one(p)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the loop die: a model bug is a scheduling error
                self.stats.scheduling_errors[f"model: {e!r}"[:200]] += 1
                self._failure(p, False, f"model error: {e!r}")

    async def _schedule_one(self, p: QueuedPod) -> None:
        pod = self.informers["Pod"].cache.get(p.key)
        if pod is None or (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            self.queue.forget(p.key)
            return
        if p.key in self.assumed:
            return
        self.stats.cycles += 1
        nodes = self.nodes
        n = len(nodes)
        if n == 0:
            self._failure(p, False, "no nodes available to schedule pods")
            return
        count = num_feasible_nodes_to_find(self.cfg.percentage_of_nodes_to_score, n)
        start = self.next_start
        sample = [nodes[(start + i) % n] for i in range(count)]
        self.next_start = (start + count) % n
        if self.extender_url is None:  # no extender: every node passes the in-tree filters, scores are all 0
            self._assume(p, pod, self.rng.choice(sample))
            return
        args = {"Pod": pod, "Nodes": None, "NodeNames": sample}
        t = now()
        try:
            result = await self._post("filter", args)
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError, ValueError) as e:
            self.stats.filter_ms.append((now() - t) * 1000)
            self.stats.filter_errors += 1
            reason = "timeout" if isinstance(e, asyncio.TimeoutError) else str(e)
            self.stats.scheduling_errors[short_reason(f"filter: {reason}")] += 1
            self._failure(p, False, f"filter: {reason}")
            return
        self.stats.filter_ms.append((now() - t) * 1000)
        if result.get("Error"):
            self.stats.scheduling_errors[short_reason(result["Error"])] += 1
            self._failure(p, False, result["Error"])
            return
        offered = set(sample)  # once, not per returned name: the model's own CPU is not the extender's
        feasible = [x for x in (result.get("NodeNames") or []) if x in offered]
        if not feasible:
            failed = {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}
            self._rejected(p, pod, n, failed)
            return
        if len(feasible) == 1:
            self.stats.single_node_cycles += 1
            host = feasible[0]
        else:
            host = await self._prioritize(pod, feasible)
        self._assume(p, pod, host)

    def _assume(self, p: QueuedPod, pod: dict[str, Any], host: str) -> None:
        """Assume the pod on `host` and start its binding cycle in a task of its own."""
        self.assumed[p.key] = host
        self.queue.done(p)
        task = asyncio.create_task(self._bind(p, pod, host))
        self.bind_tasks.add(task)
        task.add_done_callback(self.bind_tasks.discard)

    async def _prioritize(self, pod: dict[str, Any], feasible: list[str]) -> str:
        t = now()
        try:
            scores = await self._post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": feasible})
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError, ValueError):
            self.stats.prioritize_ms.append((now() - t) * 1000)
            self.stats.prioritize_errors += 1
            return feasible[0]  # no extender score: equal totals, Randomizer 0, the heap yields the first
        self.stats.prioritize_ms.append((now() - t) * 1000)
        total = {n: 0 for n in feasible}  # in-tree scores: 0 in the model
        for s in scores or []:
            if s.get("Host") in total:
                total[s["Host"]] += int(s.get("Score") or 0) * self.cfg.weight * 10
        best = max(total.values())
        return self.rng.choice([n for n in feasible if total[n] == best])

    def _rejected(self, p: QueuedPod, pod: dict[str, Any], n: int, failed: dict[str, str]) -> None:
        self.stats.rejections += 1
        reasons = Counter(failed.values())
        first = reasons.most_common(1)[0][0] if reasons else "no nodes passed the extender"
        self.stats.rejection_reasons[short_reason(first)] += 1
        self.last_rejection[p.key] = first
        self.rejected_pods.add(p.key)
        if self._claims_exist(pod):
            self.rejected_with_claims.add(p.key)
        if self.oracle.free(self._devices_not_yet_allocated()) >= pod_devices(pod):
            self.stats.rejections_of_pods_that_fit += 1
            self.stats.fit_rejection_reasons[short_reason(first)] += 1
        message = f"0/{n} nodes are available: " + ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
        self._failure(p, True, message)

    def _devices_not_yet_allocated(self) -> int:
        """Devices of pods in binding or bound whose claims the claim informer does not yet show allocated."""
        pods, claims = self.informers["Pod"].cache, self.informers["ResourceClaim"].cache
        for k in list(self.allocation_unseen):
            q = pods.get(k)
            if q is None or claim_allocated(claims, q):
                self.allocation_unseen.discard(k)
        return sum(
            pod_devices(q) for k in {*self.assumed, *self.allocation_unseen} if (q := pods.get(k)) and not claim_allocated(claims, q)
        )

    def _claims_exist(self, pod: dict[str, Any]) -> bool:
        ns = pod["metadata"]["namespace"]
        names = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        claims = self.informers["ResourceClaim"].cache
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = pc.get("resourceClaimName") or names.get(pc.get("name"))
            if not name or f"{ns}/{name}" not in claims:
                return False
        return True

    def _failure(self, p: QueuedPod, rejected: bool, message: str) -> None:
        """handleSchedulingFailure: requeue from the informer's copy (unless bound or gone), then the PodScheduled condition."""
        latest = self.informers["Pod"].cache.get(p.key)
        if latest is None or (latest.get("spec") or {}).get("nodeName") or latest["metadata"].get("uid") != p.uid:
            self.queue.forget(p.key)
            return
        p.pod = latest
        self.queue.add_unschedulable_if_not_present(p, rejected)
        reason = "Unschedulable" if rejected else "SchedulerError"
        cond = next((c for c in (latest.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if cond is None or cond.get("status") != "False" or cond.get("reason") != reason or cond.get("message") != message[:1024]:
            task = asyncio.create_task(self._patch_condition(latest, reason, message[:1024]))
            self.bind_tasks.add(task)
            task.add_done_callback(self.bind_tasks.discard)

    async def _patch_condition(self, pod: dict[str, Any], reason: str, message: str) -> None:
        meta = pod["metadata"]
        conds = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": rfc3339(),
            }
        )
        try:
            await self.api.request(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"status": {"conditions": conds}},
                MERGE_PATCH,
            )
            self.stats.status_patches += 1
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass

    async def _bind(self, p: QueuedPod, pod: dict[str, Any], host: str) -> None:
        """The binding cycle: /bind with httpTimeout; on failure forget, move all unschedulable pods, back off."""
        meta = pod["metadata"]
        self.stats.binds += 1
        t = now()
        error = ""
        try:
            if self.extender_url is None:
                error = await self._default_bind(meta, host)
            else:
                result = await self._post(
                    "bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": host}
                )
                error = (result or {}).get("Error") or ""
        except TimeoutError:
            self.stats.bind_timeouts += 1
            error = f"bind: timeout after {self.cfg.http_timeout} s"
        except (aiohttp.ClientError, OSError, RuntimeError, ValueError) as e:
            error = f"bind: {e}"
        self.stats.bind_ms.append((now() - t) * 1000)
        if not error:
            self.stats.binds_ok += 1
            return
        self.stats.failed_binds += 1
        self.stats.bind_errors[short_reason(error)] += 1
        if self.assumed.get(p.key) == host:
            del self.assumed[p.key]
        self.queue.move_all("AssignedPodDelete")
        self._failure(p, False, error)

    async def _default_bind(self, meta: dict[str, Any], host: str) -> str:
        """The DefaultBinder plugin: POST the pod's Binding; an error message, or "" once bound."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": host},
        }
        async with asyncio.timeout(self.cfg.http_timeout):
            status, body = await self.api.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", binding)
        return "" if status in (200, 201) else f"binding: HTTP {status}: {str(body)[:200]}"
