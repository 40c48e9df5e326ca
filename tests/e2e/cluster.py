"""Cluster-mode harness: the fake API server as a process, driven over its HTTP API.

Tests talk to it as kubectl would (REST paths, resourceVersions, 409s) and
control faults through `/_fake/*`; the extender runs as a subprocess with
`serve --kubeconfig`, exactly as in production.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from allocator.pod_claims import raw_needs_extender
from tests.e2e.harness import ROOT, Extender, stop_process

# kind -> (group, version, plural, namespaced); the versions the extender reads.
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "Node": ("", "v1", "nodes", False),
    "Pod": ("", "v1", "pods", True),
    "Lease": ("coordination.k8s.io", "v1", "leases", True),
    "Event": ("", "v1", "events", True),
    "ResourceSlice": ("resource.k8s.io", "v1", "resourceslices", False),
    "ResourceClaim": ("resource.k8s.io", "v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates", True),
    "DeviceClass": ("resource.k8s.io", "v1", "deviceclasses", False),
    "DeviceTaintRule": ("resource.k8s.io", "v1beta2", "devicetaintrules", False),
    "ResourceSlicePatch": ("resource.dra-extender.io", "v1alpha1", "resourceslicepatches", False),
    "DeviceHealthPolicy": ("resource.dra-extender.io", "v1alpha1", "devicehealthpolicies", False),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims", True),
    "PersistentVolume": ("", "v1", "persistentvolumes", False),
}
CRD_GROUP = "resource.dra-extender.io"


def collection(kind: str, namespace: str | None = None, group: str | None = None) -> str:
    g, version, plural, namespaced = KINDS[kind]
    if group is not None and group != g:
        g, version = group, "v1alpha1" if group == CRD_GROUP else version
    prefix = f"/apis/{g}/{version}" if g else f"/api/{version}"
    if namespaced and namespace:
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


def item_path(kind: str, namespace: str | None, name: str, group: str | None = None) -> str:
    return f"{collection(kind, namespace or 'default' if KINDS[kind][3] else None, group)}/{name}"


def _group_of(obj: dict[str, Any]) -> str | None:
    api_version = obj.get("apiVersion") or ""
    return api_version.rpartition("/")[0] if "/" in api_version else None


class FakeApi:
    """`python -m kubesim.fakeapi` in a subprocess, with a REST client for it."""

    def __init__(self, *load: str | Path, extra_args: tuple[str, ...] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fakeapi-"))
        self.kubeconfig = self.dir / "kubeconfig.yaml"
        args = [sys.executable, "-m", "kubesim.fakeapi", "--port", "0", "--kubeconfig-out", str(self.kubeconfig)]
        for path in load:
            args += ["--load", str(path)]
        self.proc = subprocess.Popen(
            [*args, *extra_args], cwd=ROOT, stdout=subprocess.PIPE, stderr=(self.dir / "stderr").open("wb"), text=True
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"fake API server did not start:\n{(self.dir / 'stderr').read_text()}")
        self.url = json.loads(line)["url"]
        self.http = httpx.Client(base_url=self.url, timeout=30)

    # ------------------------------------------------------------------ REST

    def _check(self, r: httpx.Response) -> dict[str, Any]:
        if r.status_code >= 400:
            raise ApiError(r.status_code, r.text)
        return r.json()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        return self._check(self.http.post(collection(obj["kind"], meta.get("namespace") or "default", _group_of(obj)), json=obj))

    def get(self, kind: str, namespace: str | None, name: str, group: str | None = None) -> dict[str, Any] | None:
        r = self.http.get(item_path(kind, namespace, name, group))
        return None if r.status_code == 404 else self._check(r)

    def replace(self, obj: dict[str, Any], subresource: str = "") -> dict[str, Any]:
        meta = obj["metadata"]
        path = item_path(obj["kind"], meta.get("namespace"), meta["name"], _group_of(obj))
        return self._check(self.http.put(path + (f"/{subresource}" if subresource else ""), json=obj))

    def delete(self, kind: str, namespace: str | None, name: str, group: str | None = None) -> None:
        r = self.http.delete(item_path(kind, namespace, name, group))
        if r.status_code != 404:
            self._check(r)

    def list(self, kind: str, group: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            body = self._check(self.http.get(collection(kind, None, group), params={"limit": 500, "continue": token}))
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def mutate(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        change: Callable[[dict[str, Any]], None],
        *,
        subresource: str = "",
        group: str | None = None,
    ) -> dict[str, Any]:
        """Read-modify-write with the resourceVersion precondition, retried on 409."""
        for _ in range(20):
            obj = self.get(kind, namespace, name, group)
            if obj is None:
                raise ApiError(404, f"{kind} {namespace}/{name} not found")
            obj.setdefault("kind", kind)
            change(obj)
            try:
                return self.replace(obj, subresource)
            except ApiError as e:
                if e.status != 409:
                    raise
        raise ApiError(409, f"{kind} {namespace}/{name}: still conflicting after 20 tries")

    # ------------------------------------------------------------------ control

    def control(self, method: str, action: str, body: Any = None) -> Any:
        return self._check(self.http.request(method, f"/_fake/{action}", json=body))

    def faults(self, **kw: Any) -> Any:
        return self.control("POST", "faults", kw)

    def clear_faults(self) -> Any:
        return self.control("DELETE", "faults")

    def compact(self) -> int:
        return self.control("POST", "compact")["compactedResourceVersion"]

    def drop_watches(self, resource: str | None = None) -> int:
        return self.control("POST", "drop-watches", {"resource": resource} if resource else {})["dropped"]

    def requests(self, since: int = 0) -> list[dict[str, Any]]:
        return self.control("GET", f"requests?since={since}")

    def state(self) -> dict[str, Any]:
        return self.control("GET", "state")

    # ------------------------------------------------------------------ the view vs the server

    def expected_view(self) -> dict[str, dict[str, str]]:
        """What the extender should hold: every tracked object's resourceVersion (pods only with claims, extended resources or PVCs)."""
        out: dict[str, dict[str, str]] = {}
        tracked = [(k, KINDS[k][0]) for k in KINDS if k not in ("Lease", "Event")]
        tracked.append(("DeviceTaintRule", CRD_GROUP))  # the project's rules, beside resource.k8s.io's
        for kind, group in tracked:
            name = f"{kind}.{group}" if group else kind
            versions: dict[str, str] = {}
            try:
                objects = self.list(kind, group)
            except ApiError as e:
                if e.status != 404:  # an API the server does not serve holds nothing
                    raise
                objects = []
            for obj in objects:
                meta = obj["metadata"]
                if kind == "Pod" and not raw_needs_extender(obj):
                    continue
                key = f"{meta['namespace']}/{meta['name']}" if KINDS[kind][3] else meta["name"]
                versions[key] = meta["resourceVersion"]
            if versions:
                out[name] = versions
        return out

    def stop(self) -> None:
        stop_process(self.proc)
        self.http.close()


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status = status
        self.body = body


def extender_view(ext: Extender) -> dict[str, dict[str, str]]:
    objects = ext.http.get("/debug/objects").json()["objects"]
    return {k: v for k, v in objects.items() if v}


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout}s (last: {last!r})")


def holds(predicate: Callable[[], Any], seconds: float, interval: float = 0.05, what: str = "condition") -> None:
    """`predicate()` stays true for `seconds`: the bounded check that something did not happen, after
    waiting on the signal that it could have (the object seen, the component's state logged)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} no longer holds"
        time.sleep(interval)
    assert predicate(), f"{what} no longer holds"


def view_diff(want: dict[str, dict[str, str]], have: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Per `Kind.group`: objects missing from `have`, extra in it, and at another resourceVersion."""
    out = {}
    for k in sorted(set(want) | set(have)):
        w, h = want.get(k, {}), have.get(k, {})
        d = {
            "missing": sorted(set(w) - set(h))[:10],
            "extra": sorted(set(h) - set(w))[:10],
            "stale": sorted(n for n in set(w) & set(h) if w[n] != h[n])[:10],
        }
        if any(d.values()):
            out[k] = d
    return out


def wait_converged(api: FakeApi, ext: Extender, timeout: float = 10.0) -> float:
    """Wait until the extender's view equals the server's state (same objects and resourceVersions); seconds taken."""
    started = time.monotonic()
    while True:
        want, have = api.expected_view(), extender_view(ext)
        if want == have:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"the extender's view differs from the server after {timeout}s: {view_diff(want, have)}")
        time.sleep(0.1)


LEADERSHIP_FLAGS = ("--leader-elect", "--follow-scheduler-lease", "--scheduler-config", "--standalone", "--read-only")


def cluster_extender(api: FakeApi, *args: str, env: dict[str, str] | None = None, command: str = "serve") -> Extender:
    """`COMMAND --kubeconfig` against `api` (serve, controllers or all); --standalone (the only allocator or
    evictor) unless ARGS make a leadership choice."""
    chosen = any(a.split("=")[0] in LEADERSHIP_FLAGS for a in args)
    return Extender("--kubeconfig", str(api.kubeconfig), *(() if chosen else ("--standalone",)), *args, env=env, command=command)


@contextmanager
def serving(api: FakeApi, *args: str, command: str = "serve") -> Iterator[Extender]:
    """`cluster_extender(api, *args)`, ready and converged; on exit the extender and `api` both stop."""
    ext = cluster_extender(api, *args, command=command)
    try:
        ext.wait_ready()
        wait_converged(api, ext)
        yield ext
    finally:
        ext.stop()
        api.stop()


def filter_pod(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """/filter for a whole pod object (not the demo's), answered 200."""
    resp = ext.post("filter", {"Pod": pod, "NodeNames": nodes})
    assert resp.status_code == 200, resp.text
    return resp.json()


def bind(ext: Extender, pod: dict[str, Any], node_name: str) -> str:
    """/bind of `pod` (namespace default) to `node_name`: the answer's Error ("" when bound)."""
    meta = pod["metadata"]
    return ext.post("bind", {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node_name}).json()["Error"]
