"""A model of kube-scheduler 1.36 as an extender client, to measure an extender the way production calls it.

Why: a driver that calls /filter -> /prioritize -> /bind and waits for each
bind (bench/bench_scheduling.py, "the extender alone") hides what happens
behind the real scheduler: its next /filter arrives before the previous
pod's /bind, a failed bind costs the pod a 1-10 s backoff, and a pod the
extender rejected waits for an event kube-scheduler considers relevant
(docs/design.md#how-kube-scheduler-calls-an-extender). Modelled on `pkg/scheduler/schedule_one.go`,
`extender.go`, `backend/queue/{scheduling_queue,backoff_queue,active_queue}.go`,
`framework/types.go` (UnrollWildCardResource) and `eventhandlers.go` of 1.36:

- one scheduling loop: pop from activeQ (priority, then time added); when
  activeQ is empty, pop the head of the backoffQ of rejected pods even if its
  backoff is not over (SchedulerPopFromBackoffQ, on by default; not the
  queue of pods that failed with an error);
- node sampling: numFeasibleNodesToFind (adaptive percentageOfNodesToScore
  50 - nodes/125 %, at least 5 %, at least 100 nodes, or a configured
  percentage) from a rotating nextStartNodeIndex; in-tree filters pass every
  node and in-tree scores are 0 (not modelled);
- POST /filter (nodeCacheCapable: ExtenderArgs {Pod, Nodes: null,
  NodeNames}); POST /prioritize unless one node is left (errors ignored:
  then the first feasible node wins), score x weight x 10, random pick among
  the top; assume; /bind (ExtenderBindingArgs) in a concurrent task per pod;
  httpTimeout (default 5 s) on every verb;
- failures: an extender Error, a transport error or a timeout is a
  scheduling error (error backoff queue); a pod the extender rejected on
  every node is unschedulable with plugin "Extender" (the PodScheduled=False
  condition is written, as the scheduler does); a failed bind forgets the
  assumption, moves every unschedulable pod (AssignedPodDelete) and sends
  the pod to the error backoff queue. Backoff 1 s doubling to 10 s, expiry
  aligned to 1 s windows, flushed every second;
- requeue of "Extender"-rejected pods (queueing hints on, the Extender's
  default hint: Queue) on Pod, Node, PV, PVC, CSINode, CSIDriver,
  CSIStorageCapacity, StorageClass, ResourceClaim and DeviceClass events
  (watched from the API server; kinds it does not serve are skipped), on any
  such event during the pod's own cycle, on the pod's own update, or by the
  5-minute flush (checked every 30 s) -- never on ResourceSlice or
  DeviceTaintRule events;
- a resourceclaim-controller stand-in: claims from templates after a delay,
  through a token bucket (kube-controller-manager's client: 20 qps, burst
  30; the default here is faster, see ClaimControllerConfig), then the pod's
  status.resourceClaimStatuses.

Library: `run_workload(Workload(...), extender_cmd=[...])` starts the fake API
server and the extender and returns the measurements (tests/e2e use it);
`KubeSchedulerModel` is the scheduler alone, against any API server URL and
extender URL. CLI:

    .venv/bin/python -m bench.kube_scheduler_model [--workloads small,100x10,...]
        [--extender-cmd 'dra-extender serve --kubeconfig {kubeconfig} --listen {listen}']
        [--no-reference] [--http-timeout 5] [--percentage-of-nodes-to-score N]
        [--claim-delay 0.5] [--claim-qps 100] [--claim-burst 200] [--name NAME] [--out DIR]
    .venv/bin/python -m bench.kube_scheduler_model noop-extender --kubeconfig K --listen HOST:PORT
    .venv/bin/python -m bench.kube_scheduler_model render NAME   # the markdown again from NAME.json

Results: bench/results/<name>.json and .md (default name kube-scheduler-model).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import math
import os
import random
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from fastapi import FastAPI, Request, Response

from kubesim.measure import Cpu, machine, pct
from kubesim.objects import GPU_GI, PARTITIONS_GI, device_class, node_slice, partitioned_slices
from kubesim.processes import ROOT, free_port, start_fake_api, start_server, stop_process
from tracker.timestamps import rfc3339

RESULTS = ROOT / "bench" / "results"

NAMESPACE = "perf"
DRIVER = "dra.example.com"
CLASS = "devices"
TEMPLATE = "one-device"
EXTENDED_RESOURCE = "example.com/device"  # the DeviceClass's extendedResourceName in extended-resource workloads
SCHEDULER_NAME = "dra-scheduler"
EXTENDER = "Extender"  # the plugin name kube-scheduler records for extender rejections

# Collections the scheduler watches: name -> (list path, requeues "Extender"-rejected pods).
WATCHED: dict[str, tuple[str, bool]] = {
    "Pod": ("/api/v1/pods", True),
    "Node": ("/api/v1/nodes", True),
    "PersistentVolume": ("/api/v1/persistentvolumes", True),
    "PersistentVolumeClaim": ("/api/v1/persistentvolumeclaims", True),
    "StorageClass": ("/apis/storage.k8s.io/v1/storageclasses", True),
    "CSINode": ("/apis/storage.k8s.io/v1/csinodes", True),
    "CSIDriver": ("/apis/storage.k8s.io/v1/csidrivers", True),
    "CSIStorageCapacity": ("/apis/storage.k8s.io/v1/csistoragecapacities", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1/resourceclaims", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", True),
    # Watched for the fit oracle only: kube-scheduler does not requeue extender-rejected pods on these.
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", False),
    "DeviceTaintRule": ("/apis/resource.k8s.io/v1beta2/devicetaintrules", False),
    "DeviceTaintRule.dra-extender": ("/apis/resource.dra-extender.io/v1alpha1/devicetaintrules", False),
}


def now() -> float:
    return time.monotonic()


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")


def short_reason(message: str) -> str:
    """A rejection or bind error with names and numbers blanked, to count reasons."""
    s = re.sub(r"\bpod-\d+-[\w-]+-\w{5}\b", "<claim>", message)
    s = re.sub(r"\bpod-\d+\b|\bperf-node-\d+\b", "<name>", s)
    return re.sub(r"\d+", "N", s)[:200]


# ---------------------------------------------------------------------- configuration


@dataclass
class SchedulerConfig:
    """The KubeSchedulerConfiguration knobs the model honours (defaults as in 1.36)."""

    http_timeout: float = 5.0
    weight: int = 1
    percentage_of_nodes_to_score: int | None = None  # None or 0: adaptive
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    max_in_unschedulable: float = 300.0
    unschedulable_flush_interval: float = 30.0
    pop_from_backoff: bool = True
    scheduler_name: str = SCHEDULER_NAME
    seed: int | None = None


@dataclass
class ClaimControllerConfig:
    """The resourceclaim-controller stand-in: seconds after a pod appears, and its API client's rate limit.

    Two writes per pod (the claim, the pod's status). kube-controller-manager's
    default client limit is 20 qps, burst 30 (--kube-api-qps): 10 pods/s at
    most, below what the measured in-tree runs reached (43.7 pods/s needs
    >= 88 writes/s), so those clusters ran it faster. The default here (100
    qps, burst 200) keeps the stand-in from capping a run below the no-op
    reference; `--claim-qps 20 --claim-burst 30` models a default kcm.
    """

    delay: float = 0.5
    qps: float = 100.0
    burst: int = 200
    workers: int = 10


def num_feasible_nodes_to_find(percentage: int | None, num_all: int) -> int:
    """schedule_one.go numFeasibleNodesToFind (minFeasibleNodesToFind 100, minimum percentage 5)."""
    if num_all < 100:
        return num_all
    p = percentage or 0
    if p == 0:
        p = max(5, 50 - num_all // 125)
    return max(100, num_all * p // 100)


# ---------------------------------------------------------------------- the API server client


class Api:
    """A thin aiohttp client for the (fake) API server: JSON in and out, list pages, watch lines."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        self.session = aiohttp.ClientSession(
            headers=self.headers,
            read_bufsize=2**22,
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.session is not None
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        assert self.session is not None
        data = orjson.dumps(body) if body is not None else None
        async with self.session.request(method, self.url + path, data=data, headers={"Content-Type": content_type}) as resp:
            raw = await resp.read()
            return resp.status, (orjson.loads(raw) if raw else None)

    async def list(self, path: str) -> tuple[list[dict[str, Any]], str] | None:
        """Every object (paged) and the list's resourceVersion; None when the server does not serve it."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            status, body = await self.request("GET", f"{path}?limit=500" + (f"&continue={token}" if token else ""))
            if status == 404:
                return None
            if status != 200:
                raise RuntimeError(f"list {path}: HTTP {status}: {str(body)[:300]}")
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items, body["metadata"]["resourceVersion"]

    async def watch(self, path: str, rv: str):
        assert self.session is not None
        url = f"{self.url}{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: HTTP {resp.status}")
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield orjson.loads(line)


class Informer:
    """List, then watch from the list's resourceVersion; re-list on 410 or a broken watch. Calls handler(type, old, new)."""

    def __init__(self, api: Api, kind: str, path: str, handler: Callable[[str, str, dict | None, dict | None], None]) -> None:
        self.api, self.kind, self.path, self.handler = api, kind, path, handler
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.served = True

    async def run(self) -> None:
        while True:
            try:
                listed = await self.api.list(self.path)
                if listed is None:
                    self.served = False
                    self.synced.set()
                    return
                items, rv = listed
                fresh = {key_of(o): o for o in items}
                for k, old in list(self.cache.items()):
                    if k not in fresh:
                        del self.cache[k]
                        self.handler(self.kind, "DELETED", old, None)
                for k, obj in fresh.items():
                    old = self.cache.get(k)
                    self.cache[k] = obj
                    if old is None or old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                        self.handler(self.kind, "MODIFIED" if old else "ADDED", old, obj)
                self.synced.set()
                async for ev in self.api.watch(self.path, rv):
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    if typ == "ERROR":
                        break  # 410 Gone or another error: re-list
                    rv = obj["metadata"]["resourceVersion"]
                    k = key_of(obj)
                    old = self.cache.get(k)
                    if typ == "DELETED":
                        self.cache.pop(k, None)
                        self.handler(self.kind, typ, old, None)
                    else:
                        self.cache[k] = obj
                        self.handler(self.kind, "MODIFIED" if old else "ADDED", old, obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broken watch: re-list after a pause, as client-go does
                print(json.dumps({"informer": self.kind, "error": repr(e)[:200]}), file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)


# ---------------------------------------------------------------------- the scheduling queue


@dataclass(eq=False)
class QueuedPod:
    key: str
    uid: str
    pod: dict[str, Any]
    priority: int
    timestamp: float  # when (re)added: activeQ order and backoff start
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    plugins: frozenset[str] = frozenset()  # UnschedulablePlugins of the last attempt
    backoff_expiration: float | None = None
    popped_seq: int = 0  # the queue's event counter when popped (events during the cycle)
    updated_in_flight: bool = False
    gen: int = 0  # bumped on every move: heap entries of older generations are stale


class SchedulingQueue:
    """activeQ, backoffQ (rejected pods), error backoffQ, unschedulable pods, in-flight pods (scheduling_queue.go)."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.active: list[tuple] = []
        self.backoff: list[tuple] = []
        self.error_backoff: list[tuple] = []
        self.unschedulable: dict[str, QueuedPod] = {}
        self.where: dict[str, str] = {}  # key -> active | backoff | error_backoff | unschedulable | in_flight
        self.pods: dict[str, QueuedPod] = {}
        self.event_seq = 0
        self.wake = asyncio.Event()
        self._tie = itertools.count()
        self.moves: Counter[str] = Counter()

    # -- backoff (backoff_queue.go)
    def _align(self, t: float) -> float:
        return math.floor(t) if self.cfg.pop_from_backoff else t

    def backoff_time(self, p: QueuedPod) -> float:
        count = p.consecutive_errors if p.consecutive_errors > 0 else p.unschedulable_count
        if count == 0:
            return -math.inf
        if p.backoff_expiration is None:
            d = self.cfg.initial_backoff * 2 ** (count - 1)
            p.backoff_expiration = self._align(p.timestamp + min(d, self.cfg.max_backoff))
        return p.backoff_expiration

    def backing_off(self, p: QueuedPod) -> bool:
        return not self.backoff_time(p) < self._align(now())

    # -- moves
    def _to_active(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.unschedulable.pop(p.key, None)
        self.where[p.key] = "active"
        heapq.heappush(self.active, (-p.priority, p.timestamp, next(self._tie), p.gen, p))
        self.moves[f"active:{event}"] += 1
        self.wake.set()

    def _to_backoff(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.unschedulable.pop(p.key, None)
        if p.plugins:
            self.where[p.key] = "backoff"
            heapq.heappush(self.backoff, (self.backoff_time(p), -p.priority, p.timestamp, next(self._tie), p.gen, p))
            self.wake.set()  # PopFromBackoffQ: a waiting Pop takes it
        else:
            self.where[p.key] = "error_backoff"
            heapq.heappush(self.error_backoff, (self.backoff_time(p), next(self._tie), p.gen, p))
        self.moves[f"backoff:{event}"] += 1

    def _to_unschedulable(self, p: QueuedPod, event: str) -> None:
        p.gen += 1
        self.where[p.key] = "unschedulable"
        self.unschedulable[p.key] = p
        self.moves[f"unschedulable:{event}"] += 1

    def _requeue_after_backoff(self, p: QueuedPod, event: str) -> None:
        if self.backing_off(p):
            self._to_backoff(p, event)
        else:
            self._to_active(p, event)

    @staticmethod
    def _valid(entry: tuple, where: dict[str, str], name: str) -> bool:
        p: QueuedPod = entry[-1]
        return entry[-2] == p.gen and where.get(p.key) == name

    # -- the API of PriorityQueue
    def add(self, pod: dict[str, Any]) -> None:
        k = key_of(pod)
        if k in self.pods:
            return
        p = QueuedPod(k, pod["metadata"].get("uid", ""), pod, int((pod.get("spec") or {}).get("priority") or 0), now())
        self.pods[k] = p
        self._to_active(p, "UnscheduledPodAdd")

    async def pop(self) -> QueuedPod:
        while True:
            while self.active:
                entry = heapq.heappop(self.active)
                if self._valid(entry, self.where, "active"):
                    return self._in_flight(entry[-1])
            if self.cfg.pop_from_backoff:
                while self.backoff:
                    entry = heapq.heappop(self.backoff)
                    if self._valid(entry, self.where, "backoff"):
                        self.moves["active:PopFromBackoffQ"] += 1
                        return self._in_flight(entry[-1])
            self.wake.clear()
            await self.wake.wait()

    def _in_flight(self, p: QueuedPod) -> QueuedPod:
        p.gen += 1
        p.attempts += 1
        p.backoff_expiration = None
        p.popped_seq = self.event_seq
        p.updated_in_flight = False
        self.where[p.key] = "in_flight"
        return p

    def done(self, p: QueuedPod) -> None:
        """The pod left the scheduling cycle for binding (bindingCycle calls Done after WaitOnPermit)."""
        if self.where.get(p.key) == "in_flight":
            self.where[p.key] = "binding"

    def forget(self, key: str) -> None:
        """A bound or deleted pod leaves every queue."""
        p = self.pods.pop(key, None)
        if p is not None:
            p.gen += 1
        self.where.pop(key, None)
        self.unschedulable.pop(key, None)

    def add_unschedulable_if_not_present(self, p: QueuedPod, rejected: bool) -> str:
        """AddUnschedulableIfNotPresent with queueing hints: where the pod goes after a failed attempt."""
        if p.key not in self.pods:
            return "gone"
        if rejected:
            p.unschedulable_count += 1
            p.consecutive_errors = 0
            p.plugins = frozenset({EXTENDER})
        else:
            p.consecutive_errors += 1
            p.plugins = frozenset()
        p.timestamp = now()
        p.backoff_expiration = None
        if not p.plugins or self.event_seq > p.popped_seq or p.updated_in_flight:
            self._requeue_after_backoff(p, "ScheduleAttemptFailure")
        else:
            self._to_unschedulable(p, "ScheduleAttemptFailure")
        return self.where[p.key]

    def move_all(self, event: str) -> None:
        """MoveAllToActiveOrBackoffQueue for an event the "Extender" registers (default hint: Queue)."""
        self.event_seq += 1  # recorded for in-flight pods
        for p in list(self.unschedulable.values()):
            self._requeue_after_backoff(p, event)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """An unscheduled pod changed (its own update is a Pod event: it requeues the pod itself)."""
        k = key_of(new)
        p = self.pods.get(k)
        if p is None:
            self.add(new)
            return
        p.pod = new
        where = self.where.get(k)
        if where == "in_flight":
            p.updated_in_flight = True
        elif where == "unschedulable":
            self._requeue_after_backoff(p, "UnscheduledPodUpdate")

    def flush_backoff_completed(self) -> None:
        for heap, name in ((self.backoff, "backoff"), (self.error_backoff, "error_backoff")):
            while heap:
                entry = heap[0]
                if not self._valid(entry, self.where, name):
                    heapq.heappop(heap)
                    continue
                if self.backing_off(entry[-1]):
                    break
                heapq.heappop(heap)
                self._to_active(entry[-1], "BackoffComplete")

    def flush_unschedulable_leftover(self) -> None:
        t = now()
        for p in list(self.unschedulable.values()):
            if t - p.timestamp > self.cfg.max_in_unschedulable:
                self._requeue_after_backoff(p, "UnschedulableTimeout")

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.where.values()))


# ---------------------------------------------------------------------- the fit oracle


class FitOracle:
    """Whether a rejected pod would have fitted somewhere: free, untainted devices beyond those of pods in binding.

    The workloads request one device per pod claim and tolerate no taint; the
    oracle assumes exactly that (it is a yardstick, not an allocator).
    """

    def __init__(self, informers: dict[str, Informer]) -> None:
        self.inf = informers

    def devices(self) -> set[tuple[str, str, str]]:
        rules = [r for k in ("DeviceTaintRule", "DeviceTaintRule.dra-extender") if k in self.inf for r in self.inf[k].cache.values()]
        out = set()
        for s in self.inf["ResourceSlice"].cache.values():
            spec = s.get("spec") or {}
            driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
            for d in spec.get("devices") or []:
                if d.get("consumesCounters") or d.get("allowMultipleAllocations"):
                    continue  # not a whole device: the yardstick does not count partitions or shares
                if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in d.get("taints") or []):
                    continue
                if any(self._selects(r, driver, pool, d.get("name")) for r in rules):
                    continue
                out.add((driver, pool, d.get("name")))
        return out

    @staticmethod
    def _selects(rule: dict[str, Any], driver: str, pool: str, device: str) -> bool:
        spec = rule.get("spec") or {}
        if (spec.get("taint") or {}).get("effect") not in ("NoSchedule", "NoExecute"):
            return False
        sel = spec.get("deviceSelector")
        if sel is None:
            return False
        return all(sel.get(k) in (None, v) for k, v in (("driver", driver), ("pool", pool), ("device", device)))

    def allocated(self) -> Counter[tuple[str, str, str]]:
        out: Counter[tuple[str, str, str]] = Counter()
        for c in self.inf["ResourceClaim"].cache.values():
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                out[(r.get("driver"), r.get("pool"), r.get("device"))] += 1
        return out

    def free(self, in_binding: int) -> int:
        devices = self.devices()
        taken = sum(1 for d in self.allocated() if d in devices)
        return len(devices) - taken - in_binding


def pod_devices(pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    extended = sum(int(((c.get("resources") or {}).get("limits") or {}).get(EXTENDED_RESOURCE, 0)) for c in spec.get("containers") or [])
    return len(spec.get("resourceClaims") or []) + extended


def claim_allocated(claims: dict[str, dict[str, Any]], pod: dict[str, Any]) -> bool:
    ns = pod["metadata"]["namespace"]
    names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
    names += [c["resourceClaimName"] for c in (pod.get("spec") or {}).get("resourceClaims") or [] if c.get("resourceClaimName")]
    names.append(
        ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    )  # DRA-backed extended resources
    names = [n for n in names if n]
    return bool(names) and all(((claims.get(f"{ns}/{n}") or {}).get("status") or {}).get("allocation") for n in names if n)


# ---------------------------------------------------------------------- statistics


@dataclass
class Stats:
    cycles: int = 0
    filter_ms: list[float] = field(default_factory=list)
    prioritize_ms: list[float] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)
    filter_errors: int = 0
    prioritize_errors: int = 0
    binds: int = 0
    binds_ok: int = 0
    failed_binds: int = 0
    bind_timeouts: int = 0
    bind_errors: Counter[str] = field(default_factory=Counter)
    scheduling_errors: Counter[str] = field(default_factory=Counter)
    rejections: int = 0
    rejections_of_pods_that_fit: int = 0
    rejection_reasons: Counter[str] = field(default_factory=Counter)
    fit_rejection_reasons: Counter[str] = field(default_factory=Counter)
    single_node_cycles: int = 0
    status_patches: int = 0
    requeue_events: Counter[str] = field(default_factory=Counter)
    ignored_events: Counter[str] = field(default_factory=Counter)


# ---------------------------------------------------------------------- the resourceclaim-controller stand-in


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
            "application/merge-patch+json",
        )
        if status == 404:
            return
        if status != 200:
            raise RuntimeError(f"pod status {k}: HTTP {status}: {str(body)[:200]}")


# ---------------------------------------------------------------------- the scheduler


class KubeSchedulerModel:
    """kube-scheduler with one extender (filter, prioritize, bind; nodeCacheCapable) against an API server."""

    def __init__(
        self,
        api: Api,
        extender_url: str,
        cfg: SchedulerConfig | None = None,
        claims: ClaimControllerConfig | None = None,
    ) -> None:
        self.api = api
        self.extender_url = extender_url.rstrip("/")
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
        self.last_rejection: dict[str, str] = {}
        self.rejected_pods: set[str] = set()
        self.rejected_with_claims: set[str] = set()  # rejected while every claim of the pod existed
        self.tasks: list[asyncio.Task] = []
        self.bind_tasks: set[asyncio.Task] = set()
        self.session: aiohttp.ClientSession | None = None

    # -- events from the informers (eventhandlers.go)
    def _on_event(self, kind: str, typ: str, old: dict | None, new: dict | None) -> None:
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

    def _on_pod(self, typ: str, old: dict | None, new: dict | None) -> None:
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
                self.bound_node[k] = new["spec"]["nodeName"]  # type: ignore[index]
                self.assumed.pop(k, None)
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
        feasible = [x for x in (result.get("NodeNames") or []) if x in set(sample)]
        if not feasible:
            failed = {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}
            self._rejected(p, pod, n, failed)
            return
        if len(feasible) == 1:
            self.stats.single_node_cycles += 1
            host = feasible[0]
        else:
            host = await self._prioritize(pod, feasible)
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
        in_binding = sum(
            pod_devices(self.informers["Pod"].cache.get(k) or {})
            for k in self.assumed
            if not claim_allocated(self.informers["ResourceClaim"].cache, self.informers["Pod"].cache.get(k) or {})
        )
        if self.oracle.free(in_binding) >= pod_devices(pod):
            self.stats.rejections_of_pods_that_fit += 1
            self.stats.fit_rejection_reasons[short_reason(first)] += 1
        message = f"0/{n} nodes are available: " + ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
        self._failure(p, True, message)

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
                "application/merge-patch+json",
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


# ---------------------------------------------------------------------- workloads


@dataclass
class Workload:
    """One run: a cluster of nodes x devices (one ResourceClaimTemplate, one device per pod), pods at a rate."""

    name: str
    nodes: int
    devices_per_node: int
    pods: int
    rate: float | None = None  # pods/s; None: all at once
    tainted_nodes: int = 0  # NoSchedule DeviceTaintRule over the devices of the first N nodes
    taint_removal: bool = False  # fill every untainted device, one more pod, then delete the rules
    timeout: float = 600.0
    settle: float = 3.0  # after the expected pods are bound: time to see any extra bind
    # "plain": devices_per_node whole devices; "partitions": per device a 40Gi GPU with partitions of
    # 10, 10, 10, 10, 20, 20, 40 Gi drawing on its shared counters (4 pods fit per GPU); "shares":
    # per device one 40Gi device shared by claims asking 10Gi each (4 pods fit per device).
    kind: str = "plain"
    extended_resources: bool = False  # pods ask for `example.com/device: 1` in their limits instead of a claim
    binding_delay: float | None = None  # devices have binding conditions; a fake driver sets them this long after allocation
    binding_failure_every: int = 0  # every Nth allocation the driver reports the failure condition instead (0: never)
    # Steady state (scheduler_perf's SteadyStateClusterResourceClaimTemplate): this share of the
    # devices is held by bound pods before the run; each pod created replaces the oldest bound pod,
    # deleted just before, whose claim the claim controller stand-in deallocates and deletes.
    steady_fill: float = 0.0
    # Steady state: pods scheduled (and churned) before the measured ones, as upstream's init pods go
    # through the scheduler: the extender has verdicts for the claim shape when the measurement starts.
    warm_up: int = 0

    @property
    def capacity(self) -> int:
        per = 1 if self.kind == "plain" else 4
        return (self.nodes - self.tainted_nodes) * self.devices_per_node * per


WORKLOADS: dict[str, Workload] = {
    "small": Workload("small", 20, 5, 100, timeout=120),
    "100x10": Workload("100x10", 100, 10, 500, timeout=600),
    "500x10": Workload("500x10", 500, 10, 2500, timeout=1500),
    "100x10-20ps": Workload("100x10-20ps", 100, 10, 500, rate=20, timeout=600),
    "500x10-20ps": Workload("500x10-20ps", 500, 10, 2500, rate=20, timeout=1500),
    "competition": Workload("competition", 10, 10, 1000, timeout=600, settle=5),
    # timeout 360 s: long enough to see the 5-minute flush of unschedulable pods (checked every 30 s).
    "taint-removal": Workload("taint-removal", 10, 2, 19, tainted_nodes=1, taint_removal=True, timeout=360),
    # The issue-22 scale: 5,000 nodes x 8 devices, 2,500 pods created at once.
    "5000x8": Workload("5000x8", 5000, 8, 2500, timeout=1500),
    # Upstream's SteadyStateClusterResourceClaimTemplate at the 99.5 % full and 20 pods/s.
    "steady-100x10": Workload("steady-100x10", 100, 10, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=300),
    "steady-1000x8": Workload("steady-1000x8", 1000, 8, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=300),
    "steady-5000x8": Workload("steady-5000x8", 5000, 8, 1200, rate=20, steady_fill=0.995, warm_up=100, timeout=600),
}
DEFAULT_WORKLOADS = ["small", "100x10", "500x10", "100x10-20ps", "500x10-20ps", "competition", "taint-removal"]


def node_name(i: int) -> str:
    return f"perf-node-{i}"


def _node_slices(w: Workload, node: str) -> list[dict[str, Any]]:
    if w.kind == "plain":
        binding = {"bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]} if w.binding_delay is not None else {}
        return [node_slice(node, DRIVER, [{"name": f"instance-{j}", **binding} for j in range(w.devices_per_node)])]
    if w.kind == "shares":
        shared = [
            {"name": f"shared-{j}", "allowMultipleAllocations": True, "capacity": {"memory": {"value": f"{GPU_GI}Gi"}}}
            for j in range(w.devices_per_node)
        ]
        return [node_slice(node, DRIVER, shared)]
    return partitioned_slices(node, DRIVER, w.devices_per_node)


def cluster_objects(w: Workload) -> list[dict[str, Any]]:
    request: dict[str, Any] = {"deviceClassName": CLASS}
    if w.kind == "shares":
        request["capacity"] = {"requests": {"memory": f"{GPU_GI // 4}Gi"}}
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        device_class(CLASS, DRIVER)
        | ({"spec": {**device_class(CLASS, DRIVER)["spec"], "extendedResourceName": EXTENDED_RESOURCE}} if w.extended_resources else {}),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}}},
        },
    ]
    for i in range(w.nodes):
        node = node_name(i)
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
            }
        )
        objs += _node_slices(w, node)
    objs += taint_rules(w)
    objs += steady_prefill(w)
    return objs


DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def steady_prefill(w: Workload) -> list[dict[str, Any]]:
    """Bound pods holding `steady_fill` of the devices, each with its allocated, reserved claim (the init pods)."""
    if not w.steady_fill or w.kind != "plain":
        return []
    objs: list[dict[str, Any]] = []
    for i in range(int(w.capacity * w.steady_fill)):
        node, device = node_name(i // w.devices_per_node), f"instance-{i % w.devices_per_node}"
        name, uid, claim = f"init-{i}", f"init-uid-{i}", f"init-{i}-dev-{i:05x}"
        pod = pod_object(0)
        pod["metadata"] = {"name": name, "namespace": NAMESPACE, "uid": uid}
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "resourceClaimStatuses": [{"name": "dev", "resourceClaimName": claim}]}
        objs.append(pod)
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim,
                    "namespace": NAMESPACE,
                    "finalizers": [DELETE_PROTECTION],
                    "annotations": {"resource.kubernetes.io/pod-claim-name": "dev"},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}
                    ],
                },
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": CLASS}}]}},
                "status": {
                    "allocation": {
                        "devices": {"results": [{"request": "dev", "driver": DRIVER, "pool": node, "device": device}]},
                        "nodeSelector": {
                            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                        },
                    },
                    "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
                },
            }
        )
    return objs


def taint_rules(w: Workload) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"maintenance-{node_name(i)}"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": node_name(i)},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
            },
        }
        for i in range(w.tainted_nodes)
    ]


def pod_object(i: int, extended: bool = False) -> dict[str, Any]:
    if extended:  # a DRA-backed extended resource: the claim is made by the scheduler at bind time
        container = {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {EXTENDED_RESOURCE: "1"}}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
            "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container]},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": TEMPLATE}],
        },
    }


# ---------------------------------------------------------------------- one run


def default_extender_cmd() -> list[str]:
    return [sys.executable, "-m", "extender.cli", "serve", "--kubeconfig", "{kubeconfig}", "--listen", "{listen}"]


def noop_extender_cmd() -> list[str]:
    return [sys.executable, "-m", "kubesim.scheduler.run", "noop-extender", "--kubeconfig", "{kubeconfig}", "--listen", "{listen}"]


def summary_ms(values: list[float]) -> dict[str, Any]:
    return {
        "p50": round(pct(values, 0.5), 1),
        "p99": round(pct(values, 0.99), 1),
        "max": round(max(values), 1) if values else 0.0,
        "n": len(values),
    }


async def _create_pods(
    api: Api, first: int, count: int, rate: float | None, created_at: dict[str, float], errors: Counter[str], extended: bool = False
) -> None:
    """POST pods: `rate` per second, or all at once (8 requests in flight, as a kubectl apply of many objects)."""
    sem = asyncio.Semaphore(8)
    start = now()

    async def one(i: int) -> None:
        async with sem:
            status, body = await api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(i, extended))
            if status != 201:
                errors[f"HTTP {status}: {str(body)[:100]}"] += 1
                return
            created_at[f"{NAMESPACE}/pod-{i}"] = now()

    tasks = []
    for n, i in enumerate(range(first, first + count)):
        if rate:
            await asyncio.sleep(max(0.0, start + n / rate - now()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


async def _steady_churn(
    api: Api, w: Workload, model: KubeSchedulerModel, created_at: dict[str, float], errors: Counter[str], deleted: list[int]
) -> None:
    """At `w.rate`: delete the oldest bound pod, then create a new one (the number of pods stays the same)."""
    victims = [f"init-{i}" for i in range(int(w.capacity * w.steady_fill))]
    taken = 0
    seen_bound = 0
    warm_names = {f"{NAMESPACE}/pod-{n}" for n in range(w.pods, w.pods + w.warm_up)}
    warm_at: dict[str, float] = {}
    start = now()
    # The warm-up pods first (numbered after the measured ones, not in created_at), then the measured pods.
    order = [*range(w.pods, w.pods + w.warm_up), *range(w.pods)]
    for i, n in enumerate(order):
        if i == w.warm_up and w.warm_up:  # wait for the warm-up pods' binds, then start the clock again
            deadline = now() + 120
            while now() < deadline and not warm_names <= set(model.bound_at):
                await asyncio.sleep(0.1)
            start = now() - i / (w.rate or 20.0)
        await asyncio.sleep(max(0.0, start + i / (w.rate or 20.0) - now()))
        bound = list(model.bound_at)
        # the init pods are victims already; measured and warm-up pods become victims once bound
        victims += [k.partition("/")[2] for k in bound[seen_bound:] if k in created_at or k in warm_names]
        seen_bound = len(bound)
        if taken < len(victims):
            status, body = await api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{victims[taken]}")
            taken += 1
            if status in (200, 202):
                deleted[0] += 1
            else:
                errors[f"delete HTTP {status}: {str(body)[:100]}"] += 1
        status, body = await api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(n))
        if status != 201:
            errors[f"HTTP {status}: {str(body)[:100]}"] += 1
            continue
        (warm_at if n >= w.pods else created_at)[f"{NAMESPACE}/pod-{n}"] = now()


async def _drive(
    w: Workload, api_url: str, ext_url: str, cfg: SchedulerConfig, claims: ClaimControllerConfig, progress: float, label: str, is_noop: bool
) -> dict[str, Any]:
    async with Api(api_url) as api:
        model = KubeSchedulerModel(api, ext_url, cfg, claims)
        await model.start()
        created_at: dict[str, float] = {}
        create_errors: Counter[str] = Counter()
        t0 = now()
        out: dict[str, Any] = {}
        n_pods = w.pods if not w.taint_removal else w.capacity
        expected = n_pods if is_noop or w.steady_fill else min(n_pods, w.capacity)
        deleted = [0]
        if w.steady_fill:
            creator = asyncio.create_task(_steady_churn(api, w, model, created_at, create_errors, deleted))
        else:
            creator = asyncio.create_task(_create_pods(api, 0, n_pods, w.rate, created_at, create_errors, w.extended_resources))
        driver = FakeDriver(api, model, w) if w.binding_delay is not None else None
        driver_task = asyncio.create_task(driver.run()) if driver is not None else None
        last_print = now()
        reached_at: float | None = None

        def line(phase: str) -> None:
            s = model.stats
            print(
                json.dumps(
                    {
                        "run": label,
                        "phase": phase,
                        "t": round(now() - t0, 1),
                        "created": len(created_at),
                        "bound": len(model.bound_at),
                        "queue": model.queue.counts(),
                        "binds_ok": s.binds_ok,
                        "failed_binds": s.failed_binds,
                        "rejections": s.rejections,
                        "rejections_fit": s.rejections_of_pods_that_fit,
                        "filter_p50_ms": round(pct(s.filter_ms[-200:], 0.5), 1),
                    }
                ),
                flush=True,
            )

        while now() - t0 < w.timeout:
            await asyncio.sleep(0.1)
            if progress and now() - last_print >= progress:
                last_print = now()
                line("fill" if w.taint_removal else "run")
            # Over-committed: also wait until every pod left over was rejected while its claim existed.
            if (
                reached_at is None
                and len(model.bound_at) >= expected
                and creator.done()
                and (n_pods <= expected or all(k in model.bound_at or k in model.rejected_with_claims for k in created_at))
            ):
                reached_at = now()
            if reached_at is not None and now() - reached_at >= w.settle:
                break
        out["timed_out"] = reached_at is None
        if not creator.done():
            creator.cancel()
        if driver is not None and driver_task is not None:
            driver_task.cancel()
            out["binding_conditions"] = driver.report(model.bound_at)
        if w.taint_removal and not is_noop:
            out["taint_removal"] = await _taint_removal(w, api, model, created_at, create_errors, t0, line)
        line("end")
        out.update(_measure(w, model, created_at, t0, expected + (1 if "taint_removal" in out else 0)))
        out["pod_create_errors"] = dict(create_errors)
        out["claims_created_by_controller"] = model.claim_controller.claims_created if model.claim_controller else 0
        if w.steady_fill:
            out["steady_state"] = {
                "prefilled_pods": int(w.capacity * w.steady_fill),
                "warm_up_pods": w.warm_up,
                "pods_deleted": deleted[0],
                "claims_released_by_controller": model.claim_controller.claims_released if model.claim_controller else 0,
            }
        out["claim_controller_errors"] = dict(model.claim_controller.errors) if model.claim_controller else {}
        out["served_kinds"] = {k: v for k, v in model.served_kinds().items()}
        await model.stop()
        out["readback"] = await _read_back(api, w, cfg.http_timeout)
        return out


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
        self.tasks: set[asyncio.Task] = set()

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
            "application/merge-patch+json",
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


async def _taint_removal(
    w: Workload,
    api: Api,
    model: KubeSchedulerModel,
    created_at: dict[str, float],
    errors: Counter[str],
    t0: float,
    line: Callable[[str], None],
) -> dict[str, Any]:
    """One more pod than untainted devices; once it has been rejected and sits in the queue, delete the rules."""
    extra = f"{NAMESPACE}/pod-{w.capacity}"
    await _create_pods(api, w.capacity, 1, None, created_at, errors)
    deadline = now() + 60
    while now() < deadline and not (extra in model.rejected_pods and model.queue.where.get(extra) in ("unschedulable", "backoff")):
        await asyncio.sleep(0.05)
    state = model.queue.where.get(extra)
    await asyncio.sleep(2.0)  # let it settle where it waits (unschedulable pods wait for an event)
    state_before = model.queue.where.get(extra)
    t = now()
    for rule in taint_rules(w):
        await api.request("DELETE", f"/apis/resource.k8s.io/v1beta2/devicetaintrules/{rule['metadata']['name']}")
    wait = min(w.timeout, 360.0)
    while now() - t < wait and extra not in model.bound_at:
        await asyncio.sleep(0.05)
    line("taint-removed")
    bound = model.bound_at.get(extra)
    return {
        "pending_pod": extra,
        "queue_when_rejected": state,
        "queue_when_rule_deleted": state_before,
        "rule_deleted_to_bound_s": round(bound - t, 2) if bound else None,
        "waited_s": round(now() - t, 1),
        "last_rejection": model.last_rejection.get(extra, ""),
    }


def _measure(w: Workload, model: KubeSchedulerModel, created_at: dict[str, float], t0: float, expected: int) -> dict[str, Any]:
    s = model.stats
    bound = {k: v for k, v in model.bound_at.items() if k in created_at}
    first_created = min(created_at.values()) if created_at else t0
    last_bound = max(bound.values()) if bound else first_created
    e2e = [(bound[k] - created_at[k]) * 1000 for k in bound]
    unbound = sorted(set(created_at) - set(bound))
    return {
        "pods_created": len(created_at),
        "pods_bound": len(bound),
        "expected_bound": expected,
        "pods_per_second": round(len(bound) / (last_bound - first_created), 2) if bound and last_bound > first_created else 0.0,
        "first_created_to_last_bound_s": round(last_bound - first_created, 2),
        "scheduling_cycles": s.cycles,
        "binds": s.binds,
        "binds_ok": s.binds_ok,
        "failed_binds": s.failed_binds,
        "bind_timeouts": s.bind_timeouts,
        "bind_errors": dict(s.bind_errors.most_common(8)),
        "extender_rejections": s.rejections,
        "rejections_of_pods_that_fit": s.rejections_of_pods_that_fit,
        "rejection_reasons": dict(s.rejection_reasons.most_common(8)),
        "fit_rejection_reasons": dict(s.fit_rejection_reasons.most_common(8)),
        "scheduling_errors": dict(s.scheduling_errors.most_common(8)),
        "filter_errors": s.filter_errors,
        "prioritize_errors": s.prioritize_errors,
        "single_node_cycles": s.single_node_cycles,
        "status_patches": s.status_patches,
        "latency_ms": {
            "filter": summary_ms(s.filter_ms),
            "prioritize": summary_ms(s.prioritize_ms),
            "bind": summary_ms(s.bind_ms),
            "pod_created_to_bound": summary_ms(e2e),
        },
        "queue_moves": dict(model.queue.moves.most_common()),
        "requeue_events": dict(s.requeue_events.most_common()),
        "ignored_events": dict(s.ignored_events.most_common()),
        "unbound_pods": len(unbound),
        "unbound_last_rejections": dict(
            Counter(short_reason(model.last_rejection.get(k, "never rejected")) for k in unbound).most_common(5)
        ),
        "unbound_never_rejected": sum(1 for k in unbound if k not in model.last_rejection),
        "unbound_not_rejected_with_claims": sum(1 for k in unbound if k not in model.rejected_with_claims),
        "samples_ms": {"pod_created_to_bound": [round(x) for x in sorted(e2e)]},  # for the plot
    }


def _gi(q: str) -> int:
    return int(q[:-2]) if q.endswith("Gi") else int(q) // 1024**3


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []


async def _read_back(api: Api, w: Workload, http_timeout: float) -> dict[str, Any]:
    """Every claim and pod from the API server: devices allocated twice, bound pods without an allocated claim."""
    claims, _ = await api.list("/apis/resource.k8s.io/v1/resourceclaims") or ([], "")
    pods, _ = await api.list("/api/v1/pods") or ([], "")
    devices: Counter[tuple[str, str, str]] = Counter()
    shared_gi: Counter[tuple[str, str, str]] = Counter()
    for c in claims:
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            if r.get("shareID"):
                shared_gi[(r.get("driver"), r.get("pool"), r.get("device"))] += _gi((r.get("consumedCapacity") or {}).get("memory", "0"))
                continue
            devices[(r.get("driver"), r.get("pool"), r.get("device"))] += 1
    counters_gi: Counter[tuple[str, str]] = Counter()  # (pool, counter set) -> Gi consumed by allocated partitions
    for (_d, pool, device), _n in devices.items():
        if device.startswith("gpu-") and "-part-" in device:
            gpu, _, part = device.rpartition("-part-")
            counters_gi[(pool, gpu)] += PARTITIONS_GI[int(part)]
    by_name = {key_of(c): c for c in claims}
    bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
    without = [key_of(p) for p in bound if not claim_allocated(by_name, p)]
    reserved_elsewhere = 0
    for p in bound:
        node = p["spec"]["nodeName"]
        for st in (p.get("status") or {}).get("resourceClaimStatuses") or []:
            c = by_name.get(f"{p['metadata']['namespace']}/{st.get('resourceClaimName')}") or {}
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                reserved_elsewhere += r.get("pool") != node
    tainted = {node_name(i) for i in range(w.tainted_nodes)}
    return {
        "claims": len(claims),
        "claims_allocated": sum(1 for c in claims if (c.get("status") or {}).get("allocation")),
        "devices_allocated": sum(devices.values()),
        "devices_allocated_twice": sum(1 for n in devices.values() if n > 1),
        "shares": sum(1 for c in claims for r in _results(c) if r.get("shareID")),
        "counter_sets_over_committed": sum(1 for gi in counters_gi.values() if gi > GPU_GI),
        "shared_devices_over_committed": sum(1 for gi in shared_gi.values() if gi > GPU_GI),
        "pods_bound": len(bound),
        "bound_pods_without_allocated_claim": len(without),
        "allocations_on_another_node": reserved_elsewhere,
        # After a taint removal the devices are no longer tainted: not applicable.
        "allocations_on_tainted_devices": None if w.taint_removal else sum(n for (d, pool, _), n in devices.items() if pool in tainted),
        "http_timeout_s": http_timeout,
    }


def run_workload(
    w: Workload,
    extender_cmd: list[str] | None = None,
    *,
    cfg: SchedulerConfig | None = None,
    claims: ClaimControllerConfig | None = None,
    progress: float = 5.0,
    noop: bool = False,
    label: str | None = None,
) -> dict[str, Any]:
    """Fake API server + extender (command with {kubeconfig} {listen} {port} {api} placeholders) + the model; the measurements."""
    cfg = cfg or SchedulerConfig()
    claims = claims or ClaimControllerConfig()
    cmd_template = noop_extender_cmd() if noop else (extender_cmd or default_extender_cmd())
    label = label or f"{w.name}/{'noop' if noop else 'extender'}"
    tmp = Path(tempfile.mkdtemp(prefix="dra-ksmodel-"))
    api_proc, api_url, kubeconfig = start_fake_api(tmp)
    ext_proc = None
    try:
        import httpx

        with httpx.Client(base_url=api_url, timeout=300) as http:
            objs = cluster_objects(w)
            for i in range(0, len(objs), 2000):
                http.post(
                    "/_fake/objects",
                    content=orjson.dumps({"kind": "List", "items": objs[i : i + 2000]}),
                    headers={"Content-Type": "application/json"},
                ).raise_for_status()
        port = free_port()
        fmt = {"kubeconfig": str(kubeconfig), "listen": f"127.0.0.1:{port}", "port": str(port), "api": api_url}
        cmd = [part.format(**fmt) for part in cmd_template]
        started = time.perf_counter()
        ext_proc, client = start_server(cmd, port, tmp / "extender.log", timeout=300)
        client.close()
        ready_s = time.perf_counter() - started
        print(
            json.dumps({"run": label, "phase": "ready", "extender_ready_s": round(ready_s, 2), "cmd": " ".join(cmd_template)}), flush=True
        )
        cpu = Cpu({"extender": ext_proc.pid, "fakeapi": api_proc.pid})
        result = _run_async(_drive(w, api_url, f"http://127.0.0.1:{port}", cfg, claims, progress, label, noop))
        result["cpu"] = cpu.done()
        result["extender_memory_mb"] = _memory_mb(ext_proc.pid)
        result["extender_ready_s"] = round(ready_s, 2)
        if ext_proc.poll() is not None:
            result["extender_exited"] = ext_proc.returncode
        return {
            "label": label,
            "extender": "noop" if noop else " ".join(cmd_template),
            "workload": asdict(w),
            "config": {"scheduler": asdict(cfg), "claim_controller": asdict(claims)},
            **result,
        }
    finally:
        if ext_proc is not None:
            stop_process(ext_proc)
        stop_process(api_proc)
        if os.environ.get("KSMODEL_KEEP_TMP"):
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _memory_mb(pid: int) -> dict[str, float]:
    """A process's resident set now and at its peak (VmRSS, VmHWM), MB."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss" if line.startswith("VmRSS") else "peak_rss"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def _run_async(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


# ---------------------------------------------------------------------- the no-op extender (the reference)


def noop_extender(kubeconfig: str, listen: str) -> None:
    """FastAPI + uvicorn like dra-extender: every node passes, scores 0, /bind only creates the Binding."""
    import uvicorn
    import yaml

    conf = yaml.safe_load(Path(kubeconfig).read_text())
    server = conf["clusters"][0]["cluster"]["server"].rstrip("/")
    token = ((conf.get("users") or [{}])[0].get("user") or {}).get("token")
    app = FastAPI()
    state: dict[str, aiohttp.ClientSession] = {}

    def session() -> aiohttp.ClientSession:
        if "s" not in state:
            state["s"] = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"} if token else {})
        return state["s"]

    def ok(body: Any) -> Response:
        return Response(orjson.dumps(body), media_type="application/json")

    @app.get("/readyz")
    @app.get("/livez")
    async def ready() -> Response:
        return Response(b"ok", media_type="text/plain")

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return ok({"NodeNames": args.get("NodeNames") or [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return ok([{"Host": n, "Score": 0} for n in args.get("NodeNames") or []])

    @app.post("/bind")
    async def bind(request: Request) -> Response:
        a = orjson.loads(await request.body())
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": a["PodName"], "namespace": a["PodNamespace"], "uid": a["PodUID"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": a["Node"]},
        }
        async with session().post(
            f"{server}/api/v1/namespaces/{a['PodNamespace']}/pods/{a['PodName']}/binding",
            data=orjson.dumps(binding),
            headers={"Content-Type": "application/json"},
        ) as resp:
            text = await resp.text()
            return ok({"Error": "" if resp.status in (200, 201) else f"binding: HTTP {resp.status}: {text[:200]}"})

    host, _, port = listen.rpartition(":")
    loop = "uvloop"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        loop = "asyncio"
    uvicorn.run(app, host=host, port=int(port), log_config=None, access_log=False, http="httptools", loop=loop)


# ---------------------------------------------------------------------- report


def dump_json(report: dict[str, Any]) -> str:
    """Indented JSON with lists of numbers on one line (the samples stay readable and small)."""
    text = json.dumps(report, indent=1)
    return (
        re.sub(r"\[\s*(-?[\d.]+(?:,\s*-?[\d.]+)*)\s*\]", lambda m: "[" + ",".join(x.strip() for x in m.group(1).split(",")) + "]", text)
        + "\n"
    )


def targets(r: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """The model's targets for one extender run (docs/kube-scheduler.md#asynchronous-binding-and-a-single-writer): (target, met, measured)."""
    w = r["workload"]
    rb = r["readback"]
    expected = r["pods_created"] if "taint_removal" in r else r["expected_bound"]  # after the removal every pod fits
    # Steady state: as many pods stay bound at the end as were prefilled (one deleted per pod created).
    on_api = (r.get("steady_state") or {}).get("prefilled_pods", expected) if w.get("steady_fill") else expected
    out = [
        (
            "every pod that fits bound",
            r["pods_bound"] == expected and rb["pods_bound"] == on_api,
            f"{r['pods_bound']} of {expected} (API: {rb['pods_bound']} bound at the end)",
        ),
        ("0 failed binds", r["failed_binds"] == 0, f"{r['failed_binds']} ({r['bind_timeouts']} timeouts)"),
        ("0 rejections of pods that fit", r["rejections_of_pods_that_fit"] == 0, str(r["rejections_of_pods_that_fit"])),
        ("no device allocated twice", rb["devices_allocated_twice"] == 0, str(rb["devices_allocated_twice"])),
        ("no bind longer than httpTimeout", r["bind_timeouts"] == 0, f"max {r['latency_ms']['bind']['max']} ms"),
    ]
    if r.get("ratio_to_noop") is not None and not w.get("rate"):
        out.append(("pods/s >= 0.8x no-op", r["ratio_to_noop"] >= 0.8, f"{r['ratio_to_noop']:.2f}x"))
    if w.get("rate"):
        p99 = r["latency_ms"]["pod_created_to_bound"]["p99"] / 1000
        limit = 1.0 if w.get("steady_fill") else 2.0  # issue 22's steady-state target
        out.append((f"created -> bound p99 <= {limit:g} s", p99 <= limit, f"{p99:.2f} s"))
    if w.get("steady_fill"):
        st = r.get("steady_state") or {}
        out.append(
            (
                "steady state: a pod deleted per pod created, its claim deallocated",
                st.get("pods_deleted") == r["pods_created"] + st.get("warm_up_pods", 0),
                f"{st.get('pods_deleted')} deleted, {st.get('claims_released_by_controller')} claims released, "
                f"{st.get('prefilled_pods')} prefilled",
            )
        )
    if (
        not w.get("steady_fill")
        and w["pods"] > w["nodes"] * w["devices_per_node"] - w.get("tainted_nodes", 0) * w["devices_per_node"]
        and not w.get("taint_removal")
    ):
        wrong = {k: v for k, v in r["unbound_last_rejections"].items() if "allocated" not in k}
        out.append(
            (
                "the rest rejected because every device is allocated",
                not wrong and not r.get("unbound_not_rejected_with_claims"),
                f"{r['unbound_pods']} unbound; other last reasons: {wrong or 'none'}",
            )
        )
    if "taint_removal" in r:
        t = r["taint_removal"]["rule_deleted_to_bound_s"]
        out.append(
            (
                "taint removed -> pending pod bound <= 5 s",
                t is not None and t <= 5,
                f"{t} s" if t is not None else f"not within {r['taint_removal']['waited_s']} s",
            )
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# kube-scheduler model (`python -m bench.kube_scheduler_model`): {report['title']}",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; load average at start {m['loadavg_1_5_15']}, "
        f"at end {report.get('loadavg_end')}. {report.get('note', '')}",
        f"Extender: `{report['extender_cmd']}`; reference: the no-op extender (FastAPI + uvicorn, binds only). "
        f"httpTimeout {report['config']['scheduler']['http_timeout']} s, percentageOfNodesToScore "
        f"{report['config']['scheduler']['percentage_of_nodes_to_score'] or 'adaptive'}, claim controller delay "
        f"{report['config']['claim_controller']['delay']} s at {report['config']['claim_controller']['qps']} qps "
        f"(burst {report['config']['claim_controller']['burst']}).",
        "",
        "pods/s: first pod created to last pod bound. Failed binds: /bind answered an error or timed out (httpTimeout); "
        "a pod whose abandoned /bind completed later is bound all the same. Rejections: /filter rejected every sampled node; "
        '"of pods that fit": the cluster had free, untainted devices for the pod beyond those of pods being bound '
        "(a claim not created yet counts). Devices allocated twice: every claim read back from the API server after the run.",
        "",
        "| workload | run | bound / expected | pods/s | vs no-op | failed binds (timeouts) | rejections (of pods that fit) "
        "| filter p50/p99 ms | prioritize p50/p99 ms | bind p50/p99 ms | created→bound p50/p99 s | devices allocated twice |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["runs"]:
        lat = r["latency_ms"]
        ratio = r.get("ratio_to_noop")
        lines.append(
            f"| {r['workload']['name']} | {'no-op' if r['extender'] == 'noop' else 'extender'} | {r['pods_bound']} / {r['expected_bound']}"
            f"{' (timed out)' if r['timed_out'] else ''} | {r['pods_per_second']} | {f'{ratio:.2f}×' if ratio is not None else '–'} "
            f"| {r['failed_binds']} ({r['bind_timeouts']}) | {r['extender_rejections']} ({r['rejections_of_pods_that_fit']}) "
            f"| {lat['filter']['p50']} / {lat['filter']['p99']} | {lat['prioritize']['p50']} / {lat['prioritize']['p99']} "
            f"| {lat['bind']['p50']} / {lat['bind']['p99']} "
            f"| {lat['pod_created_to_bound']['p50'] / 1000:.2f} / {lat['pod_created_to_bound']['p99'] / 1000:.2f} "
            f"| {r['readback']['devices_allocated_twice']} |"
        )
    lines += ["", "## Issue 8's targets", "", "| workload | target | met | measured |", "| --- | --- | --- | --- |"]
    for r in report["runs"]:
        if r["extender"] != "noop":
            lines += [f"| {r['workload']['name']} | {t} | {'yes' if ok else '**no**'} | {v} |" for t, ok, v in targets(r)]
    lines.append("")
    for r in report["runs"]:
        if r["extender"] == "noop":
            continue
        lines.append(f"## {r['workload']['name']} (extender)")
        lines.append("")
        lines.append(f"- bind errors: {r['bind_errors'] or 'none'}")
        lines.append(f"- rejection reasons: {r['rejection_reasons'] or 'none'}")
        lines.append(f"- rejections of pods that fit, by reason: {r['fit_rejection_reasons'] or 'none'}")
        lines.append(f"- scheduling errors: {r['scheduling_errors'] or 'none'}")
        lines.append(f"- unbound pods: {r['unbound_pods']}, their last rejection: {r['unbound_last_rejections'] or 'none'}")
        lines.append(f"- read back: {r['readback']}")
        lines.append(f"- CPU: {r['cpu']}")
        if r.get("extender_memory_mb"):
            lines.append(f"- extender memory (MB): {r['extender_memory_mb']}")
        if "taint_removal" in r:
            lines.append(f"- taint removal: {r['taint_removal']}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "noop-extender":
        p = argparse.ArgumentParser(prog="python -m bench.kube_scheduler_model noop-extender")
        p.add_argument("--kubeconfig", required=True)
        p.add_argument("--listen", default="127.0.0.1:8888")
        a = p.parse_args(argv[1:])
        noop_extender(a.kubeconfig, a.listen)
        return 0
    if argv and argv[0] == "render":  # re-render the markdown of a results file: render NAME [--out DIR]
        p = argparse.ArgumentParser(prog="python -m bench.kube_scheduler_model render")
        p.add_argument("name")
        p.add_argument("--out", type=Path, default=RESULTS)
        a = p.parse_args(argv[1:])
        md = markdown(json.loads((a.out / f"{a.name}.json").read_text()))
        (a.out / f"{a.name}.md").write_text(md + "\n")
        print(md)
        return 0
    if argv and argv[0] == "run":
        argv = argv[1:]
    p = argparse.ArgumentParser(
        prog="python -m bench.kube_scheduler_model", description="kube-scheduler 1.36 model against an extender and the fake API server"
    )
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument(
        "--extender-cmd",
        default=None,
        help="the extender to measure; placeholders {kubeconfig} {listen} {port} {api} (default: dra-extender serve --kubeconfig {kubeconfig} --listen {listen})",
    )
    p.add_argument("--no-reference", action="store_true", help="skip the no-op extender runs")
    p.add_argument("--http-timeout", type=float, default=5.0)
    p.add_argument("--weight", type=int, default=1)
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=None)
    p.add_argument("--claim-delay", type=float, default=ClaimControllerConfig.delay)
    p.add_argument("--claim-qps", type=float, default=ClaimControllerConfig.qps)
    p.add_argument("--claim-burst", type=int, default=ClaimControllerConfig.burst)
    p.add_argument("--timeout", type=float, default=None, help="override every workload's timeout (s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines (0: none)")
    p.add_argument("--name", default="kube-scheduler-model", help="results file name under --out")
    p.add_argument("--title", default="", help="a heading for the markdown")
    p.add_argument("--note", default="", help="a sentence for the markdown (e.g. the machine's load)")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    names = [n.strip() for n in a.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; known: {list(WORKLOADS)}")
    cfg = SchedulerConfig(
        http_timeout=a.http_timeout, weight=a.weight, percentage_of_nodes_to_score=a.percentage_of_nodes_to_score, seed=a.seed
    )
    claims = ClaimControllerConfig(delay=a.claim_delay, qps=a.claim_qps, burst=a.claim_burst)
    ext_cmd = shlex.split(a.extender_cmd) if a.extender_cmd else default_extender_cmd()
    report: dict[str, Any] = {
        "title": a.title or ", ".join(names),
        "note": a.note,
        "machine": machine(),
        "extender_cmd": " ".join(ext_cmd),
        "config": {"scheduler": asdict(cfg), "claim_controller": asdict(claims)},
        "runs": [],
    }
    for n in names:
        w = WORKLOADS[n]
        if a.timeout:
            w = Workload(**{**asdict(w), "timeout": a.timeout})
        r = run_workload(w, ext_cmd, cfg=cfg, claims=claims, progress=a.progress)
        runs = [r]
        if not a.no_reference and not w.taint_removal and w.pods <= w.capacity:
            ref = run_workload(w, cfg=cfg, claims=claims, progress=a.progress, noop=True)
            r["ratio_to_noop"] = round(r["pods_per_second"] / ref["pods_per_second"], 3) if ref["pods_per_second"] else None
            runs.append(ref)
        report["runs"] += runs
        for x in runs:
            brief = {
                k: x[k]
                for k in (
                    "label",
                    "pods_bound",
                    "expected_bound",
                    "pods_per_second",
                    "failed_binds",
                    "bind_timeouts",
                    "extender_rejections",
                    "rejections_of_pods_that_fit",
                    "timed_out",
                )
            }
            print(json.dumps({"result": brief, "ratio_to_noop": x.get("ratio_to_noop"), "readback": x["readback"]}), flush=True)
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(dump_json(report))
    md = markdown(report)
    (a.out / f"{a.name}.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
