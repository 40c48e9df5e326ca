"""An in-repo fake Kubernetes API server: real HTTP for the production client path.

    async with FakeApiServer(bookmark_interval=0.2) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        ...  # drive kubernetes_asyncio / the extender against api.url
        api.compact(); api.drop_watches(); api.set_faults(error_rate=0.2)

Python helpers (synchronous; call them from the server's event loop; they
are privileged: no HTTP validation, `status` kept as given; they return
copies and raise `FakeApiError` with `.status`/`.reason` like the server):
`create(obj)`, `get(kind, ns, name)` (None if missing), `update(obj)`,
`update_status(obj)`, `apply(obj)` (upsert), `patch(kind, ns, name, patch,
patch_type="merge"|"strategic"|"json"|"apply")`, `delete(kind, ns, name,
uid=, resource_version=, force=)`, `list(kind, ns, label_selector=,
field_selector=)`, `count(kind)`, `bind(ns, name, node)`, `load(*files_dirs_or_objs,
copy=True)`. `kind` is a plural, kind, singular or short name; pass
`group=` (or `plural.group`) to pick `resource.dra-extender.io` over
`resource.k8s.io` for DeviceTaintRule.

Faults and inspection: `set_faults(error_rate=, error_status=, latency_ms=,
jitter_ms=, verbs=, paths=, retry_after_seconds=, fail_next=)`,
`fail_next(n, status=)`, `clear_faults()`, `compact()`, `drop_watches(abrupt=True,
resource=)`, `set_served(group, version=None, served=)`, `add_reactor(fn)`,
`requests` / `requests_for(verb=, resource=)`, `open_watches`,
`await wait_for_watches(n, resource=)`, `resource_version`, `state()`.

Or as a subprocess for end-to-end tests: `python -m kubesim.fakeapi --port 0
--kubeconfig-out PATH [--load DIR_OR_FILE ...]` prints `{"url": ...}` when
ready and takes the same controls over HTTP under `/_fake/` (state, faults,
fail-next, compact, drop-watches, serve, requests, objects).

CustomResourceDefinitions are served from `apiextensions.k8s.io/v1` and
refused as a real server refuses them (structural schema, rules that do not
compile, rules over the CEL cost budget); a stored CRD serves its kind and
every write of it is pruned and validated against the schema, CEL rules
included (kubesim/fakeapi/crd.py). The chart's CRDs are installed at start
unless `crds=False` (`--no-crds`): then apply them yourself with
`install_crd(crd)` or a POST, as `kubectl apply` does.

ResourceSlices are judged by the 1.36 API server's rules, written here
(`resource_slices.py`, `slice_devices.py`), never by the extender's parser:
a test can see the API server accept what the extender refuses. The server
itself is `server.py` (state, lifecycle, Python helpers), `routing.py` and
`verbs.py` (HTTP), `watch.py`, `faults.py` and `control.py` (`/_fake/`).

`pods/eviction` honours PodDisruptionBudgets (`policy/v1`, 429 when a budget
forbids it; see `disruption.py`) and marks the pod `DisruptionTarget` first.

Why not a library: none has real resourceVersions, 410 Gone, bookmarks and
`watch=True` handling together (docs/dependencies.md#the-fake-api-server-is-our-own).
"""

from __future__ import annotations

from kubesim.fakeapi.faults import Faults, RequestInfo, RequestRecord
from kubesim.fakeapi.registry import Registry, ResourceType, default_types
from kubesim.fakeapi.server import FakeApiServer, iter_manifests
from kubesim.fakeapi.store import ApiError

FakeApiError = ApiError

__all__ = [
    "ApiError",
    "FakeApiError",
    "FakeApiServer",
    "Faults",
    "Registry",
    "RequestInfo",
    "RequestRecord",
    "ResourceType",
    "default_types",
    "iter_manifests",
]
