"""The API server's writes in `--source DIR` mode, recorded in the overlay.

Each write checks what the API server would (the object exists, the
resourceVersion and UID preconditions, immutable fields) and fails with the
same SourceError (NotFound, Conflict, Invalid), so the binder and the
eviction controller see the answers they would get from a cluster.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from typing import Any

import orjson

from tracker import events as ev
from tracker.manifest.claims import ClaimController
from tracker.manifest.directory import FileObject, now_utc, object_ref
from tracker.manifest.load import Identity
from tracker.manifest.overlay import OverlayStore
from tracker.source import Conflict, Invalid, NotFound, merge_patch
from tracker.timestamps import rfc3339

log = logging.getLogger("dra_extender.source")


class OverlayWrites:
    """Claim, pod, rule and volume writes against the store, with the API server's checks.

    The write half of the `Source` protocol (async, as a cluster's are, though nothing here
    waits): ManifestSource is these writes plus the directory and its reads."""

    def __init__(self, store: OverlayStore, claims: ClaimController) -> None:
        self.store = store
        self.claims = claims

    # ------------------------------------------------------------------ claims

    def _claim_for_write(self, claim: dict[str, Any]) -> Identity:
        meta = claim.get("metadata") if isinstance(claim, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise Invalid("ResourceClaim: metadata.name is required")
        namespace = meta.get("namespace") or "default"
        ident = self.store.find(ev.RESOURCE_CLAIM, namespace, meta["name"])
        if ident is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{meta["name"]}" not found in namespace {namespace}')
        current = self.store.objects[ident]["metadata"]
        want_rv = meta.get("resourceVersion")
        if want_rv and str(want_rv) != current["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{meta["name"]}": the object has been '
                f"modified; please apply your changes to the latest version and try again "
                f"(resourceVersion {want_rv}, now {current['resourceVersion']})"
            )
        want_uid = meta.get("uid")
        if want_uid and want_uid != current.get("uid"):
            raise Conflict(f"ResourceClaim {ident[2]}: UID {want_uid} does not match {current.get('uid')}")
        return ident

    async def update_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Metadata (finalizers, labels, annotations) of a claim; its spec is immutable, as upstream."""
        ident = self._claim_for_write(claim)
        if "spec" in claim and claim["spec"] != self.store.objects[ident].get("spec"):
            raise Invalid(f"ResourceClaim {ident[2]}: spec: field is immutable")
        meta = claim["metadata"]
        over = self.store.overlay_of(ident)
        over.finalizers = [str(f) for f in meta.get("finalizers") or ()]
        over.labels = dict(meta.get("labels") or {})
        over.annotations = dict(meta.get("annotations") or {})
        return self.store.commit(ident, "update claim", finalizers=over.finalizers)

    async def update_claim_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Only `.status` is taken (allocation, reservedFor), as the /status subresource does."""
        ident = self._claim_for_write(claim)
        status = claim.get("status")
        if status is not None and not isinstance(status, dict):
            raise Invalid(f"ResourceClaim {ident[2]}: status must be an object")
        self.store.overlay_of(ident).status = copy.deepcopy(status or {})
        allocation = (status or {}).get("allocation") or {}
        devices = [
            f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
            for r in (allocation.get("devices") or {}).get("results") or ()
            if isinstance(r, dict)
        ]
        reserved = [r.get("name") for r in (status or {}).get("reservedFor") or () if isinstance(r, dict)]
        return self.store.commit(ident, "update claim status", devices=devices, reservedFor=reserved)

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the claim or its /status, as the API server applies it."""
        current = self.store.get(ev.RESOURCE_CLAIM, namespace, name)
        if current is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found in namespace {namespace or "default"}')
        want_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        merged = merge_patch(current, patch)
        if not want_rv:
            merged["metadata"].pop("resourceVersion", None)  # no precondition asked for
        return await (self.update_claim_status(merged) if status else self.update_claim(merged))

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        """A claim made at /bind, named from generateName, kept in memory until the pod is gone."""
        store = self.store
        meta = dict(claim.get("metadata") or {})
        namespace = namespace or "default"
        name = meta.get("name") or f"{meta.get('generateName') or ''}{hashlib.sha256(str(store.rv + 1).encode()).hexdigest()[:5]}"
        ident = (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"{namespace}/{name}")
        if ident in store.objects:
            raise Conflict(f'resourceclaims.resource.k8s.io "{name}" already exists')
        meta.update(name=name, namespace=namespace, uid=f"created-{namespace}-{name}", creationTimestamp=rfc3339(now_utc()))
        meta.pop("generateName", None)
        raw = {**claim, "metadata": meta}
        raw.pop("status", None)
        digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).digest()
        fo = FileObject(None, raw, digest, digest)
        store.created[ident] = fo
        store.files[ident] = fo
        obj = store.store(ident)
        log.info("recorded claim creation in the overlay", extra={"object": object_ref(ident)})
        store.emit("ADDED", ident, obj)
        return copy.deepcopy(obj)

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        store = self.store
        ident = store.find(ev.RESOURCE_CLAIM, namespace, name)
        if ident is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found')
        if uid and store.objects[ident]["metadata"].get("uid") != uid:
            raise Conflict(f"ResourceClaim {ident[2]}: precondition failed: UID {uid}")
        if ident not in store.created:
            raise Invalid(f"ResourceClaim {ident[2]}: only claims created while running can be deleted in --source mode")
        del store.created[ident]
        store.files.pop(ident, None)
        store.overlays.pop(ident, None)
        store.emit("DELETED", ident, store.remove(ident))

    # ------------------------------------------------------------------ pods

    def _pod_for_write(self, namespace: str, name: str, uid: str) -> Identity:
        ident = self.store.find(ev.POD, namespace, name)
        if ident is None:
            raise NotFound(f'pods "{name}" not found in namespace {namespace or "default"}')
        have = self.store.objects[ident]["metadata"].get("uid")
        if uid and have != uid:
            raise Conflict(f"Pod {ident[2]}: precondition failed: UID in precondition: {uid}, UID in object meta: {have}")
        return ident

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        ident = self._pod_for_write(namespace, name, "")
        over = self.store.overlay_of(ident)
        over.pod_status = merge_patch(over.pod_status or {}, patch.get("status") or {})
        return self.store.commit(ident, "pod status", status=sorted((patch.get("status") or {}).keys()))

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        ident = self._pod_for_write(namespace, name, uid)
        bound = (self.store.objects[ident].get("spec") or {}).get("nodeName")
        if bound:
            raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{bound}"')
        if not node:
            raise Invalid(f"Pod {ident[2]}: binding target node is required")
        self.store.overlay_of(ident).node_name = node
        self.store.commit(ident, "bind", node=node)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """The pod stays deleted, though its file is unchanged, until its manifest changes."""
        ident = self._pod_for_write(namespace, name, uid)
        self.store.overlay_of(ident).deleted = True
        last = self.store.remove(ident)
        log.info("recorded pod deletion in the overlay", extra={"object": object_ref(ident), "uid": uid})
        self.store.emit("DELETED", ident, last)
        pod_uid = last["metadata"].get("uid")
        if pod_uid:
            self.claims.release(ident, pod_uid, emit=True)

    # Without PodDisruptionBudgets to consult, an eviction here is a deletion.
    evict_pod = delete_pod

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Set one pod condition (by type), like a strategic-merge patch of status.conditions."""
        ident = self._pod_for_write(namespace, name, "")
        if not isinstance(condition, dict) or not isinstance(condition.get("type"), str) or not condition["type"]:
            raise Invalid(f"Pod {ident[2]}: status.conditions[].type is required")
        self.store.overlay_of(ident).conditions[condition["type"]] = copy.deepcopy(condition)
        self.store.commit(ident, "pod condition", condition=condition["type"], status=condition.get("status"))

    # ------------------------------------------------------------------ rules and volumes

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into a DeviceTaintRule's status (a merge patch of /status)."""
        ident = self.store.find(ev.DEVICE_TAINT_RULE, "", name, group)
        if ident is None:
            raise NotFound(f'devicetaintrules.{group} "{name}" not found')
        if not isinstance(status, dict):
            raise Invalid(f"DeviceTaintRule {name}: status must be an object")
        over = self.store.overlay_of(ident)
        over.status = {**(over.status or {}), **copy.deepcopy(status)}
        self.store.commit(ident, "rule status")

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a rule's `spec.taint.timeAdded` in the overlay (until its file changes)."""
        ident = self.store.find(ev.DEVICE_TAINT_RULE, "", name, group)
        if ident is None:
            raise NotFound(f'devicetaintrules.{group} "{name}" not found')
        self.store.overlay_of(ident).time_added = time_added
        self.store.commit(ident, "rule timeAdded", timeAdded=time_added)

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Set a PVC's or PV's volume-taints annotation in the overlay (until its file changes)."""
        from tracker.volumes import TAINTS_ANNOTATION

        ident = self.store.find(kind, namespace, name)
        if ident is None:
            raise NotFound(f'{kind} "{name}" not found')
        current = (self.store.objects[ident].get("metadata") or {}).get("annotations") or {}
        self.store.overlay_of(ident).annotations = {**current, TAINTS_ANNOTATION: text}
        self.store.commit(ident, "volume taints", annotation=TAINTS_ANNOTATION)
