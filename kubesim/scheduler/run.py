"""One run: the fake API server and an extender started, pods created (at a rate, or churned in steady state), the model driving them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kubesim.measure import Cpu, cpu_seconds, pct
from kubesim.processes import free_port, seed, start_fake_api, start_server, stop_process
from kubesim.scheduler.api import Api
from kubesim.scheduler.config import NAMESPACE, ClaimControllerConfig, SchedulerConfig, now
from kubesim.scheduler.cycle import KubeSchedulerModel
from kubesim.scheduler.driver import FakeDriver
from kubesim.scheduler.readings import measure, read_back
from kubesim.scheduler.workloads import Workload, cluster_objects, pod_object, taint_rules


def default_extender_cmd() -> list[str]:
    return [sys.executable, "-m", "dra_extender.cli", "serve", "--kubeconfig", "{kubeconfig}", "--standalone", "--listen", "{listen}"]


def noop_extender_cmd() -> list[str]:
    return [sys.executable, "-m", "kubesim.scheduler.noop", "--kubeconfig", "{kubeconfig}", "--listen", "{listen}"]


async def _create_pods(
    api: Api,
    first: int,
    count: int,
    rate: float | None,
    created_at: dict[str, float],
    errors: Counter[str],
    extended: bool = False,
    claims: bool = True,
) -> None:
    """POST pods: `rate` per second, or all at once (8 requests in flight, as a kubectl apply of many objects)."""
    sem = asyncio.Semaphore(8)
    start = now()

    async def one(i: int) -> None:
        async with sem:
            status, body = await api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(i, extended, claims=claims))
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
    w: Workload,
    api_url: str,
    ext_url: str | None,
    cfg: SchedulerConfig,
    claims: ClaimControllerConfig,
    progress: float,
    label: str,
    is_noop: bool,
    cpu_of: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """The model against the extender at `ext_url` (None: no extender and pods without claims, the no-DRA ceiling)."""
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
            creator = asyncio.create_task(
                _create_pods(api, 0, n_pods, w.rate, created_at, create_errors, w.extended_resources, claims=ext_url is not None)
            )
        driver = FakeDriver(api, model, w) if w.binding_delay is not None else None
        driver_task = asyncio.create_task(driver.run()) if driver is not None else None

        def line(phase: str) -> None:
            _progress_line(label, phase, model, created_at, t0)

        marks: list[tuple[int, float]] = []
        reached_at = await _until_bound(w, model, creator, created_at, expected, n_pods, t0, progress, line, cpu_of, marks)
        if len(marks) == 2 and marks[1][0] > marks[0][0]:
            # The extender's CPU per pod once a fifth of the pods are bound: the claim shape's first pass over the
            # nodes (verdicts, fullness) is behind it, so this is the per-pod cost a longer run tends to.
            out["extender_cpu_ms_per_pod_after_first_fifth"] = round(1000 * (marks[1][1] - marks[0][1]) / (marks[1][0] - marks[0][0]), 2)
        out["timed_out"] = reached_at is None
        if not creator.done():
            creator.cancel()
        if driver is not None and driver_task is not None:
            driver_task.cancel()
            out["binding_conditions"] = driver.report(model.bound_at)
        if w.taint_removal and not is_noop and ext_url is not None:
            out["taint_removal"] = await _taint_removal(w, api, model, created_at, create_errors, t0, line)
        line("end")
        out.update(measure(w, model, created_at, t0, expected + (1 if "taint_removal" in out else 0)))
        out.update(_controller_readings(w, model, create_errors, deleted[0]))
        await model.stop()
        out["readback"] = await read_back(api, w, cfg.http_timeout)
        return out


def _progress_line(label: str, phase: str, model: KubeSchedulerModel, created_at: dict[str, float], t0: float) -> None:
    """One JSON line of progress on stdout."""
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


async def _until_bound(
    w: Workload,
    model: KubeSchedulerModel,
    creator: asyncio.Task[None],
    created_at: dict[str, float],
    expected: int,
    n_pods: int,
    t0: float,
    progress: float,
    line: Callable[[str], None],
    cpu_of: Callable[[], float] | None = None,
    marks: list[tuple[int, float]] | None = None,
) -> float | None:
    """Until the expected pods are bound and `w.settle` has passed since (None: the workload's timeout came first).

    With `cpu_of`, `marks` gets (pods bound, its CPU seconds) when a fifth of the expected pods are bound and when all are.
    """
    last_print = now()
    reached_at: float | None = None
    while now() - t0 < w.timeout:
        await asyncio.sleep(0.1)
        if progress and now() - last_print >= progress:
            last_print = now()
            line("fill" if w.taint_removal else "run")
        if cpu_of is not None and marks is not None and len(marks) < 2:
            bound = sum(k in model.bound_at for k in created_at)
            if (not marks and bound >= max(1, expected // 5)) or (marks and bound >= expected):
                marks.append((bound, cpu_of()))
        # Over-committed: also wait until every pod left over was rejected while its claim existed.
        if (
            reached_at is None
            and sum(k in model.bound_at for k in created_at) >= expected  # the run's pods (heavy clusters hold bound DaemonSet pods)
            and creator.done()
            and (n_pods <= expected or all(k in model.bound_at or k in model.rejected_with_claims for k in created_at))
        ):
            reached_at = now()
        if reached_at is not None and now() - reached_at >= w.settle:
            break
    return reached_at


def _controller_readings(w: Workload, model: KubeSchedulerModel, create_errors: Counter[str], deleted: int) -> dict[str, Any]:
    """What the pod creator and the claim-controller stand-in did, and the kinds the API server served."""
    cc = model.claim_controller
    out: dict[str, Any] = {
        "pod_create_errors": dict(create_errors),
        "claims_created_by_controller": cc.claims_created if cc else 0,
    }
    if w.steady_fill:
        out["steady_state"] = {
            "prefilled_pods": int(w.capacity * w.steady_fill),
            "warm_up_pods": w.warm_up,
            "pods_deleted": deleted,
            "claims_released_by_controller": cc.claims_released if cc else 0,
        }
    out["claim_controller_errors"] = dict(cc.errors) if cc else {}
    out["served_kinds"] = {k: v for k, v in model.served_kinds().items()}
    return out


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


def run_workload(
    w: Workload,
    extender_cmd: list[str] | None = None,
    *,
    cfg: SchedulerConfig | None = None,
    claims: ClaimControllerConfig | None = None,
    progress: float = 5.0,
    noop: bool = False,
    label: str | None = None,
    nodra: bool = False,
) -> dict[str, Any]:
    """Fake API server + extender (command with {kubeconfig} {listen} {port} {api} placeholders) + the model; the measurements.

    `noop`: the reference extender instead (passes every node, binds only). `nodra`: no extender at all and the
    workload's pods without resource claims, the model binding them itself: the ceiling any DRA scheduling is
    measured against (the same cluster objects, so the same informers and API server).
    """
    cfg = cfg or SchedulerConfig()
    claims = claims or ClaimControllerConfig()
    cmd_template = noop_extender_cmd() if noop else (extender_cmd or default_extender_cmd())
    mode = "nodra" if nodra else "noop" if noop else "extender"
    label = label or f"{w.name}/{mode}"
    if nodra:
        return _run_without_extender(w, cfg, claims, progress, label)
    tmp = Path(tempfile.mkdtemp(prefix="dra-ksmodel-"))
    api_proc, api_url, kubeconfig = start_fake_api(tmp)
    ext_proc = None
    try:
        import httpx

        with httpx.Client(base_url=api_url, timeout=300) as http:
            seed(http, cluster_objects(w))
            if w.api_faults:
                http.post("/_fake/faults", json=w.api_faults).raise_for_status()
        port = free_port()
        fmt = {"kubeconfig": str(kubeconfig), "listen": f"127.0.0.1:{port}", "port": str(port), "api": api_url}
        cmd = [part.format(**fmt) for part in cmd_template]
        started = time.perf_counter()
        ext_proc, client = start_server(cmd, port, tmp / "extender.log", timeout=300)
        client.close()
        ready_s = time.perf_counter() - started
        startup_cpu_s = cpu_seconds(ext_proc.pid)  # the extender's start-up (lists, caches) up to ready, reported apart
        memory_at_ready = _memory_mib(ext_proc.pid)  # the initial lists' share of the peak
        print(
            json.dumps({"run": label, "phase": "ready", "extender_ready_s": round(ready_s, 2), "cmd": " ".join(cmd_template)}), flush=True
        )
        cpu = Cpu({"extender": ext_proc.pid, "fakeapi": api_proc.pid})
        ext_pid = ext_proc.pid
        result = _run_async(
            _drive(w, api_url, f"http://127.0.0.1:{port}", cfg, claims, progress, label, noop, cpu_of=lambda: cpu_seconds(ext_pid))
        )
        result["cpu"] = cpu.done()
        # Whole-process CPU per pod bound: utime + stime of the extender over the scheduling phase only.
        result["cpu"]["extender_startup_cpu_s"] = round(startup_cpu_s, 2)
        bound = result.get("pods_bound") or 0
        result["cpu"]["extender_cpu_ms_per_pod"] = round(1000 * result["cpu"]["extender_cpu_s"] / bound, 2) if bound else None
        result["cpu"]["extender_cpu_ms_per_pod_after_first_fifth"] = result.pop("extender_cpu_ms_per_pod_after_first_fifth", None)
        result["extender_memory_mib"] = {**_memory_mib(ext_proc.pid), **{f"{k}_at_ready": v for k, v in memory_at_ready.items()}}
        result["extender_ready_s"] = round(ready_s, 2)
        if ext_proc.poll() is not None:
            result["extender_exited"] = ext_proc.returncode
        return {
            "label": label,
            "extender": mode if noop else " ".join(cmd_template),
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


def _run_without_extender(w: Workload, cfg: SchedulerConfig, claims: ClaimControllerConfig, progress: float, label: str) -> dict[str, Any]:
    """The no-DRA ceiling: the fake API server and the model alone, pods without claims (the model's own CPU is in `cpu`)."""
    tmp = Path(tempfile.mkdtemp(prefix="dra-ksmodel-"))
    api_proc, api_url, _kubeconfig = start_fake_api(tmp)
    try:
        import httpx

        with httpx.Client(base_url=api_url, timeout=300) as http:
            seed(http, cluster_objects(w))
        cpu = Cpu({"fakeapi": api_proc.pid})
        result = _run_async(_drive(w, api_url, None, cfg, claims, progress, label, True))
        result["cpu"] = cpu.done()
        return {
            "label": label,
            "extender": "nodra",
            "workload": asdict(w),
            "config": {"scheduler": asdict(cfg), "claim_controller": asdict(claims)},
            **result,
        }
    finally:
        stop_process(api_proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _memory_mib(pid: int) -> dict[str, float]:
    """A process's resident set now and at its peak (VmRSS, VmHWM), MiB (/proc reports KiB)."""
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
