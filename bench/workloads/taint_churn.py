"""TaintChurn: DeviceTaintRules added and removed while scheduling, in-process and over HTTP."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.workloads.cluster import DRIVER, PodClaim, base_objects, node_name
from bench.workloads.driver import Attempt, Driver, Progress, attempts_result, env_info, summary
from bench.workloads.env import Env, api_path
from bench.workloads.runs import Config, target, window
from kubesim.measure import cpu_seconds
from kubesim.objects import rule


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
    return rule(f"churn-{n:05d}", selector={"driver": DRIVER, "pool": node}, key=f"example.com/churn-{n:05d}")


def rule_cost_in_process(nodes: int, devices: int, events: int) -> dict[str, Any]:
    """A rule over one pool (8 devices) added and deleted on a `nodes` x `devices` ClusterState, and the next /filter's verdicts."""
    from allocator.allocation import Allocator
    from allocator.cel import CelEnvironment
    from allocator.parse import parse_pod
    from extender.filter.outcomes import OutcomeCache
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
    node_objs = [(state.nodes[n], None) for n in names]
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
        writer = _RuleWriter(env.api_url, churn_nodes)
        # Warm-up: the first pods, scheduled before any rule is written, take the rotating window once
        # over every node, so each has a verdict for their shape (a shape's first pass is Scale5k's
        # figure, not a rule's).
        warm_ms = []
        warm = -(-len(rest) // len(names_for(0)))
        for k in range(warm):
            warm_ms.append(driver.schedule(pcs[k].pod(), churn_nodes + names_for(k), exclude=exclude).filter_ms)
        cpu0 = cpu_seconds(env.proc.pid)  # type: ignore[union-attr]
        thread = threading.Thread(target=writer.run, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        attempts, observations = _schedule_during(
            driver, pcs, probe, churn_nodes, names_for, warm, t0, duration, f"TaintChurn {label} {mode}", writer.writes
        )
        writer.stop.set()
        thread.join()
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(env.proc.pid) - cpu0  # type: ignore[union-attr]
        visible, samples, missed = _visibility(writer.writes, observations, t0)
        res = attempts_result(attempts, elapsed, t0)
        res.pop("samples")
        res.update(
            {
                "nodes": nodes,
                "devices": nodes * devices,
                "rule_writes": len(writer.writes),
                "write_errors": writer.errors[:3],
                "visible_ms": summary(visible),
                "visible_samples": samples,
                "warm_up_filter_ms": summary(warm_ms),
                "slow_filters": [
                    (round(a.t0 - t0, 3), round(a.filter_ms, 1), round((a.t1 - a.t0) * 1000, 1))
                    for a in attempts
                    if (a.t1 - a.t0) * 1000 > 50
                ],
                "not_seen_before_the_end": missed,
                "filter_period_ms": summary([(b[1] - a[1]) * 1000 for a, b in itertools.pairwise(observations)]),
                "extender_cpu_s": round(cpu, 1),
                "extender_cpu_share": round(cpu / elapsed, 2),
                "env": env_info(env),
            }
        )
        print(
            f"    {len(writer.writes)} rule writes; visible in /filter p50 {res['visible_ms'].get('p50')} / p99 {res['visible_ms'].get('p99')} ms; filter p99 {res['latency_ms']['filter'].get('p99')} ms",
            flush=True,
        )
        driver.close()
        return res
    finally:
        env.stop()


class _RuleWriter:
    """A thread adding and removing one-pool rules at 10/s, at most 8 live (each on its own node)."""

    def __init__(self, api_url: str, churn_nodes: list[str]) -> None:
        self.api_url = api_url
        self.churn_nodes = churn_nodes
        self.writes: list[tuple[float, str, str, str]] = []  # (t, added|deleted, node, key)
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        live: list[tuple[dict[str, Any], str]] = []
        n = 0
        http = httpx.Client(base_url=self.api_url, timeout=30, headers={"Content-Type": "application/json"})
        next_t = time.perf_counter()
        try:
            while not self.stop.is_set():
                next_t += 0.1
                if len(live) < 5 or (n % 2 == 0 and len(live) < 8):
                    self._add(http, n, live)
                    n += 1
                else:
                    rule, node = live.pop(0)
                    t = time.perf_counter()
                    r = http.delete(api_path(rule, item=True))
                    if r.status_code >= 300:
                        self.errors.append(r.text[:200])
                    else:
                        self.writes.append((t, "deleted", node, rule["spec"]["taint"]["key"]))
                time.sleep(max(0.0, next_t - time.perf_counter()))
        finally:
            http.close()

    def _add(self, http: httpx.Client, n: int, live: list[tuple[dict[str, Any], str]]) -> None:
        node = self.churn_nodes[n % len(self.churn_nodes)]
        if any(nd == node for _, nd in live):
            node = next(c for c in self.churn_nodes if all(nd != c for _, nd in live))
        rule = churn_rule(n, node)
        t = time.perf_counter()
        r = http.post(api_path(rule), content=orjson.dumps(rule))
        if r.status_code >= 300:
            self.errors.append(r.text[:200])
        else:
            self.writes.append((t, "added", node, rule["spec"]["taint"]["key"]))
            live.append((rule, node))


def _schedule_during(
    driver: Driver,
    pcs: list[PodClaim],
    probe: PodClaim,
    churn_nodes: list[str],
    names_for: Callable[[int], list[str]],
    first: int,
    t0: float,
    duration: int,
    label: str,
    writes: list[tuple[float, str, str, str]],
) -> tuple[list[Attempt], list[tuple[float, float, dict[str, str]]]]:
    """Pods from `first` on, then the probe again and again, for `duration` s: the attempts and what each /filter showed."""
    exclude = frozenset(churn_nodes)
    attempts: list[Attempt] = []
    observations: list[tuple[float, float, dict[str, str]]] = []  # (sent, received, churn node -> message)
    progress = Progress(label, duration, every=5)
    last_tick = 0
    k = first
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
    return attempts, observations


def _visibility(
    writes: list[tuple[float, str, str, str]], observations: list[tuple[float, float, dict[str, str]]], t0: float
) -> tuple[list[float], list[tuple[float, str, float]], int]:
    """For each rule write, the first /filter answer after it that shows it: ms until visible, samples, writes never seen."""
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
    return visible, samples, missed
