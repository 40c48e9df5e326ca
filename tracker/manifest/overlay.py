"""What the "cluster" holds in `--source DIR` mode: the files' objects with the writes made while running on top.

Writes (claim metadata and status, bindings, pod deletion and conditions,
rule status) live in an in-memory overlay on top of the files, so the
binder and the eviction controller work unchanged in this mode. A changed
file replaces its objects, but the overlay's claim allocations and
reservations and a pod's binding survive unless the new file sets them
itself; a deleted pod stays deleted until its manifest changes. Every
object carries a resourceVersion of its own and a generation that counts
its spec's changes, and every change is told to the sink as a watch event.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from tracker import events as ev
from tracker.events import EventSink
from tracker.manifest.directory import FileObject, object_ref
from tracker.manifest.load import Identity
from tracker.source import merge_patch

log = logging.getLogger("dra_extender.source")


@dataclass(slots=True)
class Overlay:
    """Writes made while running, kept on top of an object's file definition."""

    finalizers: list[str] | None = None  # claims
    labels: dict[str, Any] | None = None  # claims
    annotations: dict[str, Any] | None = None  # claims
    status: dict[str, Any] | None = None  # claims (replaced whole), rules (merged)
    node_name: str | None = None  # pods
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)  # pods, by type
    deleted: bool = False  # pods
    time_added: str | None = None  # rules: spec.taint.timeAdded stamped by the eviction controller
    pod_status: dict[str, Any] | None = None  # pods: merged into status (extendedResourceClaimStatus)

    def empty(self) -> bool:
        return (
            self.finalizers is None
            and self.labels is None
            and self.annotations is None
            and self.status is None
            and self.node_name is None
            and not self.conditions
            and not self.deleted
            and self.time_added is None
            and self.pod_status is None
        )

    def apply(self, kind: str, raw: dict[str, Any]) -> None:
        """Lay these writes over `raw` (a fresh top-level dict and metadata; nested values are not mutated)."""
        meta = raw["metadata"]
        for name in ("finalizers", "labels", "annotations"):
            value = getattr(self, name)
            if value:
                meta[name] = copy.deepcopy(value)
            elif value is not None:
                meta.pop(name, None)  # written empty: omitted, as the API server returns it
        if self.status is not None:
            if kind == ev.DEVICE_TAINT_RULE:
                raw["status"] = {**(raw.get("status") or {}), **copy.deepcopy(self.status)}
            else:
                raw["status"] = copy.deepcopy(self.status)
        if self.node_name is not None:
            raw["spec"] = {**(raw.get("spec") or {}), "nodeName": self.node_name}
        if self.time_added is not None and isinstance((raw.get("spec") or {}).get("taint"), dict):
            raw["spec"] = {**raw["spec"], "taint": {**raw["spec"]["taint"], "timeAdded": self.time_added}}
        if self.pod_status is not None:
            raw["status"] = merge_patch(raw.get("status") or {}, self.pod_status)
        if self.conditions:
            status = dict(raw.get("status") or {})
            conditions = [c for c in status.get("conditions") or () if not (isinstance(c, dict) and c.get("type") in self.conditions)]
            status["conditions"] = conditions + [copy.deepcopy(c) for c in self.conditions.values()]
            raw["status"] = status

    def rebase(self, new_raw: dict[str, Any]) -> None:
        """The object's manifest changed: what the new file sets replaces these writes."""
        meta = new_raw.get("metadata") or {}
        if "finalizers" in meta:
            self.finalizers = None
        self.labels = self.annotations = None
        self.time_added = None  # the file's (or its load time's) timeAdded wins
        if "status" in new_raw:
            self.status = None
        if (new_raw.get("spec") or {}).get("nodeName"):
            self.node_name = None
        if (new_raw.get("status") or {}).get("conditions"):
            self.conditions = {}


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}


class OverlayStore:
    """The objects: definitions (files, claims created while running) + overlays, at their resourceVersions."""

    def __init__(self) -> None:
        self.sink: EventSink | None = None  # set when the source runs; changes before that are not told
        self.files: dict[Identity, FileObject] = {}  # the current definitions
        self.objects: dict[Identity, dict[str, Any]] = {}  # what the "cluster" has: definitions + overlays
        self.overlays: dict[Identity, Overlay] = {}
        self.created: dict[Identity, FileObject] = {}  # claims created by /bind: kept like file objects
        self._generations: dict[Identity, tuple[bytes, int]] = {}
        self.rv = 0  # the last resourceVersion given out

    # ------------------------------------------------------------------ reads

    def find(self, kind: str, namespace: str, name: str, group: str | None = None) -> Identity | None:
        key = f"{namespace or 'default'}/{name}" if kind in ev.NAMESPACED_KINDS else name
        groups = [group] if group is not None else [ev.GROUP_CORE, ev.GROUP_RESOURCE, ev.GROUP_EXTENDER]
        for g in groups:
            ident = (kind, g, key)
            if ident in self.objects:
                return ident
        return None

    def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        """A copy of the object (definition + overlay); a DeviceTaintRule is looked up in resource.k8s.io first."""
        ident = self.find(kind, namespace, name, group)
        return copy.deepcopy(self.objects[ident]) if ident is not None else None

    @property
    def rule_status(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(group, name) -> status written with update_rule_status (for tests and tools)."""
        return {
            (g, key): copy.deepcopy(over.status)
            for (kind, g, key), over in self.overlays.items()
            if kind == ev.DEVICE_TAINT_RULE and over.status is not None
        }

    # ------------------------------------------------------------------ composing and telling

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _generation(self, ident: Identity, fo: FileObject) -> int:
        previous = self._generations.get(ident)
        generation = 1 if previous is None else previous[1] + (previous[0] != fo.spec_digest)
        self._generations[ident] = (fo.spec_digest, generation)
        return generation

    def compose(self, ident: Identity) -> dict[str, Any]:
        """Definition + overlay, without a resourceVersion. Never mutates the definition."""
        fo = self.files[ident]
        raw = {**fo.raw, "metadata": {**fo.raw["metadata"], "generation": self._generation(ident, fo)}}
        raw["metadata"].pop("resourceVersion", None)
        over = self.overlays.get(ident)
        if over is not None:
            over.apply(ident[0], raw)
        return raw

    def store(self, ident: Identity) -> dict[str, Any]:
        """Compose the object again at a new resourceVersion (not told to the sink)."""
        obj = self.compose(ident)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.objects[ident] = obj
        return obj

    def remove(self, ident: Identity) -> dict[str, Any]:
        """Drop the object; its last state at a new resourceVersion (for the DELETED event)."""
        last = self.objects.pop(ident)
        return {**last, "metadata": {**last["metadata"], "resourceVersion": self.next_rv()}}

    def emit(self, etype: ev.EventType, ident: Identity, obj: dict[str, Any]) -> None:
        if self.sink is not None:
            self.sink.apply(ev.ObjectEvent(etype, ident[0], ident[1], ident[2], obj))

    def overlay_of(self, ident: Identity) -> Overlay:
        return self.overlays.setdefault(ident, Overlay())

    def commit(self, ident: Identity, what: str, **details: Any) -> dict[str, Any]:
        """A write recorded in the overlay: the object at a new resourceVersion, told as MODIFIED; a copy of it."""
        obj = self.store(ident)
        log.debug(  # one per claim write and Binding: at INFO it would cost more than the write
            "recorded write in the overlay",
            extra={"write": what, "object": object_ref(ident), "resourceVersion": obj["metadata"]["resourceVersion"], **details},
        )
        self.emit("MODIFIED", ident, obj)
        return copy.deepcopy(obj)

    # ------------------------------------------------------------------ new definitions

    def apply_files(self, files: dict[Identity, FileObject], gone: list[Identity], *, emit: bool) -> list[tuple[Identity, str]]:
        """Make `files` the current definitions (`gone`: no longer defined); tell what really changed.

        Returns the pods that went away with their files, (identity, uid), whose claims are to be released.
        """
        for ident in gone:
            self._generations.pop(ident, None)  # a later object of that name is a new object
        files = {**{i: fo for i, fo in self.created.items() if i not in files}, **files}
        old_files, self.files = self.files, files
        for ident, fo in files.items():
            self._refresh(ident, fo, old_files.get(ident), emit=emit)
        gone_pods: list[tuple[Identity, str]] = []
        for ident in [i for i in self.objects if i not in files]:
            obj = self.remove(ident)
            if ident[0] == ev.POD and obj["metadata"].get("uid"):
                gone_pods.append((ident, obj["metadata"]["uid"]))
            if emit:
                self.emit("DELETED", ident, obj)
        for ident in [i for i in self.overlays if i not in files]:
            del self.overlays[ident]
        return gone_pods

    def _refresh(self, ident: Identity, fo: FileObject, before: FileObject | None, *, emit: bool) -> None:
        """One object under its (maybe new) definition: composed again, and told, only if it really changed."""
        changed = before is None or before.digest != fo.digest
        if changed and before is not None:
            self._rebase(ident, fo.raw)
        over = self.overlays.get(ident)
        if over is not None and over.deleted:
            return
        current = self.objects.get(ident)
        if not changed and current is not None:
            return
        obj = self.compose(ident)
        if current is not None and _without_rv(current) == obj:
            return
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.objects[ident] = obj
        if emit:
            self.emit("ADDED" if current is None else "MODIFIED", ident, obj)

    def _rebase(self, ident: Identity, new_raw: dict[str, Any]) -> None:
        over = self.overlays.get(ident)
        if over is None:
            return
        if over.deleted:  # a pod whose manifest changed after its deletion is a new pod
            del self.overlays[ident]
            return
        over.rebase(new_raw)
        if over.empty():
            del self.overlays[ident]
