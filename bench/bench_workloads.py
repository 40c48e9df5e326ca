"""scheduler_perf-style DRA workloads (docs/design.md#performance), driven as kube-scheduler drives an extender.

Workloads are named after upstream `test/integration/scheduler_perf/dra`:

- `SchedulingWithResourceClaimTemplate`: 500 nodes x 10 devices `instance-i` of
  driver `test-driver.cdi.k8s.io`, half of them allocated already (upstream's
  init pods), then 2,500 measured pods sharing one template shape: each has its
  own claim with the identical spec, as kube-controller-manager generates it from
  the template, and the pod's `status.resourceClaimStatuses` names it.
- `SteadyState`: the same cluster at 50 % occupancy; pods are created and the
  oldest deleted at a constant rate while the driver schedules what appears.
- `Toleration`: a NoSchedule DeviceTaintRule on every device; claims tolerate it.
- `FirstAvailable`: claims with `firstAvailable` subrequests (a scarce model first,
  then any device).
- `Scale5k`: 5,000 nodes x 8 devices: /filter with the 500 names kube-scheduler's
  percentageOfNodesToScore sends at that size (a rotating window), and with all
  5,000; the first pod of a never-seen claim shape (a new CEL selector) over the
  40,000 devices; the extender's peak RSS (VmHWM), in cluster mode including a
  watch burst (5,000 slice updates + 5,000 claim status updates).
- `TaintChurn` (cluster mode): DeviceTaintRules added and removed at 10/s while
  scheduling; the time from each write to the first /filter that reflects it, at
  1,000 and at 40,000 devices, beside the in-process cost of a rule event.

Every workload runs in `--source` mode (a manifest directory; /bind in memory) and
in cluster mode (`--kubeconfig` against the in-repo fake API server, which /bind
writes to). The driver is sequential ("extender alone"): for one pod at a time,
/filter with the node names, /prioritize with the feasible ones (when more than
one), /bind to the best score (random among equals), over HTTP with the Go field
names and `nodeCacheCapable: true` (names, no Node objects). The same driver runs
against a no-op extender on the same stack (`bench/noop_extender.py`) in the same
run, and the ratio of pods/s is reported.

    .venv/bin/python -m bench workloads                  # everything (< 20 min on 2 cores)
    .venv/bin/python -m bench.bench_workloads --quick    # a smaller version (~5 min)
    .venv/bin/python -m bench.bench_workloads --only Scale5k --only TaintChurn
    BENCH_QUICK=1 .venv/bin/python -m bench workloads    # --quick through `python -m bench`

Results: bench/results/workloads.json, workloads.md, workloads-latency.png,
workloads-throughput.png.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common import RESULTS, start_extender_profiled
from kubesim.measure import pct, proc_status_mb
from kubesim.objects import GPU_GI, PARTITIONS_GI, device_class, node_slice, partitioned_slices
from kubesim.processes import ROOT, free_port, start_extender, start_fake_api, stop_process

DRIVER = "test-driver.cdi.k8s.io"
CLASS = "test-class"
TEMPLATE = "test-claim-template"
NS = "default"
POD_CLAIM = "resource"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
TAINT_KEY = "example.com/maintenance"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROFILE_DIR: Path | None = None  # --profile DIR: every extender runs under cProfile, dumps land here

# ---------------------------------------------------------------------- the cluster

SPECS: dict[str, dict[str, Any]] = {
    "template": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}},
    "toleration": {
        "devices": {
            "requests": [
                {
                    "name": "req-0",
                    "exactly": {
                        "deviceClassName": CLASS,
                        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                    },
                }
            ]
        }
    },
    "first_available": {
        "devices": {
            "requests": [
                {
                    "name": "req-0",
                    "firstAvailable": [
                        {
                            "name": "large",
                            "deviceClassName": CLASS,
                            "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "large"'}}],
                        },
                        {"name": "any", "deviceClassName": CLASS},
                    ],
                }
            ]
        }
    },
}


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def base_objects(nodes: int, devices: int, *, taint_all: bool = False) -> list[dict[str, Any]]:
    """DeviceClass, template, Nodes and one ResourceSlice (pool) per node."""
    objs: list[dict[str, Any]] = [
        device_class(CLASS, DRIVER),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NS},
            "spec": {"spec": SPECS["template"]},
        },
    ]
    for i in range(nodes):
        node = node_name(i)
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        objs.append(resource_slice(i, devices))
    if taint_all:
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "maintenance-all"},
                "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": TAINT_KEY, "value": "planned", "effect": "NoSchedule"}},
            }
        )
    return objs


def resource_slice(i: int, devices: int, revision: int = 0) -> dict[str, Any]:
    devs = [
        {
            "name": f"instance-{j}",
            "attributes": {
                "model": {"string": "large" if j == 0 else "standard"},
                "index": {"int": j},
                "firmware": {"string": f"rev-{revision}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for j in range(devices)
    ]
    return node_slice(node_name(i), DRIVER, devs)


@dataclass
class PodClaim:
    """A pod and the claim kube-controller-manager generated for it from the template."""

    index: int
    spec_name: str
    name: str = ""
    uid: str = ""
    claim: str = ""

    def __post_init__(self) -> None:
        self.name = f"pod-{self.index:06d}"
        self.uid = f"00000000-0000-4000-8000-{self.index:012d}"
        self.claim = f"{self.name}-{POD_CLAIM}-{self.index % 99991:05x}"

    def pod(self, node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "schedulerName": "dra-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": POD_CLAIM, "resourceClaimTemplateName": TEMPLATE}],
        }
        if node:
            spec["nodeName"] = node
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": NS, "uid": self.uid},
            "spec": spec,
            "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": POD_CLAIM, "resourceClaimName": self.claim}]},
        }

    def claim_object(self, allocated: tuple[str, str] | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": self.claim,
                "namespace": NS,
                "annotations": {POD_CLAIM_NAME_ANNOTATION: POD_CLAIM},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid, "controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": json.loads(json.dumps(SPECS[self.spec_name])),
        }
        if allocated is not None:
            obj["status"] = allocation_status(self, *allocated)
        return obj

    def objects(self, allocated: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        return [self.claim_object(allocated), self.pod(allocated[0] if allocated else None)]


def new_shape_claim(pc: PodClaim, s: int) -> dict[str, Any]:
    """`pc`'s claim with a selector no pod had before (unique to this process): the first pod of a new shape."""
    claim = pc.claim_object()
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {
            "cel": {
                "expression": f'device.attributes["{DRIVER}"].index >= {s + 1} && device.attributes["{DRIVER}"].firmware != "never-{s}-{os.getpid()}"'
            }
        }
    ]
    return claim


def allocation_status(pc: PodClaim, node: str, device: str) -> dict[str, Any]:
    request = "req-0/any" if pc.spec_name == "first_available" else "req-0"
    return {
        "allocation": {
            "devices": {"results": [{"request": request, "driver": DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": pc.name, "uid": pc.uid}],
    }


def prefill(nodes: int, devices: int, per_node: int, spec: str, start: int) -> list[PodClaim]:
    """Bound pods with allocated claims: `per_node` devices taken on every node (upstream's init pods)."""
    out = []
    k = start
    for i in range(nodes):
        for j in range(per_node):
            pc = PodClaim(k, spec)
            pc.allocated = (node_name(i), f"instance-{devices - 1 - j}")  # type: ignore[attr-defined]
            out.append(pc)
            k += 1
    return out


# ---------------------------------------------------------------------- where the extender runs


def api_path(obj: dict[str, Any], *, item: bool = False) -> str:
    kind = obj["kind"]
    api_version = obj["apiVersion"]
    plural = {
        "Pod": "pods",
        "Node": "nodes",
        "ResourceClaim": "resourceclaims",
        "ResourceSlice": "resourceslices",
        "DeviceTaintRule": "devicetaintrules",
        "DeviceClass": "deviceclasses",
        "ResourceClaimTemplate": "resourceclaimtemplates",
    }[kind]
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    ns = (obj.get("metadata") or {}).get("namespace")
    path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
    return f"{path}/{obj['metadata']['name']}" if item else path


class Env:
    """The extender on a generated cluster: a manifest directory (`source`) or the fake API server (`cluster`)."""

    def __init__(self, mode: str, tmp: Path, objects: list[dict[str, Any]], *, label: str) -> None:
        self.mode = mode
        self.tmp = tmp / f"{label}-{mode}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.objects = objects
        self.api_proc: subprocess.Popen | None = None
        self.api_url = ""
        self.proc: subprocess.Popen | None = None
        self.client: httpx.Client | None = None
        self.port = 0
        self.api: httpx.Client | None = None
        self.ready_s = 0.0
        self.seed_s = 0.0
        self.grouped: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}  # source mode: file -> its (name, objects)
        self.group_of: dict[str, str] = {}

    def add_grouped(self, items: list[tuple[str, list[dict[str, Any]]]], per_file: int = 10) -> None:
        """Objects deletable by name; in source mode `per_file` names share a file (deleting one rewrites it)."""
        if self.mode == "cluster":
            for _, objs in items:
                self.objects.extend(objs)
            return
        for g in range(0, len(items), per_file):
            fname = f"group-{g // per_file:05d}"
            self.grouped[fname] = list(items[g : g + per_file])
            for name, _ in self.grouped[fname]:
                self.group_of[name] = fname

    def start(self, extra: Iterable[str] = ()) -> None:
        t = time.perf_counter()
        if self.mode == "source":
            directory = self.tmp / "cluster"
            directory.mkdir()
            for n, i in enumerate(range(0, len(self.objects), 2000)):
                (directory / f"base-{n:04d}.json").write_bytes(
                    orjson.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects[i : i + 2000]})
                )
            self.directory = directory
            for fname, members in self.grouped.items():
                (directory / f"{fname}.json").write_bytes(
                    orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [o for _, objs in members for o in objs]})
                )
            args = ["--source", str(directory)]
        else:
            self.api_proc, self.api_url, kubeconfig = start_fake_api(self.tmp, module="bench.fakeapi_frozen")  # freezes its heap on SIGUSR1
            self.api = httpx.Client(base_url=self.api_url, timeout=120, headers={"Content-Type": "application/json"})
            for i in range(0, len(self.objects), 2000):
                self.api.post(
                    "/_fake/objects", content=orjson.dumps({"kind": "List", "items": self.objects[i : i + 2000]})
                ).raise_for_status()
            self.api_proc.send_signal(signal.SIGUSR1)  # freeze the seeded heap (bench/fakeapi_frozen.py)
            args = ["--kubeconfig", str(kubeconfig)]
        self.seed_s = time.perf_counter() - t
        self.objects = []  # not needed any more (memory of the bench client)
        gc.collect()
        gc.freeze()  # the driver's own full collections must not show up as extender latency
        self.port = free_port()
        t = time.perf_counter()
        argv = [*args, "--log-format", "json", "--no-eviction", *extra]
        if PROFILE_DIR is not None:
            self.profile = PROFILE_DIR / f"{self.tmp.name}.prof"
            self.proc, self.client = start_extender_profiled(argv, self.port, self.tmp / "extender.log", self.profile)
        else:
            self.proc, self.client = start_extender(argv, self.port, self.tmp / "extender.log")
        self.ready_s = time.perf_counter() - t

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def create(self, name: str, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Objects appear as one change (a file in source mode; POSTs in cluster mode); the objects as created.

        In cluster mode the API server gives pods their UIDs: pods are created first, the claims'
        owner references take the new UID, and the pod's resourceClaimStatuses are written last
        (as kube-controller-manager does once it has created the claim).
        """
        if self.mode == "source":
            hidden = self.directory / f".{name}.json.tmp"
            hidden.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
            os.replace(hidden, self.directory / f"{name}.json")
            return objs
        assert self.api is not None
        uids: dict[str, str] = {}
        created: list[dict[str, Any]] = []
        statuses: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for obj in sorted(objs, key=lambda o: o["kind"] != "Pod"):
            obj = json.loads(json.dumps(obj))
            for ref in obj["metadata"].get("ownerReferences") or []:
                ref["uid"] = uids.get(ref["name"], ref["uid"])
            obj["metadata"].pop("uid", None)
            r = self.api.post(api_path(obj), content=orjson.dumps(obj))
            if r.status_code >= 300:
                raise RuntimeError(f"POST {api_path(obj)}: {r.status_code} {r.text[:300]}")
            got = r.json()
            got.setdefault("kind", obj["kind"])
            got.setdefault("apiVersion", obj["apiVersion"])
            if obj["kind"] == "Pod":
                uids[obj["metadata"]["name"]] = got["metadata"]["uid"]
                if obj.get("status", {}).get("resourceClaimStatuses"):
                    statuses.append((obj, got))
            created.append(got)
        for obj, got in statuses:
            got["status"] = {**(got.get("status") or {}), "resourceClaimStatuses": obj["status"]["resourceClaimStatuses"]}
            r = self.api.put(api_path(obj, item=True) + "/status", content=orjson.dumps(got))
            if r.status_code >= 300:
                raise RuntimeError(f"PUT pod status: {r.status_code} {r.text[:300]}")
            got.update(r.json())
        return created

    def delete(self, name: str, objs: list[dict[str, Any]]) -> None:
        if self.mode == "source":
            fname = self.group_of.pop(name, None)
            if fname is None:
                (self.directory / f"{name}.json").unlink(missing_ok=True)
                return
            members = self.grouped[fname] = [(n, o) for n, o in self.grouped[fname] if n != name]
            self.create(fname, [o for _, objs in members for o in objs])
            return
        assert self.api is not None
        for obj in objs:
            r = self.api.delete(api_path(obj, item=True))
            if r.status_code >= 300 and r.status_code != 404:
                raise RuntimeError(f"DELETE {api_path(obj, item=True)}: {r.status_code} {r.text[:300]}")

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None:
            stop_process(self.proc)
            prof = getattr(self, "profile", None)
            if prof is not None and prof.exists():
                from bench.common import profile_top

                prof.with_suffix(".txt").write_text(profile_top(prof, 40) + "\n" + profile_top(prof, 40, sort="cumulative"))
        if self.api is not None:
            self.api.close()
        if self.api_proc is not None:
            stop_process(self.api_proc)


def start_noop(tmp: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = tmp / "noop.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.noop_extender", "--port", str(port)], cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"no-op extender did not start: {log.read_text()[-2000:]}")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ---------------------------------------------------------------------- the driver


@dataclass
class Attempt:
    pod: str
    t0: float
    t1: float = 0.0
    filter_ms: float = 0.0
    prioritize_ms: float | None = None
    bind_ms: float | None = None
    feasible: int = 0
    node: str | None = None
    error: str = ""
    failed: dict[str, str] = field(default_factory=dict)


class Driver:
    """kube-scheduler's calls to one extender, one pod at a time (the scheduling cycle is sequential)."""

    def __init__(self, url: str, seed: int = 1) -> None:
        self.http = httpx.Client(base_url=url, timeout=120, headers={"Content-Type": "application/json"})
        self.rng = random.Random(seed)

    def close(self) -> None:
        self.http.close()

    def schedule(
        self, pod: dict[str, Any], names: list[str], *, exclude: frozenset[str] = frozenset(), bind: bool = True, keep_failed: bool = False
    ) -> Attempt:
        meta = pod["metadata"]
        a = Attempt(meta["name"], time.perf_counter())
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        r = self.http.post("/filter", content=orjson.dumps(args))
        t = time.perf_counter()
        a.filter_ms = (t - a.t0) * 1000
        res = orjson.loads(r.content)
        if r.status_code != 200 or res.get("Error"):
            a.error = res.get("Error") or f"HTTP {r.status_code}"
        feasible = [n for n in res.get("NodeNames") or [] if n not in exclude]
        a.feasible = len(feasible)
        if keep_failed:
            a.failed = {**(res.get("FailedNodes") or {}), **(res.get("FailedAndUnresolvableNodes") or {})}
        if not feasible or not bind:
            a.t1 = time.perf_counter()
            return a
        best = feasible[0]
        if len(feasible) > 1:
            args["NodeNames"] = feasible
            t = time.perf_counter()
            scores = orjson.loads(self.http.post("/prioritize", content=orjson.dumps(args)).content)
            a.prioritize_ms = (time.perf_counter() - t) * 1000
            top = max(s["Score"] for s in scores)
            best = self.rng.choice([s["Host"] for s in scores if s["Score"] == top])
        t = time.perf_counter()
        r = self.http.post(
            "/bind", content=orjson.dumps({"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best})
        )
        a.bind_ms = (time.perf_counter() - t) * 1000
        a.error = orjson.loads(r.content).get("Error") or ""
        a.node = None if a.error else best
        a.t1 = time.perf_counter()
        return a


class Progress:
    def __init__(self, label: str, total: int, every: float = 5.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.t0 = self.last = time.perf_counter()
        self.done = 0

    def tick(self, n: int = 1, extra: str = "") -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            left = (self.total - self.done) / rate if rate and self.total else 0
            width = 30
            filled = int(width * self.done / self.total) if self.total else width
            print(
                f"    [{'#' * filled}{'.' * (width - filled)}] {self.label}: {self.done}/{self.total}, {rate:.0f}/s, ~{left:.0f} s left {extra}",
                flush=True,
            )


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(pct(values, 0.5), 2),
        "p90": round(pct(values, 0.9), 2),
        "p99": round(pct(values, 0.99), 2),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def run_pods(driver: Driver, label: str, pods: list[dict[str, Any]], names_for: Callable[[int], list[str]], **kw: Any) -> dict[str, Any]:
    """Schedule `pods` in order; pods/s, latency per verb, completions over time."""
    attempts: list[Attempt] = []
    progress = Progress(label, len(pods))
    t0 = time.perf_counter()
    for k, pod in enumerate(pods):
        a = driver.schedule(pod, names_for(k), **kw)
        attempts.append(a)
        progress.tick(extra=f"filter {a.filter_ms:.1f} ms")
    elapsed = time.perf_counter() - t0
    return attempts_result(attempts, elapsed, t0)


def attempts_result(attempts: list[Attempt], elapsed: float, t0: float) -> dict[str, Any]:
    bound = sum(1 for a in attempts if a.node)
    unschedulable = sum(1 for a in attempts if not a.feasible)
    return {
        "pods": len(attempts),
        "bound": bound,
        "unschedulable": unschedulable,
        "bind_errors": sorted({a.error for a in attempts if a.error})[:5],
        "seconds": round(elapsed, 2),
        "pods_per_s": round(len(attempts) / elapsed, 1) if elapsed else None,
        "latency_ms": {
            "filter": summary([a.filter_ms for a in attempts]),
            "prioritize": summary([a.prioritize_ms for a in attempts if a.prioritize_ms is not None]),
            "bind": summary([a.bind_ms for a in attempts if a.bind_ms is not None]),
            "pod": summary([(a.t1 - a.t0) * 1000 for a in attempts]),
        },
        "samples": {
            "filter_ms": [round(a.filter_ms, 3) for a in attempts],
            "done_s": [round(a.t1 - t0, 3) for a in attempts],
        },
    }


def env_info(env: Env) -> dict[str, Any]:
    return {
        "seed_s": round(env.seed_s, 2),
        "ready_s": round(env.ready_s, 2),
        "rss_mb": round(proc_status_mb(env.proc.pid, "VmRSS"), 1) if env.proc else None,
        "peak_rss_mb": round(proc_status_mb(env.proc.pid, "VmHWM"), 1) if env.proc else None,
        "extender_cpu_s": round(cpu_seconds(env.proc.pid), 1) if env.proc else None,
    }


def noop_runs(tmp: Path, label: str, pods: list[dict[str, Any]], names_for: Callable[[int], list[str]]) -> dict[str, Any]:
    proc, url = start_noop(tmp)
    try:
        driver = Driver(url)
        out = run_pods(driver, f"{label} no-op", pods, names_for)
        driver.close()
        return out
    finally:
        stop_process(proc)


# ---------------------------------------------------------------------- workloads


@dataclass
class Config:
    quick: bool = False
    modes: tuple[str, ...] = ("source", "cluster")

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def target(name: str, value: Any, limit: Any, ok: bool | None, unit: str = "", mode: str = "source") -> dict[str, Any]:
    return {"target": name, "value": value, "limit": limit, "unit": unit, "pass": ok, "mode": mode}


def run_modes(
    cfg: Config, tmp: Path, label: str, objs: list[dict[str, Any]], pods: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """The same pods, every node name offered, through the extender in each configured mode: mode -> result."""
    out: dict[str, Any] = {}
    for mode in cfg.modes:
        env = Env(mode, tmp, list(objs), label=label)
        try:
            env.start()
            print(f"    {label} {mode}: seeded in {env.seed_s:.1f} s, ready in {env.ready_s:.1f} s", flush=True)
            driver = Driver(env.url)
            res = run_pods(driver, f"{label} {mode}", pods, lambda _k: names)
            driver.close()
            res["env"] = env_info(env)
            out[mode] = res
        finally:
            env.stop()
    return out


def template_workload(
    cfg: Config, tmp: Path, label: str, spec: str, *, taint_all: bool = False, pods_full: int = 2500, pods_quick: int = 500
) -> dict[str, Any]:
    nodes, devices = 500, 10
    measured = cfg.n(pods_full, pods_quick)
    init = prefill(nodes, devices, devices // 2, spec, 0)
    objs = base_objects(nodes, devices, taint_all=taint_all)
    for pc in init:
        objs += pc.objects(pc.allocated)  # type: ignore[attr-defined]
    pcs = [PodClaim(len(init) + k, spec) for k in range(measured)]
    for pc in pcs:
        objs += pc.objects()
    pods = [pc.pod() for pc in pcs]
    names = [node_name(i) for i in range(nodes)]
    out: dict[str, Any] = {
        "workload": {
            "nodes": nodes,
            "devices_per_node": devices,
            "devices": nodes * devices,
            "init_pods": len(init),
            "measured_pods": measured,
            "claim_spec": SPECS[spec],
            "taint_rule_on_every_device": taint_all,
        }
    }
    print(f"  {label}: {nodes} nodes x {devices} devices, {len(init)} init pods, {measured} measured pods", flush=True)
    out["noop_before"] = noop_runs(tmp, label, pods, lambda _k: names)
    out.update(run_modes(cfg, tmp, label, objs, pods, names))
    out["noop_after"] = noop_runs(tmp, label, pods, lambda _k: names)
    noop = statistics.fmean([out["noop_before"]["pods_per_s"], out["noop_after"]["pods_per_s"]])
    out["noop_pods_per_s"] = round(noop, 1)
    for mode in cfg.modes:
        out[mode]["ratio_to_noop"] = round(out[mode]["pods_per_s"] / noop, 3)
    return out


def scheduling_with_template(cfg: Config, tmp: Path) -> dict[str, Any]:
    out = template_workload(cfg, tmp, "SchedulingWithResourceClaimTemplate", "template")
    out["targets"] = []
    for mode in cfg.modes:
        r = out[mode]
        out["targets"].append(
            target(
                "pods/s >= 0.8 x no-op (same run)",
                r["ratio_to_noop"],
                0.8,
                r["ratio_to_noop"] >= 0.8 if mode == "source" else None,
                "x",
                mode,
            )
        )
        p99 = r["latency_ms"]["filter"]["p99"]
        out["targets"].append(target("filter p99 <= 10 ms at 500 nodes", p99, 10, p99 <= 10 if mode == "source" else None, "ms", mode))
    return out


def toleration(cfg: Config, tmp: Path) -> dict[str, Any]:
    return template_workload(cfg, tmp, "Toleration", "toleration", taint_all=True, pods_full=1000, pods_quick=200)


def first_available(cfg: Config, tmp: Path) -> dict[str, Any]:
    return template_workload(cfg, tmp, "FirstAvailable", "first_available", pods_full=1000, pods_quick=200)


def steady_state(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Create one pod and delete the oldest at a constant rate, at 50 % occupancy; schedule what appears."""
    nodes, devices = 500, 10
    rate = 20.0
    duration = cfg.n(60, 15)
    init = prefill(nodes, devices, devices // 2, "template", 0)
    random.Random(7).shuffle(init)  # the oldest pods are spread over the nodes
    objs = base_objects(nodes, devices)
    names = [node_name(i) for i in range(nodes)]
    out: dict[str, Any] = {
        "workload": {"nodes": nodes, "devices_per_node": devices, "occupancy": 0.5, "rate_per_s": rate, "duration_s": duration}
    }
    print(f"  SteadyState: {nodes} x {devices}, 50 % occupied, create + delete {rate:g} pods/s for {duration} s", flush=True)
    for mode in cfg.modes:
        env = Env(mode, tmp, list(objs), label="SteadyState")
        live: list[tuple[str, list[dict[str, Any]]]] = [(pc.name, pc.objects(pc.allocated)) for pc in init]  # type: ignore[attr-defined]
        env.add_grouped(live)
        try:
            env.start()
            driver = Driver(env.url)
            import queue

            pending: queue.Queue[dict[str, Any] | None] = queue.Queue()
            created_at: dict[str, float] = {}
            total = int(duration * rate)
            progress = Progress(f"SteadyState {mode}", total)
            creator_errors: list[str] = []

            def creator(
                total: int = total,
                live: list[Any] = live,
                env: Any = env,
                created_at: dict[str, float] = created_at,
                pending: Any = pending,
                progress: Any = progress,
                creator_errors: list[str] = creator_errors,
            ) -> None:
                """kube-controller-manager's side: a pod (and its claim) every 1/rate s, the oldest deleted."""
                k = len(init)
                start = time.perf_counter()
                try:
                    for made in range(total):
                        time.sleep(max(0.0, start + made / rate - time.perf_counter()))
                        pc = PodClaim(k + made, "template")
                        name, old = live.pop(0)
                        env.delete(name, old)
                        made_objs = env.create(pc.name, pc.objects())
                        created_at[pc.name] = time.perf_counter()
                        live.append((pc.name, pc.objects()))
                        pending.put(next(o for o in made_objs if o["kind"] == "Pod"))
                        progress.tick()
                except Exception as e:
                    creator_errors.append(f"{type(e).__name__}: {e}")
                finally:
                    pending.put(None)

            attempts: list[Attempt] = []
            latency: list[float] = []
            unbound = 0
            t0 = time.perf_counter()
            thread = threading.Thread(target=creator, daemon=True)
            thread.start()
            while (pod := pending.get()) is not None:
                a = driver.schedule(pod, names)
                attempts.append(a)
                if a.node:
                    latency.append((a.t1 - created_at[a.pod]) * 1000)
                else:
                    unbound += 1
            thread.join()
            elapsed = time.perf_counter() - t0
            res = attempts_result(attempts, elapsed, t0)
            res["created"] = len(attempts)
            res["creator_errors"] = creator_errors
            res["created_to_bound_ms"] = summary(latency)
            res["not_bound"] = unbound
            res["env"] = env_info(env)
            out[mode] = res
            driver.close()
        finally:
            env.stop()
    return out


def window(names: list[str], size: int) -> Callable[[int], list[str]]:
    """kube-scheduler's percentageOfNodesToScore: `size` names, starting where the last cycle stopped."""
    n = len(names)

    def names_for(k: int) -> list[str]:
        start = (k * size) % n
        return [names[(start + i) % n] for i in range(min(size, n))]

    return names_for


def scale5k(cfg: Config, tmp: Path) -> dict[str, Any]:
    nodes, devices = 5000, 8
    p500 = cfg.n(500, 100)
    p5000 = cfg.n(100, 20)
    shapes = 3
    objs = base_objects(nodes, devices)
    # Like the reflector bench: 10,000 more pods, half without claims, half bound with a claim each.
    for p in range(5000):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{p:05d}", "namespace": NS, "uid": f"web-uid-{p:05d}"},
                "spec": {"nodeName": node_name(p), "containers": [{"name": "c", "image": "nginx"}]},
            }
        )
    bound = [PodClaim(100_000 + p, "template") for p in range(5000)]
    for p, pc in enumerate(bound):
        objs += pc.objects((node_name(p), f"instance-{devices - 1}"))
    burst_claims = [PodClaim(200_000 + c, "template") for c in range(5000)]
    for pc in burst_claims:
        objs.append(pc.claim_object())  # pending claims whose status the burst writes
    pcs = [PodClaim(k, "template") for k in range(p500 + p5000)]
    for pc in pcs:
        objs += pc.objects()
    probes = []
    for s in range(shapes):
        pc = PodClaim(300_000 + s, "template")
        objs += [new_shape_claim(pc, s), pc.pod()]
        probes.append(pc)
    names = [node_name(i) for i in range(nodes)]
    pods = [pc.pod() for pc in pcs]
    out: dict[str, Any] = {
        "workload": {
            "nodes": nodes,
            "devices_per_node": devices,
            "devices": nodes * devices,
            "other_pods": 10_000,
            "pods_500_names": p500,
            "pods_5000_names": p5000,
            "never_seen_shapes": shapes,
        }
    }
    print(f"  Scale5k: {nodes} x {devices}, {p500} pods with 500 names, {p5000} with 5,000, {shapes} never-seen shapes", flush=True)
    out["noop_500"] = noop_runs(tmp, "Scale5k 500 names", pods[:p500], window(names, 500))
    out["noop_5000"] = noop_runs(tmp, "Scale5k 5000 names", pods[p500:], lambda _k: names)
    for mode in cfg.modes:
        env = Env(mode, tmp, objs if mode == cfg.modes[-1] else list(objs), label="Scale5k")
        try:
            env.start()
            res: dict[str, Any] = {"env_after_ready": env_info(env)}
            print(
                f"    {mode}: seeded in {env.seed_s:.1f} s, ready in {env.ready_s:.1f} s, RSS {res['env_after_ready']['rss_mb']} MB (peak {res['env_after_ready']['peak_rss_mb']})",
                flush=True,
            )
            driver = Driver(env.url)
            first = []
            for pc in probes:
                # Bound like any pod: a pod that passes /filter and never gets its /bind would make the
                # next /filter wait for it (the placement gate, up to --placement-wait).
                a = driver.schedule(pc.pod(), names)
                first.append(round(a.filter_ms, 1))
                print(f"    first pod of a never-seen shape, 5,000 names: /filter {a.filter_ms:.0f} ms, {a.feasible} feasible", flush=True)
            res["never_seen_shape_filter_ms"] = first
            res["names_500"] = run_pods(driver, f"Scale5k {mode} 500 names", pods[:p500], window(names, 500))
            # The first nodes // 500 pods meet nodes with no verdict for this shape yet (cold); after that,
            # every node has one and only binds invalidate (warm: what a running workload sees).
            cold = nodes // 500
            fms = res["names_500"]["samples"]["filter_ms"]
            res["names_500"]["filter_ms_first_pass"] = summary(fms[:cold])
            res["names_500"]["filter_ms_warm"] = summary(fms[cold:])
            res["names_5000"] = run_pods(driver, f"Scale5k {mode} 5000 names", pods[p500:], lambda _k: names)
            used: set[str] = set()
            res["env_after_pods"] = env_info(env)
            if mode == "cluster":
                res["watch_burst"] = watch_burst(env, devices, burst_claims, slices=nodes, used=used)
            res["env"] = env_info(env)
            driver.close()
            out[mode] = res
        finally:
            env.stop()
    out["targets"] = []
    for mode in cfg.modes:
        r = out[mode]
        p99 = r["names_500"]["latency_ms"]["filter"]["p99"]
        out["targets"].append(
            target(
                "filter p99 <= 15 ms with 500 names (every pod, incl. the first pass over the nodes)",
                p99,
                15,
                p99 <= 15 if mode == "source" else None,
                "ms",
                mode,
            )
        )
        p99 = r["names_500"]["filter_ms_warm"].get("p99")
        out["targets"].append(
            target(
                "filter p99 <= 15 ms with 500 names (after the first pass: every node has a verdict for the shape)",
                p99,
                15,
                (p99 is not None and p99 <= 15) if mode == "source" else None,
                "ms",
                mode,
            )
        )
        first = r["names_500"]["filter_ms_first_pass"]
        out["targets"].append(
            target("filter with 500 names, first pass over the nodes (a shape's first pods), max", first.get("max"), None, None, "ms", mode)
        )
        p99 = r["names_5000"]["latency_ms"]["filter"]["p99"]
        out["targets"].append(target("filter p99 <= 60 ms with 5,000 names", p99, 60, p99 <= 60 if mode == "source" else None, "ms", mode))
        worst = max(r["never_seen_shape_filter_ms"])
        out["targets"].append(target("first pod of a never-seen shape over 40k devices <= 1 s", worst, 1000, worst <= 1000, "ms", mode))
        peak = r["env"]["peak_rss_mb"]
        with_burst = mode == "cluster"
        out["targets"].append(
            target(
                "peak RSS <= 512 MiB" + (" including a watch burst" if with_burst else " (no watch burst in source mode)"),
                peak,
                512 * 1.048576,
                peak <= 512 * 1.048576 if with_burst else None,
                "MB",
                mode,
            )
        )
    return out


def watch_burst(env: Env, devices: int, claims: list[PodClaim], *, slices: int, used: set[str]) -> dict[str, Any]:
    """5,000 slice updates (one attribute of every device) and 5,000 claim status updates, 32 writes in flight."""
    import aiohttp

    jobs: list[tuple[str, bytes]] = []
    for i in range(slices):
        s = resource_slice(i, devices, revision=1)
        jobs.append((api_path(s, item=True), orjson.dumps(s)))
        if i < len(claims):
            pc = claims[i]
            c = pc.claim_object((node_name(i), f"instance-{devices - 2}"))
            c["status"]["reservedFor"] = []
            got = env.api.get(api_path(c, item=True)).json()  # type: ignore[union-attr]
            got["status"] = {"allocation": c["status"]["allocation"]}
            jobs.append((api_path(c, item=True) + "/status", orjson.dumps(got)))
    before = tracker_events(env)
    t0 = time.perf_counter()

    async def push() -> None:
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)
        async with aiohttp.ClientSession(env.api_url, headers={"Content-Type": "application/json"}) as session:

            async def worker() -> None:
                while not queue.empty():
                    path, body = queue.get_nowait()
                    async with session.put(path, data=body) as r:
                        await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"PUT {path}: {r.status}")

            await asyncio.gather(*(worker() for _ in range(32)))

    asyncio.run(push())
    pushed = time.perf_counter() - t0
    want = before + len(jobs)
    peak_during = 0.0
    while time.perf_counter() - t0 < 600:
        peak_during = max(peak_during, proc_status_mb(env.proc.pid, "VmRSS"))  # type: ignore[union-attr]
        if tracker_events(env) >= want:
            break
        time.sleep(0.2)
    applied = time.perf_counter() - t0
    print(
        f"    watch burst: {len(jobs)} writes in {pushed:.1f} s, applied after {applied:.1f} s; peak RSS {proc_status_mb(env.proc.pid, 'VmHWM'):.0f} MB",
        flush=True,
    )  # type: ignore[union-attr]
    return {
        "writes": len(jobs),
        "push_s": round(pushed, 2),
        "applied_s": round(applied, 2),
        "rss_mb_after": round(proc_status_mb(env.proc.pid, "VmRSS"), 1),
        "peak_rss_mb": round(proc_status_mb(env.proc.pid, "VmHWM"), 1),
    }  # type: ignore[union-attr]


def tracker_events(env: Env) -> float:
    import re

    text = env.client.get("/metrics").text  # type: ignore[union-attr]
    return sum(
        float(m.group(3))
        for m in re.finditer(
            r'^dra_extender_tracker_events_total\{kind="(ResourceSlice|ResourceClaim)",type="([^"]+)"\} ([0-9.e+]+)$', text, re.M
        )
        if m.group(2) == "MODIFIED"
    )


# ---------------------------------------------------------------------- TaintChurn


def taint_churn(cfg: Config, tmp: Path) -> dict[str, Any]:
    duration = cfg.n(30, 10)
    out: dict[str, Any] = {"rule_rate_per_s": 10, "duration_s": duration, "sizes": {}}
    sizes = (("1k", 125, 8), ("40k", 5000, 8))
    for label, nodes, devices in sizes:
        out["sizes"][label] = {"in_process": rule_cost_in_process(nodes, devices, cfg.n(200, 60))}
        r = out["sizes"][label]["in_process"]
        print(
            f"  TaintChurn {label}: in-process rule add {r['add_us']['p50']} µs, delete {r['delete_us']['p50']} µs; filter after a rule change {r['filter_after_change_us']['p50']} µs",
            flush=True,
        )
    for label, nodes, devices in sizes:
        out["sizes"][label]["cluster"] = churn_http(tmp, "cluster", label, nodes, devices, duration)
    out["targets"] = []
    for label, *_ in sizes:
        c = out["sizes"][label]["cluster"]
        p99 = c["visible_ms"]["p99"] if c["visible_ms"]["n"] else None
        out["targets"].append(
            target(
                f"rule change visible in /filter p99 <= 100 ms ({label} devices)",
                p99,
                100,
                (p99 is not None and p99 <= 100) if label == "40k" else None,
                "ms",
                "cluster",
            )
        )
    a, b = out["sizes"]["1k"]["in_process"], out["sizes"]["40k"]["in_process"]
    growth = round(b["add_us"]["p50"] / max(a["add_us"]["p50"], 1e-9), 2)
    out["targets"].append(
        target(
            "rule cost grows with selected devices, not the cluster (in-process add, 40k / 1k; 8 devices selected)",
            growth,
            2.0,
            growth <= 2.0,
            "x",
            "in-process",
        )
    )
    vis = [out["sizes"][lbl]["cluster"]["visible_ms"].get("p50") for lbl in ("1k", "40k")]
    if all(v is not None for v in vis):
        out["targets"].append(
            target(
                "visibility p50, 40k / 1k (HTTP; includes the filter period)",
                round(vis[1] / max(vis[0], 1e-9), 2),
                2.0,
                None,
                "x",
                "cluster",
            )
        )
    return out


def churn_rule(n: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"churn-{n:05d}"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node},
            "taint": {"key": f"example.com/churn-{n:05d}", "effect": "NoSchedule"},
        },
    }


def rule_cost_in_process(nodes: int, devices: int, events: int) -> dict[str, Any]:
    """A rule over one pool (8 devices) added and deleted on a `nodes` x `devices` ClusterState, and the next /filter's verdicts."""
    from allocator.allocation import Allocator
    from allocator.cel import CelEnvironment
    from allocator.parse import parse_pod
    from extender.outcomes import OutcomeCache
    from tracker import events as ev
    from tracker.state import ClusterState

    cel = CelEnvironment()
    state = ClusterState(cel)
    objs = base_objects(nodes, devices)
    pc = PodClaim(0, "template")
    objs += pc.objects()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objs:
        groups.setdefault((o["kind"], o["apiVersion"].rpartition("/")[0]), []).append(o)
    gc.disable()
    for (kind, group), items in groups.items():
        state.replace(kind, group, items)
    for kind, group in [
        ("DeviceTaintRule", "resource.k8s.io"),
        ("ResourceSlicePatch", "resource.dra-extender.io"),
        ("DeviceTaintRule", "resource.dra-extender.io"),
        *groups,
    ]:
        state.mark_synced(kind, group)
    gc.enable()
    gc.collect()
    gc.freeze()
    cache = OutcomeCache(state, Allocator(cel))
    pod = parse_pod(pc.pod())
    claims, problem = state.pod_claims(pod)
    assert problem is None, problem
    sig = cache.signature(claims)
    names = [node_name(i) for i in range(min(nodes, 500))]
    node_objs = [(state.nodes.get(n), None) for n in names]
    cache.verdicts(sig, claims, node_objs)  # warm
    add, delete, after = [], [], []
    rv = 10_000_000
    for k in range(events):
        node = names[(k * 7) % len(names)]
        rule = churn_rule(k, node)
        rv += 1
        rule["metadata"]["resourceVersion"] = str(rv)
        t = time.perf_counter()
        state.apply(ev.ObjectEvent("ADDED", "DeviceTaintRule", "resource.k8s.io", rule["metadata"]["name"], rule))
        add.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        verdicts = cache.verdicts(sig, claims, node_objs)
        after.append((time.perf_counter() - t) * 1e6)
        assert not verdicts[names.index(node)].ok, "the rule did not reach the verdict"
        t = time.perf_counter()
        state.apply(ev.ObjectEvent("DELETED", "DeviceTaintRule", "resource.k8s.io", rule["metadata"]["name"], rule))
        delete.append((time.perf_counter() - t) * 1e6)
        cache.verdicts(sig, claims, node_objs)
    gc.unfreeze()
    return {
        "nodes": nodes,
        "devices": nodes * devices,
        "selected_devices": devices,
        "events": events,
        "add_us": summary(add),
        "delete_us": summary(delete),
        "filter_after_change_us": summary(after),
        "filter_names": len(names),
    }


def churn_http(tmp: Path, mode: str, label: str, nodes: int, devices: int, duration: int) -> dict[str, Any]:
    """Schedule while a writer adds and removes one-pool rules at 10/s; when does /filter first show each?"""
    churn_nodes = [node_name(i) for i in range(0, nodes, max(1, nodes // 20))][:20]
    exclude = frozenset(churn_nodes)
    rest = [node_name(i) for i in range(nodes) if node_name(i) not in exclude]
    schedulable = (nodes - len(churn_nodes)) * devices
    # The same number of pods at every size, so the driver's mix (filter + prioritize + bind while pods
    # last, then /filter of one waiting pod) and so the filter period are alike at 1k and 40k devices.
    n_pods = min(int(schedulable * 0.6), 500)
    objs = base_objects(nodes, devices)
    pcs = [PodClaim(k, "template") for k in range(n_pods)]
    for pc in pcs:
        objs += pc.objects()
    probe = PodClaim(999_999, "template")
    objs.append(probe.claim_object())
    env = Env(mode, tmp, objs, label=f"TaintChurn-{label}")
    print(
        f"  TaintChurn {label} {mode}: {nodes} x {devices}, {n_pods} pods, rules on {len(churn_nodes)} nodes at 10/s for {duration} s",
        flush=True,
    )
    try:
        env.start()
        print(f"    seeded in {env.seed_s:.1f} s, ready in {env.ready_s:.1f} s", flush=True)
        driver = Driver(env.url)
        names_for = window(rest, min(500, len(rest)))
        writes: list[tuple[float, str, str, str]] = []  # (t, added|deleted, node, key)
        stop = threading.Event()
        errors: list[str] = []

        def writer() -> None:
            live: list[tuple[dict[str, Any], str]] = []
            n = 0
            http = httpx.Client(base_url=env.api_url, timeout=30, headers={"Content-Type": "application/json"})
            next_t = time.perf_counter()
            try:
                while not stop.is_set():
                    next_t += 0.1
                    if len(live) < 5 or (n % 2 == 0 and len(live) < 8):
                        node = churn_nodes[n % len(churn_nodes)]
                        if any(nd == node for _, nd in live):
                            node = next(c for c in churn_nodes if all(nd != c for _, nd in live))
                        rule = churn_rule(n, node)
                        t = time.perf_counter()
                        r = http.post(api_path(rule), content=orjson.dumps(rule))
                        if r.status_code >= 300:
                            errors.append(r.text[:200])
                        else:
                            writes.append((t, "added", node, rule["spec"]["taint"]["key"]))
                            live.append((rule, node))
                        n += 1
                    else:
                        rule, node = live.pop(0)
                        t = time.perf_counter()
                        r = http.delete(api_path(rule, item=True))
                        if r.status_code >= 300:
                            errors.append(r.text[:200])
                        else:
                            writes.append((t, "deleted", node, rule["spec"]["taint"]["key"]))
                    time.sleep(max(0.0, next_t - time.perf_counter()))
            finally:
                http.close()

        # Warm-up: the first pods, scheduled before any rule is written, take the rotating window once
        # over every node, so each has a verdict for their shape (a shape's first pass is Scale5k's
        # figure, not a rule's).
        warm_ms = []
        warm = -(-len(rest) // len(names_for(0)))
        for k in range(warm):
            warm_ms.append(driver.schedule(pcs[k].pod(), churn_nodes + names_for(k), exclude=exclude).filter_ms)
        cpu0 = cpu_seconds(env.proc.pid)  # type: ignore[union-attr]
        thread = threading.Thread(target=writer, daemon=True)
        attempts: list[Attempt] = []
        observations: list[tuple[float, float, dict[str, str]]] = []  # (sent, received, churn node -> message)
        t0 = time.perf_counter()
        thread.start()
        progress = Progress(f"TaintChurn {label} {mode}", duration, every=5)
        last_tick = 0
        k = warm
        while time.perf_counter() - t0 < duration:
            # Every pod placed: keep filtering one pod, as for a pod that waits (never bound); the
            # same pod back in /filter: the placement gate does not wait for it.
            pod = pcs[k].pod() if k < len(pcs) else probe.pod()
            a = driver.schedule(pod, churn_nodes + names_for(k), exclude=exclude, bind=k < len(pcs), keep_failed=True)
            attempts.append(a)
            observations.append((a.t0, a.t0 + a.filter_ms / 1000, {n: m for n, m in a.failed.items() if n in exclude}))
            k += 1
            s = int(time.perf_counter() - t0)
            if s > last_tick:
                progress.tick(s - last_tick, extra=f"{len(writes)} rule writes")
                last_tick = s
        stop.set()
        thread.join()
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(env.proc.pid) - cpu0  # type: ignore[union-attr]
        visible: list[float] = []
        samples: list[tuple[float, str, float]] = []  # (seconds into the run, added|deleted, ms until visible)
        missed = 0
        for t_write, what, node, key in writes:
            seen = None
            for _sent, received, failed in observations:
                if received < t_write:
                    continue
                shows = key in failed.get(node, "")
                if (what == "added" and shows) or (what == "deleted" and not shows):
                    seen = received
                    break
            if seen is None:
                missed += 1
            else:
                visible.append((seen - t_write) * 1000)
                samples.append((round(t_write - t0, 3), what, round((seen - t_write) * 1000, 2)))
        res = attempts_result(attempts, elapsed, t0)
        res.pop("samples")
        gaps = [(b[1] - a[1]) * 1000 for a, b in itertools.pairwise(observations)]
        res.update(
            {
                "nodes": nodes,
                "devices": nodes * devices,
                "rule_writes": len(writes),
                "write_errors": errors[:3],
                "visible_ms": summary(visible),
                "visible_samples": samples,
                "warm_up_filter_ms": summary(warm_ms),
                "slow_filters": [
                    (round(a.t0 - t0, 3), round(a.filter_ms, 1), round((a.t1 - a.t0) * 1000, 1))
                    for a in attempts
                    if (a.t1 - a.t0) * 1000 > 50
                ],
                "not_seen_before_the_end": missed,
                "filter_period_ms": summary(gaps),
                "extender_cpu_s": round(cpu, 1),
                "extender_cpu_share": round(cpu / elapsed, 2),
                "env": env_info(env),
            }
        )
        print(
            f"    {len(writes)} rule writes; visible in /filter p50 {res['visible_ms'].get('p50')} / p99 {res['visible_ms'].get('p99')} ms; filter p99 {res['latency_ms']['filter'].get('p99')} ms",
            flush=True,
        )
        driver.close()
        return res
    finally:
        env.stop()


# ---------------------------------------------------------------------- slice events in-process


def slice_events(cfg: Config, _tmp: Path) -> dict[str, Any]:
    from bench.bench_reflector import slice_update_rates

    r = slice_update_rates(5000, 8, cfg.n(3000, 1000), 3 if not cfg.quick else 2)
    worst = min(r["taint"]["events_per_s"], r["generation"]["events_per_s"])
    r["targets"] = [
        target(
            "slice events applied in-process >= 3 x 853/s (8 devices, attributes unchanged: taint / generation)",
            worst,
            2559,
            worst >= 2559,
            "events/s",
            "in-process",
        ),
        target(
            "slice events, full change (every device's attributes), for reference",
            r["full"]["events_per_s"],
            None,
            None,
            "events/s",
            "in-process",
        ),
    ]
    print(
        f"  slice events in-process: taint {r['taint']['events_per_s']}/s, generation {r['generation']['events_per_s']}/s, full change {r['full']['events_per_s']}/s",
        flush=True,
    )
    return r


def partitions(cfg: Config, tmp: Path) -> dict[str, Any]:
    """500 nodes x 8 GPUs x 7 partitions drawing on per-GPU shared counters, beside the same 56 devices per node without counters.

    Both clusters take the same measured pods (one device each, from one
    template) with the same driver in the same run; the partitioned one must
    keep filter p99 <= 10 ms and pods/s within 10 % of the plain one.
    """
    nodes, gpus = 500, 8
    per_node = gpus * len(PARTITIONS_GI)
    measured = cfg.n(1000, 200)
    names = [node_name(i) for i in range(nodes)]
    out: dict[str, Any] = {
        "workload": {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "partitions_per_gpu": len(PARTITIONS_GI),
            "partition_sizes_gi": list(PARTITIONS_GI),
            "counter_set_gi": GPU_GI,
            "measured_pods": measured,
            "claim_spec": SPECS["template"],
        },
        "targets": [],
    }
    print(f"  Partitions: {nodes} nodes x {gpus} GPUs x {len(PARTITIONS_GI)} partitions, {measured} pods", flush=True)
    for variant in ("plain", "partitioned"):
        objs = base_objects(0, 0)
        for i in range(nodes):
            node = node_name(i)
            objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
            if variant == "plain":
                objs.append(node_slice(node, DRIVER, [{"name": f"instance-{j}"} for j in range(per_node)]))
            else:
                objs += partitioned_slices(node, DRIVER, gpus)
        pcs = [PodClaim(k, "template") for k in range(measured)]
        for pc in pcs:
            objs += pc.objects()
        pods = [pc.pod() for pc in pcs]
        out[variant] = run_modes(cfg, tmp, f"Partitions-{variant}", objs, pods, names)
    for mode in cfg.modes:
        plain, part = out["plain"][mode], out["partitioned"][mode]
        ratio = round(part["pods_per_s"] / plain["pods_per_s"], 3) if plain["pods_per_s"] else None
        out["partitioned"][mode]["ratio_to_plain"] = ratio
        p99 = part["latency_ms"]["filter"]["p99"]
        out["targets"].append(target("filter p99 <= 10 ms (partitioned)", p99, 10, p99 <= 10, "ms", mode))
        out["targets"].append(
            target("pods/s >= 0.9 x the same cluster without partitions", ratio, 0.9, ratio is not None and ratio >= 0.9, "x", mode)
        )
    return out


WORKLOADS: dict[str, Callable[[Config, Path], dict[str, Any]]] = {
    "SchedulingWithResourceClaimTemplate": scheduling_with_template,
    "SteadyState": steady_state,
    "Toleration": toleration,
    "FirstAvailable": first_available,
    "Scale5k": scale5k,
    "TaintChurn": taint_churn,
    "SliceEvents": slice_events,
    "Partitions": partitions,
}


# ---------------------------------------------------------------------- report


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    from bench.bench_reflector import machine as m

    return m()


def _lat(r: dict[str, Any], verb: str) -> str:
    v = r["latency_ms"][verb]
    return f"{v['p50']} / {v['p99']}" if v.get("n") else "-"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    w = result["workloads"]
    rows = [
        "# DRA workloads (`python -m bench workloads`)",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; load average {result['loadavg_before']} before, "
        f"{result['loadavg_after']} after (the machine is shared: figures are upper bounds on latency); "
        f"{'--quick' if result['quick'] else 'full'} run, {result['seconds']:.0f} s, started {result['started']}.",
        "",
        *(
            [
                "Re-run since, replacing their figures: "
                + "; ".join(
                    f"{', '.join(r['workloads'])} at {r['started']} (load {r['loadavg_before']} -> {r['loadavg_after']})"
                    for r in result["reruns"]
                ),
                "",
            ]
            if result.get("reruns")
            else []
        ),
        'Sequential driver ("extender alone"): /filter with the node names -> /prioritize with the feasible ones -> '
        "/bind to the best, one pod at a time, over HTTP (Go field names, nodeCacheCapable). `--source` mode binds in "
        "memory; cluster mode writes claim status and the Binding to the fake API server. The no-op extender "
        "(`bench/noop_extender.py`, same FastAPI + uvicorn stack) runs the same pods in the same run.",
        "",
        "## Targets",
        "",
        "| workload | target | mode | measured | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in w.items():
        for t in r.get("targets", []):
            verdict = "PASS" if t["pass"] is True else "FAIL" if t["pass"] is False else "(reported)"
            rows.append(f"| {name} | {t['target']} | {t['mode']} | {t['value']} {t['unit']} | **{verdict}** |")
    rows += [
        "",
        "## Throughput and latency",
        "",
        "| workload | mode | pods | pods/s | x no-op | filter p50 / p99 ms | prioritize p50 / p99 ms | bind p50 / p99 ms | bound | ready s | peak RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def row(name: str, mode: str, r: dict[str, Any], ratio: Any = "", env: dict[str, Any] | None = None) -> None:
        env = env or r.get("env") or {}
        rows.append(
            f"| {name} | {mode} | {r['pods']} | {r['pods_per_s']} | {ratio} | {_lat(r, 'filter')} | {_lat(r, 'prioritize')} | {_lat(r, 'bind')} | {r['bound']} | {env.get('ready_s', '')} | {env.get('peak_rss_mb', '')} |"
        )

    for name in ("SchedulingWithResourceClaimTemplate", "Toleration", "FirstAvailable"):
        r = w.get(name)
        if not r:
            continue
        row(name, "no-op (before)", r["noop_before"])
        for mode in ("source", "cluster"):
            if mode in r:
                row(name, mode, r[mode], r[mode]["ratio_to_noop"])
        row(name, "no-op (after)", r["noop_after"])
    r = w.get("Partitions")
    if r:
        for variant in ("plain", "partitioned"):
            for mode in ("source", "cluster"):
                if mode in r.get(variant, {}):
                    ratio = r[variant][mode].get("ratio_to_plain", "")
                    row(f"Partitions, {variant}", mode, r[variant][mode], f"{ratio} (x plain)" if ratio else "")
    r = w.get("SteadyState")
    if r:
        for mode in ("source", "cluster"):
            if mode in r:
                row(f"SteadyState ({r['workload']['rate_per_s']:g}/s)", mode, r[mode])
    r = w.get("Scale5k")
    if r:
        row("Scale5k, 500 names", "no-op", r["noop_500"])
        row("Scale5k, 5,000 names", "no-op", r["noop_5000"])
        for mode in ("source", "cluster"):
            if mode in r:
                row(
                    "Scale5k, 500 names",
                    mode,
                    r[mode]["names_500"],
                    round(r[mode]["names_500"]["pods_per_s"] / r["noop_500"]["pods_per_s"], 3),
                    r[mode]["env"],
                )
                row(
                    "Scale5k, 5,000 names",
                    mode,
                    r[mode]["names_5000"],
                    round(r[mode]["names_5000"]["pods_per_s"] / r["noop_5000"]["pods_per_s"], 3),
                    r[mode]["env"],
                )
    r = w.get("TaintChurn")
    if r:
        for label, s in r["sizes"].items():
            if "cluster" in s:
                row(f"TaintChurn {label} devices", "cluster", s["cluster"])
    if "SteadyState" in w:
        r = w["SteadyState"]
        rows += [
            "",
            "## SteadyState",
            "",
            "| mode | created | bound | created -> bound p50 / p99 ms | filter p99 ms |",
            "| --- | --- | --- | --- | --- |",
        ]
        for mode in ("source", "cluster"):
            if mode in r:
                c = r[mode]["created_to_bound_ms"]
                rows.append(
                    f"| {mode} | {r[mode]['created']} | {r[mode]['bound']} | {c.get('p50')} / {c.get('p99')} | {r[mode]['latency_ms']['filter'].get('p99')} |"
                )
    if "Scale5k" in w:
        r = w["Scale5k"]
        rows += [
            "",
            "## Scale5k",
            "",
            "| mode | never-seen shapes, /filter over 5,000 nodes (ms) | 500 names: first pass over the nodes p50 / max ms | 500 names after it: p50 / p99 ms | RSS after ready / peak | after the pods | after the watch burst (peak) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for mode in ("source", "cluster"):
            if mode in r:
                x = r[mode]
                b = x.get("watch_burst") or {}
                rows.append(
                    f"| {mode} | {x['never_seen_shape_filter_ms']} | {x['names_500']['filter_ms_first_pass'].get('p50')} / {x['names_500']['filter_ms_first_pass'].get('max')} | "
                    f"{x['names_500']['filter_ms_warm'].get('p50')} / {x['names_500']['filter_ms_warm'].get('p99')} | {x['env_after_ready']['rss_mb']} / {x['env_after_ready']['peak_rss_mb']} MB | "
                    f"{x['env_after_pods']['rss_mb']} / {x['env_after_pods']['peak_rss_mb']} MB | "
                    + (f"{b['rss_mb_after']} / {b['peak_rss_mb']} MB ({b['writes']} writes applied in {b['applied_s']} s)" if b else "-")
                    + " |"
                )
    if "TaintChurn" in w:
        r = w["TaintChurn"]
        rows += [
            "",
            "## TaintChurn",
            "",
            f"Rules over one pool (8 devices) added and removed at {r['rule_rate_per_s']}/s for {r['duration_s']} s while the driver "
            "schedules; visibility = from the write request to the first /filter answer that shows the change (resolution: the filter period).",
            "",
            "| devices | rule writes | visible p50 / p99 / max ms | not seen | filter period p50 ms | filter p50 / p99 ms | extender CPU | in-process add / delete µs (p50) | next /filter after a change µs (p50; names sent) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for _label, s in r["sizes"].items():
            c, ip = s.get("cluster"), s["in_process"]
            if c:
                v = c["visible_ms"]
                rows.append(
                    f"| {c['devices']} | {c['rule_writes']} | {v.get('p50')} / {v.get('p99')} / {v.get('max')} | {c['not_seen_before_the_end']} | "
                    f"{c['filter_period_ms'].get('p50')} | {_lat(c, 'filter')} | {c['extender_cpu_share']:.0%} | {ip['add_us']['p50']} / {ip['delete_us']['p50']} | {ip['filter_after_change_us']['p50']} ({ip['filter_names']} names) |"
                )
    if "SliceEvents" in w:
        r = w["SliceEvents"]
        rows += [
            "",
            "## Slice events in-process",
            "",
            f"{r['slices']} slices x {r['devices_per_slice']} devices, {r['events']} MODIFIED events each, parsed from JSON and applied to `ClusterState` "
            "(GC on, initial state frozen); best of the rounds.",
            "",
            "| what changed | events/s | µs/event |",
            "| --- | --- | --- |",
        ]
        for what in ("taint", "generation", "full"):
            rows.append(f"| {what} | {r[what]['events_per_s']} | {r[what]['us_per_event']} |")
    if result.get("profiles"):
        rows += ["", "## Profiles of the misses", ""]
        rows += result["profiles"]
    if result.get("notes"):
        rows += ["", "## Notes", "", *result["notes"]]
    rows.append("")
    return "\n".join(rows)


def _style(label: str) -> str:
    return ":" if "no-op" in label else "--" if "cluster" in label else "-"


def plots(result: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots drawn", file=sys.stderr)
        return []
    series: list[tuple[str, dict[str, Any]]] = []
    w = result["workloads"]
    for name in ("SchedulingWithResourceClaimTemplate", "Toleration", "FirstAvailable"):
        if name in w:
            series.append((f"{name} no-op", w[name]["noop_before"]))
            for mode in ("source", "cluster"):
                if mode in w[name]:
                    series.append((f"{name} {mode}", w[name][mode]))
    if "Scale5k" in w:
        for mode in ("source", "cluster"):
            if mode in w["Scale5k"]:
                series.append((f"Scale5k {mode} 500 names", w["Scale5k"][mode]["names_500"]))
                series.append((f"Scale5k {mode} 5000 names", w["Scale5k"][mode]["names_5000"]))
    if "SteadyState" in w:
        for mode in ("source", "cluster"):
            if mode in w["SteadyState"]:
                series.append((f"SteadyState {mode}", w["SteadyState"][mode]))
    paths = []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, r in series:
        xs = sorted(r["samples"]["filter_ms"])
        if xs:
            ax.step(
                xs,
                [(i + 1) / len(xs) for i in range(len(xs))],
                where="post",
                linestyle=_style(label),
                label=f"{label} (p99 {r['latency_ms']['filter']['p99']} ms)",
            )
    ax.set(
        xscale="log",
        xlabel="/filter latency (ms, log scale)",
        ylabel="fraction of calls",
        title="/filter latency distribution per workload",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "workloads-latency.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, r in series:
        done = r["samples"]["done_s"]
        if not done:
            continue
        end = int(max(done)) + 1
        buckets = [0] * end
        for d in done:
            buckets[min(int(d), end - 1)] += 1
        ax.plot(range(end), buckets, label=label, linewidth=1, linestyle=_style(label))
    ax.set(xlabel="seconds since the workload's first pod", ylabel="pods per second", title="pods/s over time (sequential driver)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "workloads-throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="scheduler_perf-style DRA workloads over HTTP, beside a no-op extender")
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
        help="a smaller version (also BENCH_QUICK=1)",
    )
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run only these workloads (repeatable)")
    parser.add_argument("--mode", action="append", choices=("source", "cluster"), help="only this mode (repeatable; default both)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="workloads", help="results file stem (default workloads)")
    parser.add_argument("--profile", type=Path, help="run every extender under cProfile and write the dumps (and their top entries) here")
    parser.add_argument(
        "--render",
        action="store_true",
        help="only redraw workloads.md and the plots from workloads.json (e.g. after editing workloads_notes.md)",
    )
    parser.add_argument(
        "--merge", action="store_true", help="keep the other workloads of an existing results file and replace only those run now"
    )
    args = parser.parse_args(argv)
    if args.render:
        result = json.loads((args.out / f"{args.name}.json").read_text())
        notes_path = Path(__file__).with_name("workloads_notes.md")
        if notes_path.exists():
            result["profiles"] = notes_path.read_text().splitlines()
        (args.out / f"{args.name}.md").write_text(markdown(result))
        plots(result, args.out)
        return
    if args.profile is not None:
        global PROFILE_DIR
        PROFILE_DIR = args.profile.resolve()
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    cfg = Config(quick=args.quick, modes=tuple(args.mode or ("source", "cluster")))
    names = args.only or list(WORKLOADS)
    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-workloads-"))
    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(),
        "quick": cfg.quick,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "loadavg_before": loadavg(),
        "workloads": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for name in names:
            print(f"== workload {name}", flush=True)
            t = time.perf_counter()
            result["workloads"][name] = WORKLOADS[name](cfg, tmp)
            result["workloads"][name]["seconds"] = round(time.perf_counter() - t, 1)
            result["workloads"][name]["loadavg_after"] = loadavg()
            print(f"== workload {name} done in {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["loadavg_after"] = loadavg()
    previous = args.out / f"{args.name}.json"
    if args.merge and previous.exists():
        old = json.loads(previous.read_text())
        merged = {**old["workloads"], **result["workloads"]}
        result["workloads"] = {k: merged[k] for k in WORKLOADS if k in merged}
        result["reruns"] = [
            *old.get("reruns", []),
            {
                "workloads": names,
                "started": result["started"],
                "loadavg_before": result["loadavg_before"],
                "loadavg_after": result["loadavg_after"],
                "seconds": result["seconds"],
            },
        ]
        for k in ("started", "loadavg_before", "seconds"):
            result[k] = old[k]
    notes_path = Path(__file__).with_name("workloads_notes.md")
    if notes_path.exists():
        result["profiles"] = notes_path.read_text().splitlines()
    (args.out / f"{args.name}.json").write_text(json.dumps(result, separators=(",", ":")) + "\n")  # compact: per-pod samples
    (args.out / f"{args.name}.md").write_text(markdown(result))
    for p in plots(result, args.out) if args.name == "workloads" else []:
        print(f"plot: {p}")
    print(markdown(result))


if __name__ == "__main__":
    main()
