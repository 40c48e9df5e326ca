"""Where the extender runs: a manifest directory (`--source`) or the fake API server (`--kubeconfig`), and the no-op extender."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common import start_extender_profiled
from kubesim.processes import ROOT, free_port, seed, start_extender, start_fake_api, stop_process

PROFILE_DIR: Path | None = None  # --profile DIR: every extender runs under cProfile, dumps land here
# --extender-cpus 0: the extender (every thread) on these CPUs, the benchmark client and the fake API server
# kept off them (the run's own affinity minus these), as a scheduler pod with a core of its own would run.
EXTENDER_CPUS: set[int] | None = None


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


@contextlib.contextmanager
def extender_affinity() -> Iterator[None]:
    """With EXTENDER_CPUS, processes started inside run on those CPUs (inherited at fork); this one's affinity is restored after."""
    if EXTENDER_CPUS is None:
        yield
        return
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, EXTENDER_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


def pin_beside_extender(cpus: set[int]) -> None:
    """--extender-cpus: the extender on `cpus`, this process (and the fake API server, the no-op it starts) on the others."""
    global EXTENDER_CPUS
    EXTENDER_CPUS = set(cpus)
    rest = os.sched_getaffinity(0) - EXTENDER_CPUS
    if not rest:
        raise SystemExit(f"--extender-cpus {sorted(cpus)} leaves no CPU for the benchmark client")
    os.sched_setaffinity(0, rest)


class Env:
    """The extender on a generated cluster: a manifest directory (`source`) or the fake API server (`cluster`)."""

    def __init__(self, mode: str, tmp: Path, objects: list[dict[str, Any]], *, label: str) -> None:
        self.mode = mode
        self.tmp = tmp / f"{label}-{mode}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.objects = objects
        self.api_proc: subprocess.Popen[str] | None = None
        self.api_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
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
            api_proc, self.api_url, kubeconfig = start_fake_api(self.tmp, module="bench.fakeapi_frozen")  # freezes its heap on SIGUSR1
            self.api_proc = api_proc
            self.api = httpx.Client(base_url=self.api_url, timeout=120, headers={"Content-Type": "application/json"})
            seed(self.api, self.objects)
            api_proc.send_signal(signal.SIGUSR1)  # freeze the seeded heap (bench/fakeapi_frozen.py)
            args = ["--kubeconfig", str(kubeconfig), "--standalone"]
        self.seed_s = time.perf_counter() - t
        self.objects = []  # not needed any more (memory of the bench client)
        gc.collect()
        gc.freeze()  # the driver's own full collections must not show up as extender latency
        self.port = free_port()
        t = time.perf_counter()
        argv = [*args, "--log-format", "json", *extra]  # serve: the verbs alone (no eviction there)
        with extender_affinity():
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


def start_noop(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
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
