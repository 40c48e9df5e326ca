"""The API server's writes: claim patches, bindings, deletions, evictions, conditions, rule and volume updates, Events.

A mixin of ApiSource: each write is one request on the client's
authenticated session (`send`), addressed through the resource registry,
with compact JSON bodies; a non-success answer becomes the matching
SourceError (NotFound, Conflict, Invalid, or one with the HTTP status).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import orjson

from tracker import events as ev
from tracker import k8s_events
from tracker.resources import KIND_RESOURCES, Resource, resource_for
from tracker.resources import api_version as registry_api_version
from tracker.source import status_error
from tracker.volumes import TAINTS_ANNOTATION

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_POD = KIND_RESOURCES[ev.POD]
_CLAIM = KIND_RESOURCES[ev.RESOURCE_CLAIM]


class ApiWrites(ABC):
    """Writes over `send`; `rule_resources` holds upstream's DeviceTaintRule as discovered (empty: not served or not yet known)."""

    rule_resources: list[Resource]

    @abstractmethod
    async def send(
        self, method: str, path: str, body: Any, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> tuple[int, bytes]:
        """One request on the API server's session: (HTTP status, body). ApiSource sends on its client's session."""

    def _resource(self, kind: str, group: str | None = None) -> Resource:
        upstream = self.rule_resources[0].version if self.rule_resources else None
        return resource_for(kind, group, upstream)

    def api_version(self, kind: str, group: str) -> str:
        """The apiVersion of `kind` in `group` as served here (upstream DeviceTaintRule: the version watched)."""
        return registry_api_version(kind, group, self.rule_resources[0].version if self.rule_resources else None)

    async def _write(self, method: str, path: str, body: Any, what: str, content_type: str = "application/json") -> dict[str, Any]:
        status, data = await self.send(method, path, body, content_type=content_type)
        if status not in (200, 201, 202):
            raise status_error(status, data, what)
        result: dict[str, Any] = orjson.loads(data) if data else {}
        return result

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        path = _CLAIM.item(namespace, name) + ("/status" if status else "")
        what = f"patch ResourceClaim {namespace}/{name}{' status' if status else ''}"
        return await self._write("PATCH", path, patch, what, content_type=MERGE_PATCH)

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        what = f"create ResourceClaim {namespace}/{(claim.get('metadata') or {}).get('generateName', '')}"
        return await self._write("POST", _CLAIM.collection(namespace), claim, what)

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else {}
        await self._write("DELETE", _CLAIM.item(namespace, name), body, f"delete ResourceClaim {namespace}/{name}")

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        path = _POD.item(namespace, name) + "/status"
        return await self._write("PATCH", path, patch, f"patch Pod {namespace}/{name} status", content_type=MERGE_PATCH)

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._write("PATCH", _POD.item(namespace, name), patch, f"patch Pod {namespace}/{name}", content_type=MERGE_PATCH)

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._write("POST", _POD.item(namespace, name) + "/binding", binding, f"bind Pod {namespace}/{name}")

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self._write("DELETE", _POD.item(namespace, name), body, f"delete Pod {namespace}/{name}")

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        await self._write("POST", _POD.item(namespace, name) + "/eviction", body, f"evict Pod {namespace}/{name}")

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        patch = {"status": {"conditions": [condition]}}
        await self._write(
            "PATCH",
            _POD.item(namespace, name) + "/status",
            patch,
            f"patch Pod {namespace}/{name} status",
            content_type=STRATEGIC_MERGE_PATCH,
        )

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self._write(
            "PATCH",
            res.item("", name) + "/status",
            {"status": status},
            f"patch DeviceTaintRule {name} status",
            content_type=MERGE_PATCH,
        )

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a rule's `spec.taint.timeAdded` (our CRD rules: the API server does not, as it does upstream's)."""
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self._write(
            "PATCH",
            res.item("", name),
            {"spec": {"taint": {"timeAdded": time_added}}},
            f"patch DeviceTaintRule {name} timeAdded",
            content_type=MERGE_PATCH,
        )

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Rewrite a PVC's or PV's volume-taints annotation (the eviction controller's timeAdded)."""
        res = KIND_RESOURCES[kind]
        await self._write(
            "PATCH",
            res.item(namespace, name),
            {"metadata": {"annotations": {TAINTS_ANNOTATION: text}}},
            f"patch {kind} {namespace + '/' if namespace else ''}{name} volume taints",
            content_type=MERGE_PATCH,
        )

    async def create_event(self, event: dict[str, Any]) -> None:
        """A core/v1 Event in the involved object's namespace; a failure is logged (tracker.k8s_events)."""
        await k8s_events.post_event(self._write, event)
