"""`--source DIR`: a directory of manifests as the cluster.

Objects get the defaults the API server would give them; invalid ones are
skipped alone with the path, object and field logged; the directory is
watched and changes are applied as events. Writes (bind, claim status,
eviction) live in an in-memory overlay on top of the files: a changed file
replaces its objects, but a claim's allocation and reservations and a pod's
binding survive unless the new file sets them itself.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import yaml

from allocator.types import (
    ValidationError,
    parse_device_class,
    parse_device_taint_rule,
    parse_node,
    parse_pod,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
    parse_resource_slice_patch,
)
from tracker import events as ev
from tracker.events import EventSink
from tracker.source import Conflict, NotFound

log = logging.getLogger("dra_extender.source")

SUFFIXES = (".yaml", ".yml", ".json")
_UID_NAMESPACE = uuid.UUID("6f1d5a52-3a0c-4b8e-9d2f-0d2a7e1c5b11")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Identity = tuple[str, str, str]  # (kind, group, key)

# (kind, group) pairs the tracker is given as full lists, so deletions reconcile.
TRACKED: tuple[tuple[str, str], ...] = (
    (ev.NODE, ev.GROUP_CORE),
    (ev.POD, ev.GROUP_CORE),
    (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE),
    (ev.DEVICE_CLASS, ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER),
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER),
)

_VERSIONS: dict[tuple[str, str], frozenset[str]] = {
    (ev.NODE, ev.GROUP_CORE): frozenset({"v1"}),
    (ev.POD, ev.GROUP_CORE): frozenset({"v1"}),
    (ev.NAMESPACE, ev.GROUP_CORE): frozenset({"v1"}),
    (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE): frozenset({"v1", "v1beta2", "v1beta1"}),
    (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE): frozenset({"v1", "v1beta2", "v1beta1"}),
    (ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE): frozenset({"v1", "v1beta2", "v1beta1"}),
    (ev.DEVICE_CLASS, ev.GROUP_RESOURCE): frozenset({"v1", "v1beta2", "v1beta1"}),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE): frozenset({"v1", "v1beta2", "v1alpha3"}),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER): frozenset({"v1alpha1"}),
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER): frozenset({"v1alpha1"}),
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_RESOURCE): frozenset({"v1alpha1", "v1alpha3", "v1beta1", "v1beta2", "v1"}),
}


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class LoadError:
    path: str
    message: str
    object: str = ""
    field: str = ""


@dataclass(slots=True)
class LoadReport:
    files: int = 0
    objects: dict[str, int] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)


@dataclass(slots=True)
class _FileObject:
    path: str
    raw: dict[str, Any]  # normalized, without the overlay
    digest: str


def _validate(kind: str, group: str, raw: dict[str, Any], default_time: str) -> None:
    if kind == ev.NODE:
        parse_node(raw)
    elif kind == ev.POD:
        parse_pod(raw)
    elif kind == ev.RESOURCE_SLICE:
        parse_resource_slice(raw, default_time=default_time)
    elif kind == ev.RESOURCE_CLAIM:
        parse_resource_claim(raw)
    elif kind == ev.RESOURCE_CLAIM_TEMPLATE:
        parse_resource_claim_template(raw)
    elif kind == ev.DEVICE_CLASS:
        parse_device_class(raw)
    elif kind == ev.DEVICE_TAINT_RULE:
        parse_device_taint_rule(raw, group=group, default_time=default_time)
    elif kind == ev.RESOURCE_SLICE_PATCH:
        parse_resource_slice_patch(raw)


class ManifestSource:
    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], datetime] = _now,
        watch: bool = True,
        debounce_ms: int = 50,
    ) -> None:
        self.directory = Path(directory)
        self.description = f"manifest directory {self.directory}"
        self.clock = clock
        self.watch = watch
        self.debounce_ms = debounce_ms
        self.load_report = LoadReport()
        self.events: list[dict[str, Any]] = []  # Events written (for tests and the log)
        self.rule_status: dict[tuple[str, str], dict[str, Any]] = {}
        self._sink: EventSink | None = None
        self._files: dict[Identity, _FileObject] = {}
        self._objects: dict[Identity, dict[str, Any]] = {}  # what the cluster "has": files + overlay
        self._overlay: dict[Identity, dict[str, Any]] = {}
        self._first_seen: dict[Identity, str] = {}
        self._taint_times: dict[tuple[Identity, str], str] = {}
        self._generations: dict[Identity, tuple[str, int]] = {}
        self._rv = 0
        self._ignored_kinds: set[str] = set()

    # ------------------------------------------------------------------ loading

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _files_in(self) -> list[Path]:
        return sorted(p for p in self.directory.rglob("*") if p.is_file() and p.suffix in SUFFIXES)

    def _documents(self, path: Path, report: LoadReport) -> Iterator[Any]:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            report.errors.append(LoadError(str(path), f"cannot read: {e}"))
            log.error("cannot read manifest file", extra={"path": str(path), "err": str(e)})
            return
        try:
            docs = [orjson.loads(text)] if path.suffix == ".json" else list(yaml.load_all(text, Loader=_Loader))
        except (yaml.YAMLError, orjson.JSONDecodeError, ValueError, RecursionError) as e:
            report.errors.append(LoadError(str(path), f"does not parse: {e}"))
            log.error("skipping manifest file that does not parse", extra={"path": str(path), "err": str(e).splitlines()[0] if str(e) else type(e).__name__})
            return
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                yield from doc["items"]
            elif doc is not None:
                yield doc

    def _classify(self, doc: Any, path: Path, report: LoadReport) -> tuple[str, str] | None:
        if not isinstance(doc, dict):
            report.errors.append(LoadError(str(path), "document is not an object"))
            log.error("skipping document that is not an object", extra={"path": str(path)})
            return None
        kind, api_version = doc.get("kind"), doc.get("apiVersion")
        if not isinstance(kind, str) or not isinstance(api_version, str) or not kind or not api_version:
            name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
            report.errors.append(LoadError(str(path), "apiVersion and kind are required", str(name or ""), "apiVersion" if not api_version else "kind"))
            log.error("skipping object without apiVersion/kind", extra={"path": str(path), "object": str(name or "<unnamed>")})
            return None
        group, _, version = api_version.rpartition("/")
        versions = _VERSIONS.get((kind, group))
        if versions is None:
            if kind not in self._ignored_kinds:
                self._ignored_kinds.add(kind)
                log.info("ignoring objects of a kind the extender does not use", extra={"kind": kind, "apiVersion": api_version, "path": str(path)})
            return None
        if version not in versions:
            report.errors.append(LoadError(str(path), f"unsupported apiVersion {api_version}", kind, "apiVersion"))
            log.error("skipping object of an unsupported apiVersion", extra={"path": str(path), "kind": kind, "apiVersion": api_version})
            return None
        if kind == ev.RESOURCE_SLICE_PATCH:
            group = ev.GROUP_EXTENDER
        return kind, group

    def _normalize(self, kind: str, group: str, doc: dict[str, Any], load_time: str) -> tuple[Identity, dict[str, Any]]:
        raw = copy.deepcopy(doc)
        meta = raw.get("metadata")
        if not isinstance(meta, dict):
            raise ValidationError(f"{kind} <unnamed>", "metadata", "required field is missing")
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ValidationError(f"{kind} <unnamed>", "metadata.name", "required field is missing")
        if kind in ev.NAMESPACED_KINDS:
            if not isinstance(meta.get("namespace"), str) or not meta["namespace"]:
                meta["namespace"] = "default"
        else:
            meta.pop("namespace", None)
        key = ev.object_key(kind, raw)
        ident = (kind, group, key)
        meta.setdefault("uid", str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{group}/{key}")))
        first = self._first_seen.setdefault(ident, load_time)
        meta.setdefault("creationTimestamp", first)
        self._fill_taint_times(ident, kind, raw, load_time)
        return ident, raw

    def _fill_taint_times(self, ident: Identity, kind: str, raw: dict[str, Any], load_time: str) -> None:
        """timeAdded defaults to when the taint was first seen, and stays that across reloads."""

        def fill(taint: Any, where: str) -> None:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                sig = f"{where}|{taint.get('key')}|{taint.get('value')}|{taint.get('effect')}"
                taint["timeAdded"] = self._taint_times.setdefault((ident, sig), load_time)

        spec = raw.get("spec")
        if not isinstance(spec, dict):
            return
        if kind == ev.RESOURCE_SLICE and isinstance(spec.get("devices"), list):
            for d in spec["devices"]:
                if not isinstance(d, dict):
                    continue
                body = d.get("basic") if isinstance(d.get("basic"), dict) else d
                if isinstance(body.get("taints"), list):
                    for t in body["taints"]:
                        fill(t, str(d.get("name")))
        elif kind == ev.DEVICE_TAINT_RULE:
            fill(spec.get("taint"), "rule")

    def _load(self) -> tuple[dict[Identity, _FileObject], LoadReport]:
        report = LoadReport()
        found: dict[Identity, _FileObject] = {}
        load_time = _rfc3339(self.clock())
        for path in self._files_in():
            report.files += 1
            for doc in self._documents(path, report):
                kind_group = self._classify(doc, path, report)
                if kind_group is None:
                    continue
                kind, group = kind_group
                try:
                    ident, raw = self._normalize(kind, group, doc, load_time)
                    _validate(kind, group, raw, load_time)
                except ValidationError as e:
                    report.errors.append(LoadError(str(path), e.reason, e.obj, e.field))
                    log.error(
                        "skipping invalid object",
                        extra={"path": str(path), "object": e.obj, "field": e.field, "err": e.reason},
                    )
                    continue
                except (TypeError, AttributeError, ValueError) as e:
                    report.errors.append(LoadError(str(path), str(e), kind))
                    log.error("skipping invalid object", extra={"path": str(path), "kind": kind, "err": str(e)})
                    continue
                previous = found.get(ident)
                if previous is not None:
                    log.warning(
                        "object defined twice; the later file wins",
                        extra={"object": f"{kind} {ident[2]}", "path": str(path), "overridden": previous.path},
                    )
                digest = hashlib.sha1(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).hexdigest()
                found[ident] = _FileObject(str(path), raw, digest)
        for ident in found:
            report.objects[ident[0]] = report.objects.get(ident[0], 0) + 1
        return found, report

    # ------------------------------------------------------------------ effective objects

    def _effective(self, ident: Identity, file_obj: _FileObject) -> dict[str, Any]:
        raw = copy.deepcopy(file_obj.raw)
        meta = raw["metadata"]
        spec_digest = hashlib.sha1(orjson.dumps(raw.get("spec"), option=orjson.OPT_SORT_KEYS)).hexdigest()
        prev = self._generations.get(ident)
        generation = 1 if prev is None else prev[1] + (prev[0] != spec_digest)
        self._generations[ident] = (spec_digest, generation)
        meta.setdefault("generation", generation)
        over = self._overlay.get(ident)
        if over:
            if "finalizers" in over and "finalizers" not in file_obj.raw["metadata"]:
                meta["finalizers"] = list(over["finalizers"])
            if "status" in over and "status" not in file_obj.raw:
                raw["status"] = copy.deepcopy(over["status"])
            if "nodeName" in over and not (raw.get("spec") or {}).get("nodeName"):
                raw.setdefault("spec", {})["nodeName"] = over["nodeName"]
            if "conditions" in over:
                raw.setdefault("status", {}).setdefault("conditions", []).extend(copy.deepcopy(over["conditions"]))
        meta["resourceVersion"] = self._next_rv()
        return raw

    def _emit(self, etype: ev.EventType, ident: Identity, obj: dict[str, Any]) -> None:
        if self._sink is not None:
            self._sink.apply(ev.ObjectEvent(etype, ident[0], ident[1], ident[2], obj))

    def _initial(self, sink: EventSink) -> None:
        found, report = self._load()
        self.load_report = report
        self._files = found
        self._objects = {ident: self._effective(ident, fo) for ident, fo in found.items()}
        for kind, group in TRACKED:
            sink.replace(kind, group, [o for (k, g, _), o in self._objects.items() if k == kind and g == group])
        for kind, group in TRACKED:
            sink.mark_synced(kind, group)
        log.info(
            "loaded manifest directory",
            extra={"path": str(self.directory), "files": report.files, "objects": report.objects, "errors": len(report.errors)},
        )

    def reload(self) -> None:
        """Re-read the directory and emit events for what really changed."""
        found, report = self._load()
        self.load_report = report
        old_files = self._files
        self._files = found
        for ident, fo in found.items():
            before = old_files.get(ident)
            if before is not None and before.digest == fo.digest and ident in self._objects:
                continue
            if before is not None and before.digest != fo.digest:
                # A changed pod file undoes an overlay deletion; new status/nodeName in the file win.
                over = self._overlay.get(ident)
                if over is not None:
                    over.pop("deleted", None)
            if (self._overlay.get(ident) or {}).get("deleted"):
                continue
            obj = self._effective(ident, fo)
            etype: ev.EventType = "ADDED" if ident not in self._objects else "MODIFIED"
            self._objects[ident] = obj
            self._emit(etype, ident, obj)
        for ident in [i for i in self._objects if i not in found]:
            obj = self._objects.pop(ident)
            self._overlay.pop(ident, None)
            self._emit("DELETED", ident, obj)
        for ident in [i for i in self._overlay if i not in found]:
            del self._overlay[ident]

    async def run(self, sink: EventSink) -> None:
        self._sink = sink
        self._initial(sink)
        if not self.watch:
            await asyncio.Event().wait()
        from watchfiles import awatch

        try:
            async for _changes in awatch(self.directory, debounce=self.debounce_ms, step=20, recursive=True):
                try:
                    self.reload()
                except Exception:  # noqa: BLE001 - a bad reload must not stop the watcher
                    log.exception("reloading the manifest directory failed", extra={"path": str(self.directory)})
        except asyncio.CancelledError:
            raise

    # ------------------------------------------------------------------ reads and writes (the overlay)

    def _find(self, kind: str, namespace: str, name: str, group: str | None = None) -> Identity | None:
        key = f"{namespace or 'default'}/{name}" if kind in ev.NAMESPACED_KINDS else name
        groups = [group] if group is not None else [ev.GROUP_CORE, ev.GROUP_RESOURCE, ev.GROUP_EXTENDER]
        for g in groups:
            ident = (kind, g, key)
            if ident in self._objects:
                return ident
        return None

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        ident = self._find(kind, namespace, name, group)
        return copy.deepcopy(self._objects[ident]) if ident is not None else None

    def _write(self, ident: Identity, change: Callable[[dict[str, Any]], None], what: str) -> dict[str, Any]:
        over = self._overlay.setdefault(ident, {})
        change(over)
        obj = self._effective(ident, self._files[ident])
        self._objects[ident] = obj
        log.info("recorded write in the overlay", extra={"write": what, "object": f"{ident[0]} {ident[2]}"})
        self._emit("MODIFIED", ident, obj)
        return copy.deepcopy(obj)

    def _claim_ident(self, claim: dict[str, Any]) -> Identity:
        meta = claim.get("metadata") or {}
        ident = self._find(ev.RESOURCE_CLAIM, meta.get("namespace") or "default", meta.get("name") or "")
        if ident is None:
            raise NotFound(f"ResourceClaim {meta.get('namespace')}/{meta.get('name')} not found")
        current = self._objects[ident]["metadata"]["resourceVersion"]
        want = meta.get("resourceVersion")
        if want and want != current:
            raise Conflict(
                f"ResourceClaim {ident[2]}: the object has been modified (resourceVersion {want}, now {current})"
            )
        return ident

    async def update_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        ident = self._claim_ident(claim)
        finalizers = list((claim.get("metadata") or {}).get("finalizers") or [])
        return self._write(ident, lambda o: o.__setitem__("finalizers", finalizers), "update claim metadata")

    async def update_claim_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        ident = self._claim_ident(claim)
        status = copy.deepcopy(claim.get("status") or {})
        return self._write(ident, lambda o: o.__setitem__("status", status), "update claim status")

    def _pod_ident(self, namespace: str, name: str, uid: str) -> Identity:
        ident = self._find(ev.POD, namespace, name)
        if ident is None:
            raise NotFound(f"Pod {namespace}/{name} not found")
        have = self._objects[ident]["metadata"].get("uid")
        if uid and have != uid:
            raise Conflict(f"Pod {namespace}/{name}: UID {uid} does not match {have}")
        return ident

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        ident = self._pod_ident(namespace, name, uid)
        bound = (self._objects[ident].get("spec") or {}).get("nodeName")
        if bound:
            raise Conflict(f"Pod {namespace}/{name} is already assigned to node {bound!r}")
        self._write(ident, lambda o: o.__setitem__("nodeName", node), f"bind to {node}")

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        ident = self._pod_ident(namespace, name, uid)
        self._overlay.setdefault(ident, {})["deleted"] = True
        obj = self._objects.pop(ident)
        log.info("recorded pod deletion in the overlay", extra={"object": f"Pod {namespace}/{name}"})
        self._emit("DELETED", ident, obj)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.delete_pod(namespace, name, uid)

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        ident = self._pod_ident(namespace, name, "")
        self._write(ident, lambda o: o.setdefault("conditions", []).append(dict(condition)), "pod condition")

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        self.rule_status[(group, name)] = copy.deepcopy(status)
        log.info("recorded DeviceTaintRule status", extra={"object": f"DeviceTaintRule {group}/{name}"})

    async def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(copy.deepcopy(event))
        involved = event.get("involvedObject") or {}
        log.info(
            "event",
            extra={"type": event.get("type"), "reason": event.get("reason"), "object": involved.get("name"), "msg_": event.get("message")},
        )
