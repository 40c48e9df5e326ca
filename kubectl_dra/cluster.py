"""One list of each kind from the API server, fed through the tracker into a ClusterState.

The views are then computed locally with the extender's own code (tracker,
allocator, the outcome cache /filter uses, the eviction plan), never by
calling the extender, whose verbs listen on the scheduler pod's loopback.
"""

from __future__ import annotations

from typing import Any

import orjson

from allocator.cel import CelEnvironment
from tracker import events as ev
from tracker.apiserver.discovery import minor_of
from tracker.apiserver.source import ApiSource
from tracker.resources import CORE_RESOURCES, OWN_PATCHES, OWN_RULES, UPSTREAM_RULE_VERSIONS, UPSTREAM_RULES_PLURAL, Resource
from tracker.resources import api_version as api_version_of
from tracker.resources import upstream_rules as upstream_rules_at
from tracker.source import SourceError
from tracker.state import ClusterState

MANAGED_BY = "app.kubernetes.io/managed-by"
PLUGIN = "kubectl-dra"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotServed(Exception):
    """The server does not serve what the command asks for: our words (what it needs), not the server's."""


# Kubernetes minor -> (the resource.k8s.io version that has DeviceTaintRule, the feature gates it needs that are off by
# default). Upstream's kube_features.go and controlplane/instance.go: alpha and beta versions of resource.k8s.io are off
# by default; DRADeviceTaints was alpha until 1.36 (beta and on there), DRADeviceTaintRules split from it in 1.35.
UPSTREAM_RULES_NEED: dict[int, tuple[str, tuple[str, ...]]] = {
    33: ("v1alpha3", ("DRADeviceTaints",)),
    34: ("v1alpha3", ("DRADeviceTaints",)),
    35: ("v1alpha3", ("DRADeviceTaints", "DRADeviceTaintRules")),
    36: ("v1beta2", ("DRADeviceTaintRules",)),
}


def upstream_rules_needs(minor: int | None, served: tuple[str, ...]) -> str:
    """What this server needs to serve resource.k8s.io DeviceTaintRule, from its version and the resource.k8s.io versions it serves."""
    group = ev.GROUP_RESOURCE
    has = f"serves {group} {', '.join(served)}" if served else f"serves no {group}"
    where = f"the API server ({has}, its version unknown)" if minor is None else f"the API server (Kubernetes 1.{minor}, {has})"
    said = f"{where} does not serve {group} DeviceTaintRule"
    drop = "; or drop --upstream to use the project's CRD"
    if minor is not None and minor < min(UPSTREAM_RULES_NEED):
        return f"{said}: Kubernetes has it from 1.{min(UPSTREAM_RULES_NEED)} on{drop}"
    if minor is None or minor not in UPSTREAM_RULES_NEED:
        return f"{said}: its release notes say which {group} version and feature gates serve it{drop}"
    version, gates = UPSTREAM_RULES_NEED[minor]
    runtime = "" if version in served else f"--runtime-config={group}/{version}=true and "
    return (
        f"{said}: on 1.{minor} it is {group}/{version}, served with kube-apiserver {runtime}"
        f"--feature-gates={','.join(f'{g}=true' for g in gates)} (kube-controller-manager and kube-scheduler need the gates too){drop}"
    )


def _message(status: int, body: bytes) -> str:
    try:
        data = orjson.loads(body)
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    except orjson.JSONDecodeError:
        pass
    return f"HTTP {status}: {body[:200].decode(errors='replace')}"


class Cluster:
    """The admin's cluster through their kubeconfig (tracker.apiserver.source.ApiSource does auth and HTTP; tracker.resources says where each kind lives)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.source = ApiSource(kubeconfig=kubeconfig, context=context, program=PLUGIN)
        self._upstream: Resource | None = None
        self._upstream_known = False

    async def close(self) -> None:
        await self.source.close()

    async def call(
        self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None, content_type: str | None = None
    ) -> Any:
        status, data = await self.source.request(
            method, path, query=query, body=body, content_type=content_type or ("application/json" if body is not None else None)
        )
        if status >= 300:
            raise ApiError(status, _message(status, data))
        return orjson.loads(data) if data else None

    async def list(
        self, res: Resource, *, label_selector: str | None = None, field_selector: str | None = None, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object of a kind (all namespaces, or `namespace`'s), page by page; [] when the API is not served."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": 500}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        while True:
            try:
                page = await self.call("GET", res.collection(namespace), query=query)
            except ApiError as e:
                if e.status == 404 and not res.required:
                    return []
                raise
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = token

    async def upstream_rules(self) -> Resource | None:
        """resource.k8s.io DeviceTaintRule at the newest version the server serves, None if none."""
        if not self._upstream_known:
            self._upstream_known = True
            for version in UPSTREAM_RULE_VERSIONS:
                try:
                    listing = await self.call("GET", f"/apis/{ev.GROUP_RESOURCE}/{version}")
                except ApiError:
                    continue
                if any(r.get("name") == UPSTREAM_RULES_PLURAL for r in listing.get("resources") or []):
                    self._upstream = upstream_rules_at(version)
                    break
        return self._upstream

    async def rule_resource(self, upstream: bool) -> Resource:
        if not upstream:
            return OWN_RULES
        res = await self.upstream_rules()
        if res is None:
            raise NotServed(upstream_rules_needs(await self.minor(), await self._served(ev.GROUP_RESOURCE)))
        return res

    async def _served(self, group: str) -> tuple[str, ...]:
        """The versions of `group` the server serves (discovery), [] when none or it cannot say."""
        try:
            listing = await self.call("GET", f"/apis/{group}")
        except ApiError:
            return ()
        return tuple(str(v.get("version")) for v in (listing or {}).get("versions") or () if isinstance(v, dict))

    async def minor(self) -> int | None:
        """The server's Kubernetes minor version from /version ("36", or "36+" from some distributions); None if it cannot say."""
        try:
            info = await self.call("GET", "/version")
        except ApiError:
            return None
        return minor_of(info)

    async def snapshot(self) -> ClusterState:
        """The tracker's state from one list of each kind."""
        state = ClusterState(CelEnvironment())
        resources = [*CORE_RESOURCES, OWN_RULES, OWN_PATCHES]
        upstream = await self.upstream_rules()
        if upstream is not None:
            resources.append(upstream)
        for res in resources:
            state.replace(res.kind, res.group, await self.list(res))
            state.mark_synced(res.kind, res.group)
        for kind, group in state.required - state.synced:
            state.mark_synced(kind, group)  # an API the server does not serve holds nothing
        return state


class ReadOnlySource:
    """The BindingSource `kubectl dra why` gives the extender's Service: it reads, and refuses every write.

    The Service runs with `observe_only` and writes nothing on /filter's path;
    this makes that a guarantee on the admin's cluster, not a convention.
    """

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        return await self._cluster.source.get(kind, namespace, name, group)

    def api_version(self, kind: str, group: str) -> str:
        return api_version_of(kind, group)

    @staticmethod
    def _refuse(what: str) -> SourceError:
        return SourceError(f"kubectl dra why only reads: it does not {what}")

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        raise self._refuse(f"patch ResourceClaim {namespace}/{name}")

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse(f"create a ResourceClaim in {namespace}")

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        raise self._refuse(f"delete ResourceClaim {namespace}/{name}")

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse(f"patch Pod {namespace}/{name}")

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise self._refuse(f"bind Pod {namespace}/{name}")

    async def create_event(self, event: dict[str, Any]) -> None:
        raise self._refuse("record Events")
