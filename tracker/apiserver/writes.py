"""The API server's writes: claim patches, bindings, deletions, evictions, conditions, rule and volume updates, Events.

A mixin of ApiSource implementing the narrow writer protocols of
tracker/source.py. Each write is a `Request` built by a pure function
(tracker/apiserver/requests.py) and sent by the one executor, `execute`:
one request on the client's authenticated session (`send`, or `request`
for a read), with a compact JSON body; a non-success answer becomes the
matching SourceError (NotFound, Conflict, Invalid, or one with the HTTP
status) naming the object.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

import orjson

from tracker import events as ev
from tracker.apiserver import requests
from tracker.apiserver.requests import STRATEGIC_MERGE_PATCH, Request
from tracker.resources import HEALTH_POLICIES, KIND_RESOURCES, OWN_RULES, Resource, resource_for
from tracker.resources import api_version as registry_api_version
from tracker.source import SourceError, status_error
from tracker.volumes import TAINTS_ANNOTATION

log = logging.getLogger("dra_extender.source")

_POD = KIND_RESOURCES[ev.POD]
_CLAIM = KIND_RESOURCES[ev.RESOURCE_CLAIM]


class ApiWrites(ABC):
    """Writes over `send`; `rule_resources` holds upstream's DeviceTaintRule as discovered (empty: not served or not yet known)."""

    rule_resources: list[Resource]

    @abstractmethod
    async def send(
        self, method: str, path: str, body: Any, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> tuple[int, bytes]:
        """One request with a body on the API server's session: (HTTP status, body). ApiSource sends on its client's session."""

    @abstractmethod
    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = 30.0,
    ) -> tuple[int, bytes]:
        """One read (or a Lease write) through the client: (HTTP status, body)."""

    def _resource(self, kind: str, group: str | None = None) -> Resource:
        upstream = self.rule_resources[0].version if self.rule_resources else None
        return resource_for(kind, group, upstream)

    def api_version(self, kind: str, group: str) -> str:
        """The apiVersion of `kind` in `group` as served here (upstream DeviceTaintRule: the version watched)."""
        return registry_api_version(kind, group, self.rule_resources[0].version if self.rule_resources else None)

    async def execute(self, req: Request) -> dict[str, Any]:
        """Send `req`: the answer's JSON ({} if none); a status other than 200, 201 or 202 raises the SourceError naming `req.what`."""
        if req.method == "GET":
            status, data = await self.request(req.method, req.path, query=dict(req.query))
        else:
            status, data = await self.send(req.method, req.path, req.body, content_type=req.content_type)
        if status not in (200, 201, 202):
            raise status_error(status, data, req.what)
        result: dict[str, Any] = orjson.loads(data) if data else {}
        return result

    # ------------------------------------------------------------------ the binder (ClaimWriter, PodBindWriter)

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        return await self.execute(requests.patch(_CLAIM, namespace, name, patch, subresource="status" if status else ""))

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        return await self.execute(requests.create(_CLAIM, namespace, claim))

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        await self.execute(requests.delete(_CLAIM, namespace, name, uid or None))

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self.execute(requests.patch(_POD, namespace, name, patch, subresource="status"))

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self.execute(requests.patch(_POD, namespace, name, patch))

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        await self.execute(requests.bind_pod(namespace, name, uid, node))

    # ------------------------------------------------------------------ the eviction controller (EvictionSource)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.execute(requests.delete(_POD, namespace, name, uid))

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.execute(requests.evict_pod(namespace, name, uid))

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        patch = {"status": {"conditions": [condition]}}
        await self.execute(requests.patch(_POD, namespace, name, patch, subresource="status", content_type=STRATEGIC_MERGE_PATCH))

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self.execute(requests.patch(res, "", name, {"status": status}, subresource="status"))

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a rule's `spec.taint.timeAdded` (our CRD rules: the API server does not, as it does upstream's)."""
        res = self._resource(ev.DEVICE_TAINT_RULE, group)
        await self.execute(requests.patch(res, "", name, {"spec": {"taint": {"timeAdded": time_added}}}, aspect="timeAdded"))

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Rewrite a PVC's or PV's volume-taints annotation (the eviction controller's timeAdded)."""
        patch = {"metadata": {"annotations": {TAINTS_ANNOTATION: text}}}
        await self.execute(requests.patch(KIND_RESOURCES[kind], namespace, name, patch, aspect="volume taints"))

    # ------------------------------------------------------------------ the health controller (HealthSource, PodLabelWriter)

    async def list_own_rules(self, label_selector: str) -> list[dict[str, Any]]:
        return list((await self.execute(requests.list_objects(OWN_RULES, label_selector))).get("items") or ())

    async def create_own_rule(self, rule: dict[str, Any]) -> dict[str, Any]:
        return await self.execute(requests.create(OWN_RULES, "", rule))

    async def patch_own_rule(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self.execute(requests.patch(OWN_RULES, "", name, patch))

    async def delete_own_rule(self, name: str) -> None:
        await self.execute(requests.delete(OWN_RULES, "", name))

    async def update_policy_status(self, name: str, status: dict[str, Any]) -> None:
        await self.execute(requests.patch(HEALTH_POLICIES, "", name, {"status": status}, subresource="status"))

    async def label_pod(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        patch = {"metadata": {"labels": labels}}
        await self.execute(requests.patch(_POD, namespace, name, patch, aspect="label " + ",".join(sorted(labels))))

    # ------------------------------------------------------------------ everyone (EventWriter)

    async def create_event(self, event: dict[str, Any]) -> None:
        """A core/v1 Event in the involved object's namespace; best effort: a failure is logged, never raised."""
        req = requests.event(event)
        try:
            await self.execute(req)
        except (TimeoutError, SourceError, OSError) as e:
            log.warning("could not record event", extra={"err": str(e), "object": req.body["involvedObject"].get("name")})
