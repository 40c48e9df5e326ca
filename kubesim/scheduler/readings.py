"""What a run measured: throughput, latencies, queue moves, and the API server's objects read back afterwards."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kubesim.measure import pct
from kubesim.objects import GPU_GI, PARTITIONS_GI
from kubesim.scheduler.api import Api
from kubesim.scheduler.config import NAMESPACE, key_of, short_reason
from kubesim.scheduler.cycle import KubeSchedulerModel
from kubesim.scheduler.oracle import claim_allocated
from kubesim.scheduler.workloads import Workload, node_name


def summary_ms(values: list[float]) -> dict[str, Any]:
    return {
        "p50": round(pct(values, 0.5), 1),
        "p99": round(pct(values, 0.99), 1),
        "max": round(max(values), 1) if values else 0.0,
        "n": len(values),
    }


def measure(w: Workload, model: KubeSchedulerModel, created_at: dict[str, float], t0: float, expected: int) -> dict[str, Any]:
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


async def read_back(api: Api, w: Workload, http_timeout: float) -> dict[str, Any]:
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
    # The run's pods (a heavy cluster's DaemonSet pods, bound from the start, are in kube-system).
    bound = [p for p in pods if (p.get("spec") or {}).get("nodeName") and (p.get("metadata") or {}).get("namespace") == NAMESPACE]
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
