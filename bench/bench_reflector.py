"""Reflector throughput: `dra-extender serve --kubeconfig` against the fake API server.

A large cluster is seeded into the fake API server (`python -m kubesim.fakeapi`,
a subprocess): N ResourceSlices x M devices (one node each), P pods (half with
their own ResourceClaim), a DeviceClass with a CEL selector and two taint
rules (an upstream one on one pool, one of ours with effect None over the whole
driver). Then:

1. list: time from starting the extender to `/readyz` 200, with objects/s and
   MB/s of the lists it read, the per-kind times it logged, and its RSS after
   the lists (after `gc.freeze()`, docs/dependencies.md#pythons-garbage-collector);
2. watch: as fast as the API takes them, S slice updates (one attribute
   changed) and C claim status updates (an allocation each); how long until the
   extender has applied the last one (its `dra_extender_tracker_events`
   counter, then `/debug/objects` against every PUT's resourceVersion);
3. the same bytes in-process: the list pages and watch lines the server sent,
   parsed and applied to a `ClusterState` here, to tell the extender's own
   cost from the fake server's.

CPU seconds of both processes are sampled around each phase: on 2 cores, the
process near one CPU-second per second is the bottleneck.

    .venv/bin/python -m bench.bench_reflector [--slices 5000] [--devices 8] [--pods 10000]
        [--slice-updates 5000] [--claim-updates 5000] [--parallel 32]

Results: bench/results/reflector.json and reflector.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

from bench.common import RESULTS
from kubesim import objects
from kubesim.measure import Cpu, loadavg, machine, pct, proc_status_mb
from kubesim.objects import device_class, node_slice
from kubesim.processes import free_port, seed, start_extender, start_fake_api, stop_process

DRIVER = "gpu.example.com"
NAMESPACE = "default"


# ---------------------------------------------------------------------- the cluster


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def resource_slice(i: int, devices: int, revision: int = 0) -> dict[str, Any]:
    node = node_name(i)
    devs = []
    for j in range(devices):
        d: dict[str, Any] = {
            "name": f"gpu-{j}",
            "attributes": {
                "model": {"string": "h100" if j % 2 else "a100"},
                "index": {"int": j},
                "uuid": {"string": f"GPU-{i:05d}-{j:02d}-3f1e-4c2a-9b7d"},
                "driverVersion": {"version": "550.54.15"},
                "firmware": {"string": f"rev-{revision}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if j == 0 and i % 10 == 0:
            d["taints"] = [{"key": f"{DRIVER}/unmonitored", "effect": "None"}]
        devs.append(d)
    return node_slice(node, DRIVER, devs)


def cluster(slices: int, devices: int, pods: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        device_class(DRIVER, DRIVER),
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "maintenance"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": node_name(0)},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
            },
        },
        {
            "apiVersion": "resource.dra-extender.io/v1alpha1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "fleet-unmonitored"},
            "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": "example.com/unmonitored", "effect": "None"}},
        },
    ]
    for i in range(slices):
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i), "labels": {"zone": f"z{i % 4}"}}})
        objs.append(resource_slice(i, devices))
    probe = claim(0)
    probe["metadata"]["name"] = "probe"
    objs.append(probe)
    for p in range(pods):
        with_claim = p % 2 == 0
        spec: dict[str, Any] = {"schedulerName": "dra-scheduler", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        if with_claim:
            objs.append(claim(p // 2))
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{p // 2:05d}"}]
        objs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{p:05d}", "namespace": NAMESPACE}, "spec": spec})
    return objs


def claim(c: int) -> dict[str, Any]:
    return objects.claim(f"claim-{c:05d}", NAMESPACE, device_class=DRIVER)


def probe_filter_args(slices: int, uid: str, nodes: int = 100) -> bytes:
    """/filter for a pod with an unallocated one-GPU claim over `nodes` nodes, as kube-scheduler sends it.

    The same pod each time (one UID): a pod back in /filter is not waited for by the placement gate,
    whereas a new pod that passed /filter and never got its /bind made every later /filter wait up to
    --placement-wait (1 s). Verdicts are shared by claim signature, so a new UID would not bypass them.
    """
    return orjson.dumps(
        {
            "Pod": {
                "metadata": {"name": "probe", "namespace": NAMESPACE, "uid": uid},
                "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "probe"}], "containers": [{"name": "c"}]},
            },
            "Nodes": None,
            "NodeNames": [node_name(i * max(1, slices // nodes)) for i in range(min(nodes, slices))],
        }
    )


def claim_status(c: int, slices: int, devices: int) -> dict[str, Any]:
    """An allocation of a distinct device per claim (what a scheduler writes at bind)."""
    pool = node_name(c % slices)
    device = f"gpu-{(c // slices) % devices}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{c:05d}", "namespace": NAMESPACE},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}]},
            }
        },
    }


# ---------------------------------------------------------------------- processes


# ---------------------------------------------------------------------- list phase


def list_paths() -> list[tuple[str, str, str, str]]:
    """(kind, group, version, collection path) of every list the extender makes, as its reflectors do."""
    from tracker.resources import CORE_RESOURCES, OWN_PATCHES, OWN_RULES, upstream_rules

    upstream = upstream_rules("v1beta2")
    return [(r.kind, r.group, r.version, r.collection()) for r in (*CORE_RESOURCES, upstream, OWN_RULES, OWN_PATCHES)]


def fetch_pages(api: str, page_size: int = 500) -> dict[tuple[str, str, str], list[bytes]]:
    pages: dict[tuple[str, str, str], list[bytes]] = {}
    with httpx.Client(base_url=api, timeout=120) as http:
        for kind, group, version, path in list_paths():
            token = ""
            out: list[bytes] = []
            while True:
                r = http.get(path, params={"limit": page_size, **({"continue": token} if token else {})})
                r.raise_for_status()
                out.append(r.content)
                token = (orjson.loads(r.content).get("metadata") or {}).get("continue") or ""
                if not token:
                    break
            pages[(kind, group, version)] = out
    return pages


def listed_lines(log_text: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in log_text.splitlines():
        if '"listed"' not in line:
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if rec.get("msg") == "listed":
            out[rec["resource"]] = {"items": rec["items"], "seconds": rec["seconds"]}
    return out


# ---------------------------------------------------------------------- watch phase


def tracker_counts(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in re.finditer(r'^dra_extender_tracker_events_total\{kind="([^"]+)",type="([^"]+)"\} ([0-9.e+]+)$', text, re.M):
        out[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3))
    return out


async def push_updates(api: str, slices: int, devices: int, n_slices: int, n_claims: int, parallel: int) -> dict[str, Any]:
    """PUT slice updates and claim status updates interleaved, `parallel` in flight; final RV per object."""
    jobs: list[tuple[str, str, bytes]] = []
    for k in range(max(n_slices, n_claims)):
        if k < n_slices:
            s = resource_slice(k % slices, devices, revision=1 + k // slices)
            jobs.append((s["metadata"]["name"], f"/apis/resource.k8s.io/v1/resourceslices/{s['metadata']['name']}", orjson.dumps(s)))
        if k < n_claims:
            c = claim_status(k, slices, devices)
            name = c["metadata"]["name"]
            jobs.append(
                (f"{NAMESPACE}/{name}", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{name}/status", orjson.dumps(c))
            )
    final: dict[str, str] = {}
    queue: asyncio.Queue[tuple[str, str, bytes]] = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    started = time.perf_counter()
    async with aiohttp.ClientSession(
        api, headers={"Content-Type": "application/json"}, connector=aiohttp.TCPConnector(limit=parallel)
    ) as session:

        async def worker() -> None:
            while not queue.empty():
                key, path, body = queue.get_nowait()
                async with session.put(path, data=body) as r:
                    data = await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"PUT {path}: {r.status} {data[:300]!r}")
                    final[key] = orjson.loads(data)["metadata"]["resourceVersion"]

        await asyncio.gather(*(worker() for _ in range(parallel)))
    return {"final": final, "push_s": time.perf_counter() - started, "count": len(jobs)}


async def raw_watch(api: str, path: str, rv: str, want: int, timeout: float = 120) -> tuple[list[bytes], float]:
    """The watch lines the server sends from `rv` (history replay), `want` object events of them."""
    lines: list[bytes] = []
    started = time.perf_counter()
    async with aiohttp.ClientSession(api, read_bufsize=2**21) as session:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": str(int(timeout))}
        async with session.get(path, params=params, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            got = 0
            while got < want:
                line = await r.content.readline()
                if not line:
                    break
                if b'"BOOKMARK"' in line[:40]:
                    continue
                lines.append(line)
                got += 1
    return lines, time.perf_counter() - started


# ---------------------------------------------------------------------- in-process


def in_process(pages: dict[tuple[str, str, str], list[bytes]], watch: dict[str, list[bytes]]) -> dict[str, Any]:
    """The extender's apply path on the same bytes: parse + ClusterState.replace, then the watch lines."""
    from allocator.cel import CelEnvironment
    from tracker import events as ev
    from tracker.state import ClusterState

    out: dict[str, Any] = {"list": {}, "watch": {}}
    # A first pass warms what is cached per process (CEL transpilation, imports); then GC off, GC on.
    for gc_during_apply in (None, False, True):
        state = ClusterState(CelEnvironment())
        total_parse = total_apply = 0.0
        objects = 0
        gc.collect()
        for (kind, group, version), kind_pages in pages.items():
            api_version = f"{group}/{version}" if group else version
            gc.disable()
            t = time.perf_counter()
            items: list[dict[str, Any]] = []
            for body in kind_pages:
                for item in orjson.loads(body).get("items") or []:
                    item.setdefault("kind", kind)
                    item.setdefault("apiVersion", api_version)
                    items.append(item)
            parsed = time.perf_counter()
            if gc_during_apply:
                gc.enable()
            state.replace(kind, group, items)
            state.mark_synced(kind, group)
            applied = time.perf_counter()
            gc.enable()
            total_parse += parsed - t
            total_apply += applied - parsed
            objects += len(items)
            if gc_during_apply is False:
                out["list"][f"{kind}.{group}" if group else kind] = {
                    "items": len(items),
                    "parse_s": round(parsed - t, 3),
                    "apply_s": round(applied - parsed, 3),
                }
        if gc_during_apply is None:
            continue
        key = "gc_enabled_during_apply" if gc_during_apply else "gc_disabled"
        out[f"list_total_{key}"] = {
            "objects": objects,
            "parse_s": round(total_parse, 3),
            "apply_s": round(total_apply, 3),
            "objects_per_s": round(objects / (total_parse + total_apply)),
        }
        assert state.ready, state.missing()
    gc.freeze()
    # Watch: the state built last (GC on, as the extender's reflector runs it), timing every collection.
    pauses: list[tuple[int, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append((info["generation"], time.perf_counter() - started.pop()))

    gc.callbacks.append(on_gc)
    for name, (kind, group) in {"slices": (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE), "claims": (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE)}.items():
        lines = watch.get(name) or []
        t = time.perf_counter()
        for line in lines:
            event = orjson.loads(line)
            obj = event["object"]
            obj.setdefault("kind", kind)
            state.apply(ev.ObjectEvent(event["type"], kind, group, ev.object_key(kind, obj), obj))
        took = time.perf_counter() - t
        full = [d for g, d in pauses if g == 2]
        out["watch"][name] = {
            "events": len(lines),
            "seconds": round(took, 3),
            "events_per_s": round(len(lines) / took) if took else None,
            "gc_seconds": round(sum(d for _, d in pauses), 3),
            "full_collections": len(full),
            "max_gc_pause_ms": round(max((d for _, d in pauses), default=0) * 1000, 1),
        }
        pauses.clear()
    gc.callbacks.remove(on_gc)
    out["unfrozen_tracked_objects_after_watch"] = len(gc.get_objects())
    gc.unfreeze()
    return out


def slice_update_rates(slices: int = 5000, devices: int = 8, events: int = 3000, repeat: int = 3) -> dict[str, Any]:
    """In-process ResourceSlice MODIFIED events/s by what changed, on a `slices` x `devices` state (docs/performance.md).

    - `taint`: one device's taint added or removed (attributes and capacity unchanged);
    - `generation`: the pool generation and metadata.generation bumped, devices unchanged;
    - `full`: every device's attributes changed (a driver upgrade: firmware and uuid).

    Each event is a fresh JSON parse of the slice (as the watch delivers it), applied with
    `ClusterState.apply`, with GC on after `gc.freeze()` of the initial state (as the
    extender runs). The best of `repeat` rounds is reported (a shared 2-core machine).
    """
    from allocator.cel import CelEnvironment
    from tracker import events as ev
    from tracker.state import ClusterState

    state = ClusterState(CelEnvironment())
    objs = cluster(slices, devices, 0)
    by_kind: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objs:
        group = o["apiVersion"].rpartition("/")[0]
        by_kind.setdefault((o["kind"], group), []).append(o)
    gc.disable()
    for (kind, group), items in by_kind.items():
        state.replace(kind, group, items)
    for kind, group in [
        *list(by_kind),
        ("ResourceClaim", "resource.k8s.io"),
        ("Pod", ""),
        ("ResourceClaimTemplate", "resource.k8s.io"),
        ("ResourceSlicePatch", "resource.dra-extender.io"),
    ]:
        state.mark_synced(kind, group)
    gc.enable()
    gc.collect()
    gc.freeze()
    rv = 10_000_000

    def body(i: int, what: str, k: int) -> bytes:
        s = resource_slice(i, devices, revision=k if what == "full" else 0)
        if what == "full":
            for d in s["spec"]["devices"]:
                d["attributes"]["uuid"] = {"string": f"GPU-{i:05d}-{d['name']}-rev{k}"}
        if what == "taint" and k % 2 == 1:
            s["spec"]["devices"][1]["taints"] = [{"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}]
        if what == "generation":
            s["spec"]["pool"]["generation"] = 1 + k
            s["metadata"]["generation"] = 1 + k
        return orjson.dumps(s)

    out: dict[str, Any] = {"slices": slices, "devices_per_slice": devices, "events": events}
    for what in ("taint", "generation", "full"):
        best: float | None = None
        for r in range(repeat):
            lines = []
            for e in range(events):
                k = 1 + r * (events // slices + 2) + e // slices
                lines.append(body(e % slices, what, k))
            t = time.perf_counter()
            for line in lines:
                rv += 1
                obj = orjson.loads(line)
                obj["metadata"]["resourceVersion"] = str(rv)
                state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, obj["metadata"]["name"], obj))
            took = time.perf_counter() - t
            best = took if best is None else min(best, took)
        assert best is not None, "repeat >= 1"
        out[what] = {"events_per_s": round(events / best), "us_per_event": round(best / events * 1e6, 1)}
    gc.unfreeze()
    return out


# ---------------------------------------------------------------------- run


def run(slices: int, devices: int, pods: int, n_slice_updates: int, n_claim_updates: int, parallel: int) -> dict[str, Any]:
    n_claims = (pods + 1) // 2
    n_claim_updates = min(n_claim_updates, n_claims)
    tmp = Path(tempfile.mkdtemp(prefix="dra-bench-reflector-"))
    api_proc, api, kubeconfig = start_fake_api(tmp)
    ext: subprocess.Popen[bytes] | None = None
    result: dict[str, Any] = {
        "machine": machine(),
        "workload": {
            "slices": slices,
            "devices_per_slice": devices,
            "devices": slices * devices,
            "nodes": slices,
            "pods": pods,
            "claims": n_claims,
            "rules": 2,
            "slice_updates": n_slice_updates,
            "claim_status_updates": n_claim_updates,
            "parallel_writes": parallel,
        },
    }
    try:
        print(f"seeding the fake API server: {slices} slices x {devices} devices, {pods} pods, {n_claims} claims", flush=True)
        result["seed_seconds"] = _seed(api, cluster(slices, devices, pods))

        # -------------------------------------------------------------- 1. list
        port = free_port()
        log_path = tmp / "extender.log"
        cpu = Cpu({"fakeapi": api_proc.pid})
        started = time.perf_counter()
        ext, client = start_extender(["--kubeconfig", str(kubeconfig), "--standalone", "--log-format", "json"], port, log_path)
        cpu.pids["extender"] = ext.pid
        cpu.start["extender"] = 0.0  # its CPU since it started
        ready_s = time.perf_counter() - started
        result["list"], pages = _list_phase(api, ext.pid, cpu, ready_s, log_path)

        # -------------------------------------------------------------- 2. watch
        before = tracker_counts(client.get("/metrics").text)
        rv_before = str(httpx.get(f"{api}/_fake/state").json()["resourceVersion"])
        print(f"  pushing {n_slice_updates} slice updates + {n_claim_updates} claim status updates, {parallel} in flight", flush=True)
        quiet = _quiet_filters(client, slices)
        cpu = Cpu({"fakeapi": api_proc.pid, "extender": ext.pid})
        load = _Load(api, port, slices, devices, n_slice_updates, n_claim_updates, parallel, before)
        pushed, applied_s, _t0 = asyncio.run(load.run())
        result["watch"] = _watch_result(client, ext.pid, cpu.done(), pushed, applied_s, quiet, load)

        # -------------------------------------------------------------- 3. the same bytes in-process
        print("  in-process: list pages and watch lines through ClusterState", flush=True)
        watch_lines: dict[str, list[bytes]] = {}
        replay: dict[str, float] = {}
        for name, path, want in (
            ("slices", "/apis/resource.k8s.io/v1/resourceslices", n_slice_updates),
            ("claims", "/apis/resource.k8s.io/v1/resourceclaims", n_claim_updates),
        ):
            watch_lines[name], replay[name] = asyncio.run(raw_watch(api, path, rv_before, want))
        result["fake_server_watch_replay_events_per_s"] = {k: round(len(watch_lines[k]) / v) if v else None for k, v in replay.items()}
        result["in_process"] = in_process(pages, watch_lines)
        print("  in-process: slice updates by what changed (taint / generation / full)", flush=True)
        result["in_process"]["slice_update_kinds"] = slice_update_rates(slices, devices)
        client.close()
        return result
    finally:
        if ext is not None:
            stop_process(ext)
        stop_process(api_proc)


def _seed(api: str, objs: list[dict[str, Any]]) -> float:
    """POST the objects to the fake API server in lists of 2,000; the seconds it took."""
    t = time.perf_counter()
    with httpx.Client(base_url=api, timeout=300) as http:
        seed(http, objs)
        counts = http.get("/_fake/state").json()["objects"]
    seconds = round(time.perf_counter() - t, 2)
    print(f"  seeded {len(objs)} objects in {seconds} s: {counts}", flush=True)
    return seconds


def _list_phase(
    api: str, ext_pid: int, cpu: Cpu, ready_s: float, log_path: Path
) -> tuple[dict[str, Any], dict[tuple[str, str, str], list[bytes]]]:
    """The initial lists: how fast the extender was ready, at what CPU and memory; and the pages it read, for phase 3."""
    list_cpu = cpu.done()
    rss_ready = proc_status_mb(ext_pid, "VmRSS")
    hwm_ready = proc_status_mb(ext_pid, "VmHWM")
    print(f"  ready after {ready_s:.2f} s, RSS {rss_ready:.0f} MB (peak {hwm_ready:.0f} MB); CPU {list_cpu}", flush=True)
    pages = fetch_pages(api)
    list_bytes = sum(len(b) for ps in pages.values() for b in ps)
    list_objects = sum(len(orjson.loads(b).get("items") or []) for ps in pages.values() for b in ps)
    logged = listed_lines(log_path.read_text())
    with httpx.Client(base_url=api, timeout=120) as http:
        reqs = http.get("/_fake/requests").json()
    lists = [r for r in reqs if r["verb"] == "list" and r["status"] == 200]
    server_list_s = sum(r["duration_ms"] or 0 for r in lists) / 1000
    return {
        "ready_seconds": round(ready_s, 2),
        "objects": list_objects,
        "bytes": list_bytes,
        "mb": round(list_bytes / 1e6, 1),
        "objects_per_s": round(list_objects / ready_s),
        "mb_per_s": round(list_bytes / 1e6 / ready_s, 1),
        "list_requests": len(lists),
        "fake_server_handler_seconds": round(server_list_s, 2),
        "extender_logged": logged,
        "cpu": list_cpu,
        "rss_mb_after_list": round(rss_ready, 1),
        "peak_rss_mb_during_list": round(hwm_ready, 1),
    }, pages


def _quiet_filters(client: httpx.Client, slices: int) -> list[float]:
    """The same /filter on a quiet extender, for comparison: 20 times, ms."""
    quiet: list[float] = []
    for _k in range(20):
        body = probe_filter_args(slices, "probe")
        t = time.perf_counter()
        client.post("/filter", content=body, headers={"Content-Type": "application/json"}).raise_for_status()
        quiet.append((time.perf_counter() - t) * 1000)
    return quiet


class _Load:
    """Phase 2: the updates pushed while the extender's tracker counts are sampled and a scheduler's /filter probes it."""

    def __init__(
        self, api: str, port: int, slices: int, devices: int, n_slices: int, n_claims: int, parallel: int, before: dict[str, float]
    ) -> None:
        self.api, self.port, self.slices, self.devices = api, port, slices, devices
        self.n_slices, self.n_claims, self.parallel = n_slices, n_claims, parallel
        self.before = before
        self.want_s = before.get("ResourceSlice/MODIFIED", 0) + n_slices
        self.want_c = before.get("ResourceClaim/MODIFIED", 0) + n_claims
        self.samples: list[tuple[float, float, float]] = []
        self.filter_ms: list[float] = []

    async def run(self) -> tuple[dict[str, Any], float | None, float]:
        t0 = time.perf_counter()
        sample_task = asyncio.create_task(self._sampler(t0))
        done = asyncio.Event()
        probe_task = asyncio.create_task(self._prober(done))
        pushed = await push_updates(self.api, self.slices, self.devices, self.n_slices, self.n_claims, self.parallel)
        applied = await sample_task
        done.set()
        await probe_task
        return pushed, applied, t0

    async def _sampler(self, t0: float) -> float | None:
        """Seconds until the tracker applied every update (None: not within 600 s)."""
        before = self.before
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=60) as http:
            while True:
                counts = tracker_counts((await http.get("/metrics")).text)
                s, c = counts.get("ResourceSlice/MODIFIED", 0), counts.get("ResourceClaim/MODIFIED", 0)
                now = time.perf_counter() - t0
                self.samples.append(
                    (round(now, 3), s - before.get("ResourceSlice/MODIFIED", 0), c - before.get("ResourceClaim/MODIFIED", 0))
                )
                if s >= self.want_s and c >= self.want_c:
                    return now
                if now > 600:
                    return None
                await asyncio.sleep(0.1)

    async def _prober(self, done: asyncio.Event) -> None:
        """A scheduler's /filter calls (one at a time, as kube-scheduler makes them) while events arrive."""
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=60) as http:
            while not done.is_set():
                t = time.perf_counter()
                body = probe_filter_args(self.slices, "probe")
                r = await http.post("/filter", content=body, headers={"Content-Type": "application/json"})
                r.raise_for_status()
                self.filter_ms.append((time.perf_counter() - t) * 1000)
                await asyncio.sleep(0.05)


def _watch_result(
    client: httpx.Client,
    ext_pid: int,
    watch_cpu: dict[str, float],
    pushed: dict[str, Any],
    applied_s: float | None,
    quiet: list[float],
    load: _Load,
) -> dict[str, Any]:
    """Phase 2's figures; every updated object must be in the view at the resourceVersion its last PUT returned."""
    view = client.get("/debug/objects").json()["objects"]
    stale = [
        k
        for k, rv in pushed["final"].items()
        if (view["ResourceClaim.resource.k8s.io"] if "/" in k else view["ResourceSlice.resource.k8s.io"]).get(k) != rv
    ]
    n = pushed["count"]
    filter_ms = load.filter_ms
    watch = {
        "updates": n,
        "push_seconds": round(pushed["push_s"], 2),
        "api_accepted_per_s": round(n / pushed["push_s"]),
        "applied_seconds": round(applied_s, 2) if applied_s else None,
        "applied_events_per_s": round(n / applied_s) if applied_s else None,
        "lag_after_last_write_s": round(applied_s - pushed["push_s"], 2) if applied_s else None,
        "objects_not_at_last_rv": len(stale),
        "cpu": watch_cpu,
        "rss_mb_after_watch": round(proc_status_mb(ext_pid, "VmRSS"), 1),
        "filter_100_nodes_ms_quiet": {"p50": round(pct(quiet, 0.5), 1), "max": round(max(quiet), 1), "n": len(quiet)},
        "filter_100_nodes_ms_during_watch": {
            "p50": round(pct(filter_ms, 0.5), 1),
            "p99": round(pct(filter_ms, 0.99), 1),
            "max": round(max(filter_ms), 1) if filter_ms else None,
            "n": len(filter_ms),
        },
        "samples": load.samples,
    }
    print(
        f"  watch: {watch['applied_events_per_s']} events/s applied, API took {watch['api_accepted_per_s']}/s; CPU {watch_cpu}",
        flush=True,
    )
    return watch


def markdown(r: dict[str, Any]) -> str:
    w, lst, wat, ip, m = r["workload"], r["list"], r["watch"], r["in_process"], r["machine"]
    gc_off, gc_on = ip["list_total_gc_disabled"], ip["list_total_gc_enabled_during_apply"]
    lc, wc = lst["cpu"], wat["cpu"]
    rows = [
        "# Reflector benchmark (`python -m bench.bench_reflector`)",
        "",
        f"{w['slices']} ResourceSlices x {w['devices_per_slice']} devices ({w['devices']} devices, {w['nodes']} nodes), "
        f"{w['pods']} pods ({w['claims']} with a claim), {w['rules']} taint rules; fake API server in a subprocess. "
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}.",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| start -> /readyz 200 (process start, imports, every list, CEL warm-up) | {lst['ready_seconds']} s |",
        f"| objects listed | {lst['objects']} ({lst['mb']} MB of JSON) |",
        f"| list throughput, end to end | {lst['objects_per_s']} objects/s, {lst['mb_per_s']} MB/s |",
        f"| CPU during start-up: extender / fake server | {lc.get('extender_cpu_s')} / {lc.get('fakeapi_cpu_s')} s in {lc['wall_s']} s |",
        f"| extender RSS after the lists (gc.freeze) / peak | {lst['rss_mb_after_list']} / {lst['peak_rss_mb_during_list']} MB |",
        f"| watch: updates pushed ({w['slice_updates']} slices, {w['claim_status_updates']} claim statuses, {w['parallel_writes']} in flight) | {wat['updates']} in {wat['push_seconds']} s ({wat['api_accepted_per_s']}/s accepted by the API) |",
        f"| watch: all applied by the extender after (while answering a /filter every 50 ms) | {wat['applied_seconds']} s ({wat['applied_events_per_s']} events/s; {wat['lag_after_last_write_s']} s after the last write) |",
        f"| CPU during the watch phase: extender / fake server / bench client | {wc['extender_cpu_s']} / {wc['fakeapi_cpu_s']} / {wc['bench_client_cpu_s']} s in {wc['wall_s']} s |",
        f"| extender RSS after the watch phase | {wat['rss_mb_after_watch']} MB |",
        f"| /filter (100 nodes) quiet: p50 / max | {wat['filter_100_nodes_ms_quiet']['p50']} / {wat['filter_100_nodes_ms_quiet']['max']} ms |",
        f"| /filter (100 nodes) while the events arrive: p50 / p99 / max | {wat['filter_100_nodes_ms_during_watch']['p50']} / {wat['filter_100_nodes_ms_during_watch']['p99']} / {wat['filter_100_nodes_ms_during_watch']['max']} ms (n={wat['filter_100_nodes_ms_during_watch']['n']}) |",
        f"| fake server replaying the watch history (slices / claims) | {r['fake_server_watch_replay_events_per_s']['slices']} / {r['fake_server_watch_replay_events_per_s']['claims']} events/s |",
        f"| in-process: parse + apply the same list pages (GC off) | {gc_off['parse_s']} + {gc_off['apply_s']} s = {gc_off['objects_per_s']} objects/s |",
        f"| in-process: the same with GC on while applying | {gc_on['parse_s']} + {gc_on['apply_s']} s = {gc_on['objects_per_s']} objects/s |",
        f"| in-process: apply the same watch lines (slices / claims) | {ip['watch']['slices']['events_per_s']} / {ip['watch']['claims']['events_per_s']} events/s |",
        *(
            [
                f"| in-process: slice updates whose attributes did not change, taint / generation only ({ip['slice_update_kinds']['events']} events each) "
                f"| {ip['slice_update_kinds']['taint']['events_per_s']} / {ip['slice_update_kinds']['generation']['events_per_s']} events/s "
                f"(target >= 3 x 853 = 2559: {'PASS' if min(ip['slice_update_kinds']['taint']['events_per_s'], ip['slice_update_kinds']['generation']['events_per_s']) >= 2559 else 'FAIL'}) |",
                f"| in-process: slice updates changing every device's attributes (full change) | {ip['slice_update_kinds']['full']['events_per_s']} events/s |",
            ]
            if "slice_update_kinds" in ip
            else []
        ),
        f"| in-process: of which GC (slices / claims) | {ip['watch']['slices']['gc_seconds']} of {ip['watch']['slices']['seconds']} s ({ip['watch']['slices']['full_collections']} full collections, longest pause {ip['watch']['slices']['max_gc_pause_ms']} ms) / {ip['watch']['claims']['gc_seconds']} of {ip['watch']['claims']['seconds']} s |",
        "",
        "Per kind, as the extender logged its lists (wall time, including waiting for the server) and in-process (parse / apply):",
        "",
        "| kind | items | extender list s | in-process parse s | in-process apply s |",
        "| --- | --- | --- | --- | --- |",
    ]
    logged = lst["extender_logged"]
    from tracker.resources import resource_for

    for kind, v in ip["list"].items():
        base, _, group = kind.partition(".")
        p = resource_for(base, group).plural
        rows.append(f"| {kind} | {v['items']} | {logged.get(p, {}).get('seconds', '')} | {v['parse_s']} | {v['apply_s']} |")
    rows += ["", *r.get("notes", []), ""]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="reflector list/watch throughput against the fake API server")
    parser.add_argument("--slices", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--slice-updates", type=int, default=5000)
    parser.add_argument("--claim-updates", type=int, default=5000)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = loadavg()
    result = run(args.slices, args.devices, args.pods, args.slice_updates, args.claim_updates, args.parallel)
    result["machine"]["loadavg"] = {"before": load_before, "after": loadavg()}
    result["notes"] = notes(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reflector.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "reflector.md").write_text(markdown(result))
    print(markdown(result))


# What this benchmark found, measured on the same 2-core machine with the defaults (kept with the results).
FINDINGS = [
    "- Fixed: the reflectors re-enabled GC before turning a list into state (`sink.replace`), and the first "
    "reflector to finish re-enabled it for the others. With GC off through replace and the readiness warm-up "
    "(then `gc.freeze()`), start -> ready went from 7.49 s to 5.84 s (in-process apply: 7.2 s with GC on, 4.6 s off).",
    "- Fixed: a watch stream's buffered lines are read without suspending, so a burst of events held the event "
    "loop: /filter (100 nodes, 12 ms quiet) took p50 384 ms, max 2.3 s while the 10,000 events arrived (16 calls "
    "answered in 10 s). With a yield after each event: p50 27 ms, max 0.5 s. The extender's CPU is then shared "
    "with the scheduler's calls, so the events' wall time grows; per extender CPU-second it is unchanged.",
    "- Open: after `gc.freeze()` every object the watch creates is young again; full collections scan all of "
    "them (about 0.9 M after 4,500 slice updates: 0.4 s per collection, ~40 % of slice-apply time in-process, and "
    "the remaining /filter outliers). Re-freezing after full collections would fix it but freezes whatever "
    "cyclic garbage forms later (slice churn makes almost none: 51 objects per 3,000 replacements); not done.",
    "- The fake API server is not the bottleneck: it accepts ~1,400 writes/s using about half a core, replays its "
    "watch history at >50,000 events/s and serves the initial lists with ~5 % of a core; the extender runs at "
    "90-100 % of one core in both phases. A slice update (8 devices) costs ~1.2 ms in the extender: parsing the "
    "devices (~30 %), the patched views and taint rules, the CEL activation of each new device version for the "
    "class warm-up, and GC.",
]


def notes(r: dict[str, Any]) -> list[str]:
    """Who was the bottleneck, from the CPU figures, then the findings."""
    out = []
    load = r["machine"].get("loadavg")
    if load:
        out.append(f"- load average {load['before']} before the run, {load['after']} after (a shared machine: rates are lower bounds).")
    lc, wc = r["list"]["cpu"], r["watch"]["cpu"]
    for phase, c in (("start-up", lc), ("watch", wc)):
        wall = c["wall_s"] or 1
        ext, api = c.get("extender_cpu_s", 0) / wall, c.get("fakeapi_cpu_s", 0) / wall
        busiest = "the fake API server" if api > ext else "the extender"
        out.append(f"- {phase}: extender busy {ext:.0%} of one core, fake API server {api:.0%}; the bottleneck is {busiest}.")
    return [*out, "", "Findings:", "", *FINDINGS]


if __name__ == "__main__":
    main()
