"""The kube-scheduler model's workloads on a real control plane: seed the objects, then measure the extender.

The kube-scheduler model (`python -m bench.kube_scheduler_model`) runs against the fake API server; this
driver creates the same workload's objects (kubesim/scheduler/workloads.py, kubesim/objects.py) through a
real kube-apiserver named by a kubeconfig, as the components that own them would write them there, so that
the extender's memory and CPU can be compared with the model's on objects the API server itself returns:

- a Node is created by "kubelet" without status, then its status (conditions, addresses, capacity,
  allocatable, nodeInfo, images) is PATCHed on `nodes/NAME/status`, as a kubelet posts it (an update of
  the main resource would drop a status sent with it);
- the ResourceSlices are created by "dra-driver"; the DaemonSet pods (a heavy workload's two per node)
  are created bound, without the ownerReferences (no DaemonSet exists: the garbage collector would delete
  them), and their kubelet status is PATCHed on `pods/NAME/status`;
- the workload's pods are created with their claim template: kube-controller-manager's ResourceClaim
  controller makes the claims, and `seed` waits until every pod has its claim.

`seed` creates all that and returns; `measure` then follows the extender's process (VmHWM, VmRSS and
utime+stime from /proc) while a kube-scheduler, started by the caller, schedules the pods through it, until
every pod of the workload is bound, and writes the readings as JSON. Building and starting the control
plane itself is outside the repository.

    python -m bench.real_control_plane seed --kubeconfig K --workload 5000x8
    python -m bench.real_control_plane measure --kubeconfig K --workload 5000x8 --pid PID --out FILE.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from kubesim.measure import cpu_seconds, machine, proc_status_mb
from kubesim.objects import daemon_pods, heavy_node, node
from kubesim.scheduler.config import NAMESPACE
from kubesim.scheduler.workloads import WORKLOADS, Workload, _node_slices, cluster_objects, node_name, pod_object
from tracker.apiserver.requests import MERGE_PATCH

IN_FLIGHT = 16
LEAN_ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "pods": "110"}  # a lean workload's Node status (cluster_objects)
# What the API server sets itself: a client sending these would be refused or ignored.
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields")


class Cluster:
    """JSON over HTTPS to the API server of a kubeconfig (its current context; token or client certificate)."""

    def __init__(self, kubeconfig: str) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.url = cluster["server"].rstrip("/")
        self.ssl = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            self.ssl.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            self.ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        self.headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Cluster:
        self.session = aiohttp.ClientSession(
            headers=self.headers,
            connector=aiohttp.TCPConnector(limit=IN_FLIGHT * 2, ssl=self.ssl),
            timeout=aiohttp.ClientTimeout(total=120),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        """One request; 429, 5xx and dropped connections are retried (the API server sheds load under a seed)."""
        assert self.session is not None
        data = orjson.dumps(body) if body is not None else None
        for attempt in range(30):
            try:
                async with self.session.request(method, self.url + path, data=data, headers={"Content-Type": content_type}) as resp:
                    raw = await resp.read()
                    if resp.status == 429 or resp.status >= 500:
                        await asyncio.sleep(min(5.0, 0.2 * (attempt + 1)))
                        continue
                    return resp.status, (orjson.loads(raw) if raw else None)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(min(5.0, 0.2 * (attempt + 1)))
        raise RuntimeError(f"{method} {path}: no answer after 30 attempts")

    async def create(self, path: str, obj: dict[str, Any], manager: str) -> None:
        """POST `obj` as `manager`; an object that exists already is left as it is (a second seed resumes the first)."""
        status, body = await self.request("POST", f"{path}?fieldManager={manager}", obj)
        if status not in (201, 409):
            raise RuntimeError(f"create {obj['kind']} {obj['metadata']['name']}: HTTP {status}: {str(body)[:300]}")

    async def patch_status(self, path: str, status: dict[str, Any], manager: str) -> None:
        """A merge patch of `path`/status, as a kubelet posts a node's or a pod's status."""
        code, body = await self.request("PATCH", f"{path}/status?fieldManager={manager}", {"status": status}, content_type=MERGE_PATCH)
        if code != 200:
            raise RuntimeError(f"patch {path}/status: HTTP {code}: {str(body)[:300]}")

    async def count(self, path: str) -> int:
        """How many objects a list returns (paged)."""
        total, token = 0, ""
        while True:
            status, body = await self.request(
                "GET", f"{path}{'&' if '?' in path else '?'}limit=500" + (f"&continue={token}" if token else "")
            )
            if status != 200:
                raise RuntimeError(f"list {path}: HTTP {status}: {str(body)[:300]}")
            total += len(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return total


def _as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what only the API server may set (uid, resourceVersion, managedFields, ...) and without status."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_FIELDS}
    return out


def _collection(obj: dict[str, Any]) -> str:
    group = obj["apiVersion"]
    prefix = f"/api/{group}" if "/" not in group else f"/apis/{group}"
    plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")  # every kind this driver creates
    ns = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"


async def _each(items: list[Any], work: Any, label: str) -> None:
    """`work(item)` for every item, IN_FLIGHT at a time, with a progress line every 1,000."""
    sem = asyncio.Semaphore(IN_FLIGHT)
    done = 0
    start = time.monotonic()

    async def one(item: Any) -> None:
        nonlocal done
        async with sem:
            await work(item)
        done += 1
        if done % 1000 == 0 or done == len(items):
            print(f"{label}: {done}/{len(items)} ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(i) for i in items))


async def _wait_for(api: Cluster, path: str, expected: int, what: str, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while (n := await api.count(path)) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {n} of {expected} after {timeout:.0f} s")
        print(f"{what}: {n}/{expected}", file=sys.stderr, flush=True)
        await asyncio.sleep(5)


async def seed(kubeconfig: str, w: Workload, daemons: bool, pods_only: bool) -> None:
    """Create the workload's cluster, its DaemonSet pods (heavy workloads) and its pods with their claims (`pods_only`: the pods)."""
    async with Cluster(kubeconfig) as api:
        if not pods_only:
            await _seed_cluster(api, w, daemons)

        async def workload_pod(i: int) -> None:
            await api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(i), "kubectl")

        await _each(list(range(w.pods)), workload_pod, "pods")
        await _wait_for(api, f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", w.pods, "claims")


async def reset(kubeconfig: str) -> None:
    """Delete the workload's pods at once (no kubelet confirms a graceful delete) and wait until the claim controller removed their claims."""
    async with Cluster(kubeconfig) as api:
        status, body = await api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods?gracePeriodSeconds=0")
        if status != 200:
            raise RuntimeError(f"delete pods: HTTP {status}: {str(body)[:300]}")
        deadline = time.monotonic() + 600
        while (n := await api.count(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} claims left after 600 s")
            print(f"claims left: {n}", file=sys.stderr, flush=True)
            await asyncio.sleep(5)


async def _seed_cluster(api: Cluster, w: Workload, daemons: bool) -> None:
    """The workload's namespace, DeviceClass, ResourceClaimTemplate, Nodes with their status, slices and DaemonSet pods."""
    # Namespace, DeviceClass, ResourceClaimTemplate: the objects of cluster_objects that are neither nodes nor slices nor pods.
    for obj in cluster_objects(Workload("head", 0, w.devices_per_node, 0, kind=w.kind)):
        await api.create(_collection(obj), _as_sent(obj), "kubectl")
    for ns in (NAMESPACE, "kube-system"):  # the ServiceAccount admission refuses pods until the controller made "default"
        await _wait_for(api, f"/api/v1/namespaces/{ns}/serviceaccounts?fieldSelector=metadata.name%3Ddefault", 1, f"{ns}/default")

    async def one_node(i: int) -> None:
        full = heavy_node(node_name(i)) if w.heavy else {**node(node_name(i), hostname=True), "status": {"allocatable": LEAN_ALLOCATABLE}}
        await api.create("/api/v1/nodes", _as_sent(full), "kubelet")
        await api.patch_status(f"/api/v1/nodes/{full['metadata']['name']}", full["status"], "kubelet")
        for s in _node_slices(w, node_name(i)):
            await api.create(_collection(s), _as_sent(s), "dra-driver")

    await _each(list(range(w.nodes)), one_node, "nodes and slices")
    if w.heavy and daemons:

        async def daemon(i: int) -> None:
            for full in daemon_pods(node_name(i), i):  # as listed: heavy_pod's spec defaults and kubelet status
                sent = _as_sent(full)
                sent["metadata"].pop("ownerReferences", None)  # no DaemonSet: the garbage collector would delete them
                for admitted in ("volumes", "priority", "preemptionPolicy"):  # the ServiceAccount and Priority admission set these
                    sent["spec"].pop(admitted, None)
                for c in sent["spec"]["containers"]:
                    c.pop("volumeMounts", None)
                await api.create(_collection(sent), sent, "kube-controller-manager")
                await api.patch_status(f"/api/v1/namespaces/kube-system/pods/{sent['metadata']['name']}", full["status"], "kubelet")

        await _each(list(range(w.nodes)), daemon, "DaemonSet pods (2 per node)")


def _reading(pid: int) -> dict[str, float]:
    return {
        "peak_rss_mib": round(proc_status_mb(pid, "VmHWM"), 1),
        "rss_mib": round(proc_status_mb(pid, "VmRSS"), 1),
        "cpu_s": round(cpu_seconds(pid), 2),
    }


async def measure(kubeconfig: str, w: Workload, pid: int, out: str, timeout: float, settle: float) -> dict[str, Any]:
    """Follow the extender process `pid` until every pod of the workload is bound (and `settle` seconds more)."""
    start = time.monotonic()
    result: dict[str, Any] = {"workload": w.name, "pods": w.pods, "machine_at_start": machine(), "at_start": _reading(pid)}
    samples: list[dict[str, Any]] = []
    unbound_path = f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName%3D"
    first_bound: float | None = None
    async with Cluster(kubeconfig) as api:
        while True:
            unbound = await api.count(unbound_path)
            t = time.monotonic() - start
            samples.append({"t": round(t, 1), "unbound": unbound, **_reading(pid), "load1": os.getloadavg()[0]})
            if first_bound is None and unbound < w.pods:
                first_bound = t
            if unbound == 0 or t > timeout:
                break
            await asyncio.sleep(2)
        all_bound = time.monotonic() - start
        await asyncio.sleep(settle)
        result["bound"] = w.pods - await api.count(unbound_path)
    end = _reading(pid)
    cpu = end["cpu_s"] - result["at_start"]["cpu_s"]
    result |= {
        "at_end": end,
        "machine_at_end": machine(),
        "first_bound_s": first_bound,
        "all_bound_s": round(all_bound, 1),
        "pods_per_s_from_start": round(result["bound"] / all_bound, 1) if all_bound else None,
        "extender_cpu_s_while_scheduling": round(cpu, 2),
        "extender_cpu_ms_per_pod_bound": round(1000 * cpu / max(1, result["bound"]), 2),
        "extender_cpu_ms_per_pod_bound_with_startup": round(1000 * end["cpu_s"] / max(1, result["bound"]), 2),
        "samples": samples,
    }
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.real_control_plane", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("seed", "reset", "measure"):
        s = sub.add_parser(name)
        s.add_argument("--kubeconfig", required=True)
        s.add_argument("--workload", default="5000x8", choices=sorted(WORKLOADS))
        if name == "seed":
            s.add_argument("--no-daemon-pods", action="store_true", help="leave out a heavy workload's two DaemonSet pods per node")
            s.add_argument("--pods-only", action="store_true", help="only the pods (after `reset`: the cluster is there)")
        elif name == "measure":
            s.add_argument("--pid", type=int, required=True, help="the extender's process id")
            s.add_argument("--out", required=True, help="the readings as JSON")
            s.add_argument("--timeout", type=float, default=1500.0)
            s.add_argument("--settle", type=float, default=5.0, help="seconds to keep reading after the last pod is bound")
    args = p.parse_args(argv)
    w = WORKLOADS[args.workload]
    if w.kind != "plain" or w.rate or w.steady_fill or w.tainted_nodes or w.extended_resources:
        print(f"workload {w.name}: only plain workloads with every pod created at once are supported", file=sys.stderr)
        return 2
    if args.cmd == "seed":
        asyncio.run(seed(args.kubeconfig, w, not args.no_daemon_pods, args.pods_only))
        return 0
    if args.cmd == "reset":
        asyncio.run(reset(args.kubeconfig))
        return 0
    r = asyncio.run(measure(args.kubeconfig, w, args.pid, args.out, args.timeout, args.settle))
    print(json.dumps({k: v for k, v in r.items() if k != "samples"}, indent=1))
    return 0 if r["bound"] == w.pods else 1


if __name__ == "__main__":
    sys.exit(main())
