"""What the benchmarks alone need: where results go, the extender under cProfile, and the in-process
harness of the per-pod CPU benches (bench_scale5k_cpu, bench_partitions_cpu).

The rest of what every benchmark uses (objects, processes, readings) is in
`kubesim`, shared with the tests.
"""

from __future__ import annotations

import asyncio
import copy
import cProfile
import io
import json
import os
import platform
import pstats
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.workloads.cluster import PodClaim
from kubesim.measure import pct
from kubesim.processes import ROOT, start_server
from tracker import events as ev
from tracker.resources import api_version as registry_api_version
from tracker.source import SourceError, merge_patch

RESULTS = ROOT / "bench" / "results"


def start_extender_profiled(
    args: list[str], port: int, log_path: Path, profile_out: Path, *, timeout: float = 600
) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """`start_extender` under cProfile: the profile is written to `profile_out` when the process stops (SIGTERM)."""
    cmd = [
        sys.executable,
        "-m",
        "cProfile",
        "-o",
        str(profile_out),
        "-m",
        "dra_extender.cli",
        "serve",
        *args,
        "--listen",
        f"127.0.0.1:{port}",
    ]
    return start_server(cmd, port, log_path, timeout=timeout)


def profile_top(profile: Path, limit: int = 25, *, sort: str = "tottime") -> str:
    """The top entries of a cProfile dump, as text."""
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(profile), stream=buf)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return buf.getvalue()


def record_run(name: str, tag: str, result: dict[str, Any]) -> dict[str, Any]:
    """Keep `result` as run `tag` in bench/results/<name>.json; every run kept there, by tag."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    runs[tag] = result
    path.write_text(json.dumps(runs, indent=2) + "\n")
    return runs


# ---------------------------------------------------------------------- the per-pod CPU benches, in process


class MemorySource:
    """The scheduled pods and their claims held in memory, as an API server would; a pod's binding is
    echoed into the state like a watch event."""

    description = "bench"

    def __init__(self, state: Any, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.state = state
        self.objects = objects  # (kind, namespace/name) -> object
        self.rv = 50_000_000

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        raw = self.objects.get((kind, f"{namespace}/{name}"))
        return copy.deepcopy(raw) if raw is not None else None

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        key = (ev.RESOURCE_CLAIM, f"{namespace}/{name}")
        raw = copy.deepcopy(self.objects[key])
        patch = copy.deepcopy(patch)
        patch.get("metadata", {}).pop("resourceVersion", None)
        raw = merge_patch(raw, patch)
        raw["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[key] = raw
        return copy.deepcopy(raw)

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        key = f"{namespace}/{name}"
        raw = copy.deepcopy(self.objects[(ev.POD, key)])
        raw["spec"]["nodeName"] = node
        raw["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[(ev.POD, key)] = raw
        self.state.apply(ev.ObjectEvent("MODIFIED", ev.POD, ev.GROUP_CORE, key, copy.deepcopy(raw)))

    async def create_event(self, event: dict[str, Any]) -> None:
        pass

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        raise SourceError("bench: no extended-resource claims")

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        raise SourceError("bench: no extended-resource claims")

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise SourceError("bench: no extended-resource claims")

    def api_version(self, kind: str, group: str) -> str:
        return registry_api_version(kind, group)


def scheduled_objects(objs: list[dict[str, Any]], pcs: list[PodClaim]) -> dict[tuple[str, str], dict[str, Any]]:
    """What /bind reads and writes: the measured pods and their claims (the API server's copies), by (kind, namespace/name)."""
    scheduled = {name for pc in pcs for name in (pc.name, pc.claim)}
    return {
        (o["kind"], f"{o['metadata']['namespace']}/{o['metadata']['name']}"): o
        for o in objs
        if o["kind"] in (ev.POD, ev.RESOURCE_CLAIM) and o["metadata"]["name"] in scheduled
    }


async def one_pod(service: Any, pc: PodClaim, names_body: bytes, rng: random.Random) -> dict[str, float]:
    from extender import wire

    raw_pod = service.source.objects[(ev.POD, f"default/{pc.name}")]
    pod_json = orjson.dumps(raw_pod)
    body = b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + names_body + b"}"
    out: dict[str, float] = {}
    t = time.thread_time()
    args = wire.parse_extender_args(body)
    passed, failed = await service.filter(args)
    answer = wire.filter_result(args, passed, unresolvable=failed)
    out["filter"] = time.thread_time() - t
    offered = orjson.loads(answer)["NodeNames"]  # kube-scheduler's side: not timed
    body = orjson.dumps({"Pod": raw_pod, "Nodes": None, "NodeNames": offered})
    t = time.thread_time()
    args = wire.parse_extender_args(body)
    scores = service.prioritize_without_state(args)
    if scores is None:
        scores = service.prioritize(args)
    answer = wire.priority_list(scores)
    out["prioritize"] = time.thread_time() - t
    ranked = orjson.loads(answer)
    best = max(s["Score"] for s in ranked)
    node = rng.choice([s["Host"] for s in ranked if s["Score"] == best])
    body = orjson.dumps({"PodName": pc.name, "PodNamespace": "default", "PodUID": pc.uid, "Node": node})
    t = time.thread_time()
    bargs = wire.parse_binding_args(body)
    refusal = await service.bind(bargs)
    error = "" if refusal is None else refusal.message
    wire.binding_result(error)
    out["bind"] = time.thread_time() - t
    if error:
        raise RuntimeError(f"bind {pc.name} on {node}: {error}")
    out["offered"] = len(offered)
    return out


async def time_pods(
    service: Any, pcs: list[PodClaim], names_body: bytes, rng: random.Random, profile: tuple[int, int] | None, gap: float = 0.0
) -> tuple[dict[str, list[float]], list[int], str | None]:
    """Each pod's verbs timed (`one_pod`): CPU seconds per verb and in total, the nodes each /filter offered, and,
    with `profile` (how many top entries by own time, then by cumulative time), a cProfile of them as text.
    `gap`: seconds the loop is left free between pods (the scheduler's own work), for background tasks."""
    prof = cProfile.Profile() if profile is not None else None
    samples: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": [], "total": []}
    offered: list[int] = []
    if prof is not None:
        prof.enable()
    for pc in pcs:
        if gap:
            await asyncio.sleep(gap)
        r = await one_pod(service, pc, names_body, rng)
        for verb in ("filter", "prioritize", "bind"):
            samples[verb].append(r[verb])
        samples["total"].append(r["filter"] + r["prioritize"] + r["bind"])
        offered.append(int(r["offered"]))
    if prof is None or profile is None:
        return samples, offered, None
    prof.disable()
    s = io.StringIO()
    ps = pstats.Stats(prof, stream=s)
    ps.sort_stats("tottime").print_stats(profile[0])
    ps.sort_stats("cumulative").print_stats(profile[1])
    return samples, offered, s.getvalue()


def run_header(label: str, load_start: list[float]) -> dict[str, Any]:
    """The fields every in-process bench's result starts with: what ran, when, on which Python, at what load."""
    return {
        "label": label,
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "python": platform.python_version(),
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
    }


def summary(values: list[float]) -> dict[str, float]:
    """Mean, median, p99 and max of `values` (seconds), in milliseconds."""
    return {
        "mean": round(sum(values) / len(values) * 1000, 3),
        "p50": round(pct(values, 0.5) * 1000, 3),
        "p99": round(pct(values, 0.99) * 1000, 3),
        "max": round(max(values) * 1000, 3),
    }
