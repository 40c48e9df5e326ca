"""The extender's CPU per pod at 5,000 node names, in process (the Scale5k workload).

The Scale5k cluster (5,000 nodes x 8 devices, 5,000 bound pods with a
claim each, 5,000 pods without claims) is built in a `ClusterState`; each pod
of a ResourceClaimTemplate then goes through what kube-scheduler sends with
`percentageOfNodesToScore: 100`: /filter with all 5,000 names, /prioritize
with the names /filter returned, /bind on the node with the best score (ties
broken at random, as the scheduler does). Each verb is timed as its HTTP route
runs it (parse the body, decide, encode the answer), CPU time of this thread;
HTTP framing and the hop between the server's threads are not in it (the
cluster-mode run of `bench_workloads` measures those, with the process's CPU).

/bind writes through an in-memory source: a write returns the object with a
new resourceVersion and is applied to the state as the watch would deliver it.

    .venv/bin/python -m bench.bench_scale5k_cpu [--pods N] [--profile] [--memory] [--lean]

`--profile` adds a cProfile of the pods (top entries as text); `--memory`
a tracemalloc summary of the state after the pods (what holds the memory).
Results land in bench/results/scale5k-cpu.{json,md} (and -profile.txt,
-memory.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import resource
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import orjson

from bench.common import RESULTS, MemorySource, one_pod, record_run, run_header, scheduled_objects, summary, time_pods
from bench.workloads.cluster import PodClaim, base_objects, new_shape_claim, node_name
from kubesim.objects import daemon_pods, heavy_metadata, heavy_node, heavy_pod
from tracker import events as ev
from tracker.resources import resource_for

NODES, DEVICES = 5000, 8
SHAPES = 3  # never-seen claim shapes probed after the pods


def scale5k_objects(pods: int, heavy: bool = True, bound: int = 5000, others: int = 5000) -> tuple[list[dict[str, Any]], list[PodClaim]]:
    """The cluster; `heavy`: every object as a real API server lists it (kubesim/objects.py), with two DaemonSet pods per node."""
    objs = base_objects(NODES, DEVICES)
    for p in range(others):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{p:05d}", "namespace": "default", "uid": f"web-uid-{p:05d}", "resourceVersion": "2"},
                "spec": {"nodeName": node_name(p), "containers": [{"name": "c", "image": "nginx"}]},
            }
        )
    for p in range(bound):
        objs += PodClaim(100_000 + p, "template").objects((node_name(p), f"instance-{DEVICES - 1}"))
    pcs = [PodClaim(k, "template") for k in range(pods)]
    for pc in pcs:
        objs += pc.objects()
    for s in range(SHAPES):  # pods whose claim has a selector no pod had: the first pod of a new shape
        pc = PodClaim(300_000 + s, "template")
        objs += [new_shape_claim(pc, s), pc.pod()]
        pcs.append(pc)
    if heavy:
        objs = [make_heavy(o) for o in objs]
        for i in range(NODES):
            objs += daemon_pods(node_name(i), i)
    rv = 1000
    for o in objs:
        rv += 1
        o["metadata"].setdefault("resourceVersion", str(rv))
    return objs, pcs


def make_heavy(o: dict[str, Any]) -> dict[str, Any]:
    if o["kind"] == "Node":
        return heavy_node(o["metadata"]["name"], o["metadata"].get("labels"))
    if o["kind"] == "Pod":
        return heavy_pod(o)
    return heavy_metadata(o, "kube-controller-manager" if o["kind"] == ev.RESOURCE_CLAIM else "dra-driver")


class PagedLists:
    """The API server's side of the initial lists: each kind's objects as 500-item JSON pages
    (zlib-compressed while held, so the bench's own copy is small beside the state built from it)."""

    def __init__(self, groups: dict[tuple[str, str], list[dict[str, Any]]], page_size: int) -> None:
        self.pages: dict[str, list[bytes]] = {}
        for (kind, group), items in groups.items():
            path = resource_for(kind, group).collection()
            chunks = [items[i : i + page_size] for i in range(0, len(items), page_size)] or [[]]
            self.pages[path] = [
                zlib.compress(
                    orjson.dumps(
                        {"metadata": {"resourceVersion": "1000", "continue": str(n + 1) if n + 1 < len(chunks) else ""}, "items": c}
                    ),
                    1,
                )
                for n, c in enumerate(chunks)
            ]

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, **_: Any) -> tuple[int, bytes]:
        page = int((query or {}).get("continue") or 0)
        return 200, zlib.decompress(self.pages[path][page])


async def build(
    pods: int,
    offer_nodes: int | None = None,
    heavy: bool = True,
    frames: int = 1,
    whole_lists: bool = False,
    bound: int = 5000,
    others: int = 5000,
) -> tuple[Any, list[PodClaim], dict[str, float]]:
    """The Service on a state listed as the extender lists it: each kind's pages through tracker.apiserver.reflector's
    `Reflector.list` (decode, lighten, apply). The intake is traced (`frames` per allocation): its peak and what
    stays are the Python heap the extender's initial lists cost; tracing stays on when `frames` > 1."""
    from allocator.allocation import Allocator
    from allocator.cel import CelEnvironment
    from extender.service import build_service
    from serving.metrics import Metrics
    from tracker.apiserver.reflector import LIST_PAGE_SIZE, Freshness, Reflector
    from tracker.state import ClusterState

    objs, pcs = scale5k_objects(pods, heavy, bound, others)
    held = scheduled_objects(objs, pcs)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objs:
        groups.setdefault((o["kind"], o["apiVersion"].rpartition("/")[0]), []).append(o)
    kinds = list(groups)
    lists = PagedLists(groups, LIST_PAGE_SIZE)
    del objs, groups
    gc.collect()
    state = ClusterState(CelEnvironment())
    if whole_lists:  # each list held whole, then replaced (as before the lists were streamed)
        state.streams_initial_lists = False
    tracemalloc.start(frames)
    rv: dict[tuple[str, str], str] = {}
    for kind, group in kinds + [k for k in state.required if k not in kinds]:
        if kind in (ev.POD, ev.RESOURCE_CLAIM, ev.RESOURCE_SLICE, ev.NODE, ev.DEVICE_CLASS, ev.RESOURCE_CLAIM_TEMPLATE):
            res = resource_for(kind, group)
            if res.collection() not in lists.pages:
                lists.pages[res.collection()] = [zlib.compress(b'{"metadata":{"resourceVersion":"1000"},"items":[]}')]
            transport: Any = lists  # lists only: the bench never watches
            reflector = Reflector(
                res, state, transport, freshness=Freshness(3600.0), stats={"lists": 0}, last_resource_versions=rv, watch_timeout_seconds=290
            )
            await reflector.list()
        else:
            state.replace(kind, group, [])
            state.mark_synced(kind, group)
    current, peak = tracemalloc.get_traced_memory()
    if frames <= 1:
        tracemalloc.stop()
    del lists
    gc.collect()
    gc.freeze()  # as the reflector does once the initial lists are in
    extra: dict[str, Any] = {} if offer_nodes is None else {"offer_nodes": offer_nodes}
    service = build_service(state, MemorySource(state, held), Allocator(state.cel), Metrics(), placement_wait=0.05, claim_wait=0, **extra)
    return service, pcs, {"intake_peak_mb": round(peak / 2**20, 1), "intake_held_mb": round(current / 2**20, 1)}


def rss_mb() -> float:
    """This process's resident set now (not the peak: the build's transient garbage is not state)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def top_allocations(snapshot: tracemalloc.Snapshot, limit: int = 30) -> str:
    stats = snapshot.statistics("traceback")
    total = sum(s.size for s in stats)
    lines = [f"traced {total / 1e6:.1f} MB in {sum(s.count for s in stats)} blocks; top {limit} allocation sites (3 frames each):", ""]
    for s in stats[:limit]:
        lines.append(f"{s.size / 1e6:8.1f} MB {s.count:9d} blocks")
        for frame in s.traceback.format()[-6:]:
            lines.append("    " + frame.strip())
    return "\n".join(lines)


async def run(
    pods: int,
    warm: int,
    profile: bool,
    memory: bool,
    label: str,
    offer_nodes: int | None = None,
    heavy: bool = True,
    whole_lists: bool = False,
    bound: int = 5000,
    others: int = 5000,
) -> dict[str, Any]:
    load_start = list(os.getloadavg())
    import extender.service  # noqa: F401  # the interpreter and the extender's code: what every process holds before any object
    import tracker.state  # noqa: F401

    rss_code = rss_mb()
    t0 = time.perf_counter()
    service, pcs, intake = await build(
        pods + warm, offer_nodes, heavy, frames=3 if memory else 1, whole_lists=whole_lists, bound=bound, others=others
    )
    build_s = time.perf_counter() - t0
    gc.collect()
    rss_built = rss_mb()
    names_body = orjson.dumps([node_name(i) for i in range(NODES)])
    rng = random.Random(1)
    # The shape's first pass over 5,000 nodes is Scale5k's "first pod" figure, not this one's.
    for pc in pcs[:warm]:
        await one_pod(service, pc, names_body, rng)
    probes = pcs[len(pcs) - SHAPES :]
    pcs = pcs[: len(pcs) - SHAPES]
    samples, offered, profile_text = await time_pods(service, pcs[warm:], names_body, rng, (35, 35) if profile else None)
    first_shape = []
    for pc in probes:  # wall clock too: the scheduler waits for it
        t = time.perf_counter()
        r = await one_pod(service, pc, names_body, rng)
        first_shape.append(
            {"filter_cpu_ms": round(r["filter"] * 1000, 1), "filter_bind_wall_ms": round((time.perf_counter() - t) * 1000, 1)}
        )
    result: dict[str, Any] = {
        **run_header(label, load_start),
        "nodes": NODES,
        "devices": NODES * DEVICES,
        "pods": pods,
        "warm_pods": warm,
        "objects": "heavy (as a real API server lists them)" if heavy else "lean",
        "lists": "held whole" if whole_lists else "applied page by page",
        "bound_pods_with_claims": bound,
        "pods_without_claims": others,
        "build_s": round(build_s, 1),
        "rss_code_mb": rss_code,
        "rss_after_build_mb": round(rss_built, 1),
        **intake,
        # What a real extender's peak would be: its code, then the lists' peak (the bench's own objects aside).
        "predicted_peak_rss_mb": round(rss_code + intake["intake_peak_mb"], 1),
        "rss_after_pods_mb": rss_mb(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "offered_per_filter": {"min": min(offered), "max": max(offered), "mean": round(sum(offered) / len(offered), 1)},
        "cpu_ms": {k: summary(v) for k, v in samples.items()},
        "never_seen_shape": first_shape,
    }
    if profile_text is not None:
        result["profile_text"] = profile_text
    if memory:
        gc.collect()
        result["memory_text"] = top_allocations(tracemalloc.take_snapshot())
        tracemalloc.stop()
    return result


def write(result: dict[str, Any], tag: str) -> None:
    text = {k: result.pop(k) for k in ("profile_text", "memory_text") if k in result}
    runs = record_run("scale5k-cpu", tag, result)
    if "profile_text" in text:
        (RESULTS / f"scale5k-cpu-profile-{tag}.txt").write_text(
            f"# cProfile of {result['pods']} pods at {NODES} names ({result['label']}); load {result['load_average_start']}\n\n"
            + text["profile_text"]
        )
    if "memory_text" in text:
        (RESULTS / f"scale5k-memory-{tag}.txt").write_text(
            f"# tracemalloc of the in-process Scale5k state after {result['pods']} pods ({result['label']}); load {result['load_average_start']}\n\n"
            + text["memory_text"]
            + "\n"
        )
    lines = [
        "# Extender CPU per pod at 5,000 node names, in process (`python -m bench.bench_scale5k_cpu`)",
        "",
        "Scale5k cluster (5,000 nodes x 8 devices, 5,000 bound pods with a claim, 5,000 without) in one `ClusterState`; each pod: "
        "/filter with all 5,000 names, /prioritize with the nodes /filter returned, /bind on the best-scored node. CPU time of the "
        "thread per verb: parse the body, decide, encode the answer (HTTP framing not included). Warm: the shape's first pass "
        "over the nodes is done before the timed pods. Target: filter + prioritize + bind <= 5 ms.",
        "",
        "| run | when | load avg start -> end | pods | offered by /filter (mean) | filter mean/p99 ms | prioritize mean/p99 ms | bind mean/p99 ms | total mean/p50/p99 ms | RSS after build / after pods / peak MB | initial lists: traced peak / held MB (objects) | never-seen shape: /filter CPU ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for tag_, r in runs.items():
        c = r["cpu_ms"]
        lines.append(
            f"| {tag_}: {r['label']} | {r['when']} | {r['load_average_start']} -> {r['load_average_end']} | {r['pods']} | "
            f"{r['offered_per_filter']['mean']} | {c['filter']['mean']} / {c['filter']['p99']} | {c['prioritize']['mean']} / {c['prioritize']['p99']} | "
            f"{c['bind']['mean']} / {c['bind']['p99']} | {c['total']['mean']} / {c['total']['p50']} / {c['total']['p99']} | {r.get('rss_after_build_mb')} / {r.get('rss_after_pods_mb')} / {r['peak_rss_mb']} | "
            f"{r.get('intake_peak_mb', '–')} / {r.get('intake_held_mb', '–')} ({r.get('objects', 'lean')}) | "
            f"{', '.join(str(x['filter_cpu_ms']) for x in r.get('never_seen_shape', [])) or '–'} |"
        )
    (RESULTS / "scale5k-cpu.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--warm", type=int, default=60)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--tag", default="run")
    parser.add_argument("--offer-nodes", type=int, default=None, help="the extender's --offer-nodes (default: its default)")
    parser.add_argument("--label", default="")
    parser.add_argument("--lean", action="store_true", help="lean objects (no managedFields, Node status, DaemonSet pods), as before")
    parser.add_argument("--bound", type=int, default=5000, help="bound pods with an allocated claim (one device of each node)")
    parser.add_argument("--others", type=int, default=5000, help="bound pods without claims (besides the DaemonSet pods of heavy objects)")
    parser.add_argument("--whole-lists", action="store_true", help="hold each initial list whole before applying it, as before")
    args = parser.parse_args(argv)
    result = asyncio.run(
        run(
            args.pods,
            args.warm,
            args.profile,
            args.memory,
            args.label or args.tag,
            args.offer_nodes,
            not args.lean,
            args.whole_lists,
            args.bound,
            args.others,
        )
    )
    c = result["cpu_ms"]
    print(
        result["never_seen_shape"],
        {k: (c[k]["mean"], c[k]["p99"]) for k in c},
        "offered",
        result["offered_per_filter"],
        "RSS",
        result["rss_after_build_mb"],
        result["rss_after_pods_mb"],
        result["peak_rss_mb"],
    )
    write(result, args.tag)


if __name__ == "__main__":
    main()
