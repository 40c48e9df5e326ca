"""`--source DIR`: a directory of manifests as the cluster.

Objects get the defaults the API server would give them (namespace, uid,
creationTimestamp, generation, resourceVersion, taint timeAdded); a file
that does not parse, or an object that is invalid, is logged and skipped
alone (see `manifest_load`). The directory is watched and real differences
are emitted as events.

Writes (claim metadata and status, bindings, pod deletion and conditions,
rule status) live in an in-memory overlay on top of the files, so the
binder and the eviction controller work unchanged in this mode. A changed
file replaces its objects, but the overlay's claim allocations and
reservations and a pod's binding survive unless the new file sets them
itself; a deleted pod stays deleted until its manifest changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import hashlib
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from allocator.types import DELETE_PROTECTION_FINALIZER
from tracker import events as ev
from tracker.events import EventSink
from tracker.manifest_load import (
    MAX_FILE_BYTES,
    SUFFIXES,
    TRACKED,
    FileResult,
    Identity,
    LoadError,
    json_copy,
    manifest_files,
    read_file,
)
from tracker.resources import api_version as registry_api_version
from tracker.source import Conflict, Invalid, NotFound, Source, merge_patch
from tracker.timestamps import rfc3339

__all__ = ["SUFFIXES", "TRACKED", "LoadError", "LoadReport", "ManifestSource", "now_utc"]

log = logging.getLogger("dra_extender.source")

RESCAN_MS = 10_000  # an idle watcher re-checks the directory this often (lost events, odd mounts)
_RETRY_MAX_S = 30.0


def now_utc() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What the last (re)load found, for the CLI's summary and for tests."""

    files: int = 0
    objects: Mapping[str, int] = field(default_factory=dict)  # kind -> objects loaded
    errors: tuple[LoadError, ...] = ()
    ignored: Mapping[str, int] = field(default_factory=dict)  # kind -> objects ignored


@dataclass(slots=True)
class _FileObject:
    """The winning definition of one object, with the time defaults filled in."""

    source: Any  # the manifest_load.Candidate it came from (same object: file unchanged)
    raw: dict[str, Any]
    digest: bytes
    spec_digest: bytes


@dataclass(slots=True)
class _Overlay:
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


SLOW_RELOAD_SECONDS = 3.0  # a reload slower than this is logged (changes wait behind it)


class _NotRegular(OSError):
    """A manifest path that is a FIFO, device or socket: str() is its type."""


_FILE_TYPES = {stat.S_IFIFO: "FIFO", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}


def _read_regular(path: Path) -> bytes:
    """A regular file's first MAX_FILE_BYTES + 1 bytes; _NotRegular for anything else.

    Opened non-blocking and checked with fstat on the open descriptor: a FIFO
    swapped in after the listing still never blocks the read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _NotRegular(_FILE_TYPES.get(stat.S_IFMT(mode), "not a regular file"))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)


def _digest(value: Any) -> bytes:
    return hashlib.sha1(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).digest()


def _ref(ident: Identity) -> str:
    kind, group, key = ident
    return f"{kind}.{group} {key}" if kind == ev.DEVICE_TAINT_RULE else f"{kind} {key}"


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}


class ManifestSource:
    """The `Source` for `--source DIR` (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], datetime] = now_utc,
        watch: bool = True,
        debounce_ms: int = 50,
    ) -> None:
        self.directory = Path(directory)
        self.description = f"manifest directory {self.directory}"
        self.clock = clock
        self.watch = watch
        self.debounce_ms = max(1, int(debounce_ms))
        self.load_report = LoadReport()
        self.events: list[dict[str, Any]] = []  # Events "created" (recorded and logged)
        self._sink: EventSink | None = None
        self._results: dict[str, FileResult] = {}  # path -> parse result, cached by content
        self._skipped: set[str] = set()  # paths not read (not regular files), warned about once
        self._files: dict[Identity, _FileObject] = {}  # winners from the files
        self._objects: dict[Identity, dict[str, Any]] = {}  # what the "cluster" has: files + overlay
        self._overlay: dict[Identity, _Overlay] = {}
        self._created: dict[Identity, _FileObject] = {}  # claims created by /bind: kept like file objects
        self._first_seen: dict[Identity, str] = {}
        self._taint_times: dict[Identity, dict[str, str]] = {}
        self._generations: dict[Identity, tuple[bytes, int]] = {}
        self._duplicates: set[tuple[Identity, str, str]] = set()
        self._ignored_logged: set[str] = set()
        self._rv = 0

    # ------------------------------------------------------------------ reading the directory

    def _scan(self) -> tuple[dict[str, FileResult], list[LoadError]]:
        """Read every manifest; parse only those whose bytes changed. Runs in a worker thread."""
        listing_errors: list[LoadError] = []

        def on_list_error(path: str, message: str) -> None:
            listing_errors.append(LoadError(path, message))
            log.error("cannot list manifest directory", extra={"path": path, "err": message})

        results: dict[str, FileResult] = {}
        for path in manifest_files(self.directory, on_list_error):
            where = str(path)
            previous = self._results.get(where)
            try:
                data = _read_regular(path)
            except _NotRegular as e:
                # A FIFO would block the reload forever (a device or socket, misbehave): skip it.
                if where not in self._skipped:
                    self._skipped.add(where)
                    log.warning("skipping manifest path that is not a regular file", extra={"path": where, "type": str(e)})
                continue
            except FileNotFoundError:
                continue  # deleted since the listing: the next event removes its objects
            except OSError as e:
                message = f"cannot read: {e.strerror or e}"
                digest = b"unreadable:" + message.encode()
                if previous is None or previous.digest != digest:
                    log.error("cannot read manifest file", extra={"path": where, "err": message})
                results[where] = FileResult(digest, (), (LoadError(where, message),), ())
                continue
            if len(data) > MAX_FILE_BYTES:
                message = f"larger than {MAX_FILE_BYTES} bytes"
                digest = b"too-large"
                if previous is None or previous.digest != digest:
                    log.error("skipping manifest file that is too large", extra={"path": where, "err": message})
                results[where] = FileResult(digest, (), (LoadError(where, message),), ())
                continue
            digest = hashlib.sha1(data).digest()
            if previous is not None and previous.digest == digest:
                results[where] = previous
            else:
                results[where] = read_file(path, data, digest)
        return results, listing_errors

    def _merge(self, results: dict[str, FileResult], listing_errors: list[LoadError]) -> dict[Identity, _FileObject]:
        """Pick each object's winning definition (last path wins) and fill the time defaults."""
        load_time = rfc3339(self.clock())
        winners: dict[Identity, Any] = {}
        duplicates: set[tuple[Identity, str, str]] = set()
        ignored: Counter[str] = Counter()
        errors: list[LoadError] = list(listing_errors)
        for path, result in results.items():
            errors.extend(result.errors)
            for api_version, kind in result.ignored:
                ignored[kind] += 1
                if kind not in self._ignored_logged:
                    self._ignored_logged.add(kind)
                    log.info(
                        "ignoring objects of a kind the extender does not use",
                        extra={"kind": kind, "apiVersion": api_version, "path": path},
                    )
            for candidate in result.candidates:
                previous = winners.get(candidate.ident)
                if previous is not None:
                    duplicates.add((candidate.ident, previous.path, candidate.path))
                winners[candidate.ident] = candidate
        for ident, loser, winner in sorted(duplicates - self._duplicates):
            log.warning(
                "object defined twice; the later path wins",
                extra={"object": _ref(ident), "path": winner, "overridden": loser},
            )
        self._duplicates = duplicates
        self._results = results

        files: dict[Identity, _FileObject] = {}
        for ident, candidate in winners.items():
            old = self._files.get(ident)
            if old is not None and old.source is candidate:
                files[ident] = old
                continue
            raw = json_copy(candidate.raw)
            raw["metadata"].setdefault("creationTimestamp", self._first_seen.setdefault(ident, load_time))
            self._fill_taint_times(ident, raw, load_time)
            files[ident] = _FileObject(candidate, raw, _digest(raw), _digest(raw.get("spec")))
        for ident in [i for i in self._first_seen if i not in files]:
            # Gone from the files: a later object of that name is a new object.
            self._first_seen.pop(ident, None)
            self._taint_times.pop(ident, None)
            self._generations.pop(ident, None)
        counts = Counter(ident[0] for ident in files)
        self.load_report = LoadReport(len(results), dict(counts), tuple(errors), dict(ignored))
        return files

    def _fill_taint_times(self, ident: Identity, raw: dict[str, Any], load_time: str) -> None:
        """A taint without timeAdded gets the time it was first seen, and keeps it while it is unchanged."""
        kind = ident[0]
        if kind not in (ev.RESOURCE_SLICE, ev.DEVICE_TAINT_RULE):
            return
        old = self._taint_times.get(ident, {})
        new: dict[str, str] = {}

        def fill(taint: Any, where: str) -> None:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                sig = f"{where}|{taint.get('key')}|{taint.get('value')}|{taint.get('effect')}"
                new[sig] = taint["timeAdded"] = new.get(sig) or old.get(sig) or load_time

        spec = raw.get("spec")
        if not isinstance(spec, dict):
            return
        if kind == ev.DEVICE_TAINT_RULE:
            fill(spec.get("taint"), "")
        elif isinstance(spec.get("devices"), list):
            for device in spec["devices"]:
                if isinstance(device, dict):
                    body = device["basic"] if isinstance(device.get("basic"), dict) else device
                    for taint in body.get("taints") or ():
                        fill(taint, str(device.get("name")))
        if new:
            self._taint_times[ident] = new
        else:
            self._taint_times.pop(ident, None)

    # ------------------------------------------------------------------ effective objects

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _generation(self, ident: Identity, fo: _FileObject) -> int:
        previous = self._generations.get(ident)
        generation = 1 if previous is None else previous[1] + (previous[0] != fo.spec_digest)
        self._generations[ident] = (fo.spec_digest, generation)
        return generation

    def _compose(self, ident: Identity) -> dict[str, Any]:
        """File definition + overlay, without a resourceVersion. Never mutates the file definition."""
        fo = self._files[ident]
        raw = {**fo.raw, "metadata": {**fo.raw["metadata"], "generation": self._generation(ident, fo)}}
        raw["metadata"].pop("resourceVersion", None)
        over = self._overlay.get(ident)
        if over is None:
            return raw
        meta = raw["metadata"]
        for name in ("finalizers", "labels", "annotations"):
            value = getattr(over, name)
            if value:
                meta[name] = copy.deepcopy(value)
            elif value is not None:
                meta.pop(name, None)  # written empty: omitted, as the API server returns it
        if over.status is not None:
            if ident[0] == ev.DEVICE_TAINT_RULE:
                raw["status"] = {**(raw.get("status") or {}), **copy.deepcopy(over.status)}
            else:
                raw["status"] = copy.deepcopy(over.status)
        if over.node_name is not None:
            raw["spec"] = {**(raw.get("spec") or {}), "nodeName": over.node_name}
        if over.time_added is not None and isinstance((raw.get("spec") or {}).get("taint"), dict):
            raw["spec"] = {**raw["spec"], "taint": {**raw["spec"]["taint"], "timeAdded": over.time_added}}
        if over.pod_status is not None:
            raw["status"] = merge_patch(raw.get("status") or {}, over.pod_status)
        if over.conditions:
            status = dict(raw.get("status") or {})
            conditions = [c for c in status.get("conditions") or () if not (isinstance(c, dict) and c.get("type") in over.conditions)]
            status["conditions"] = conditions + [copy.deepcopy(c) for c in over.conditions.values()]
            raw["status"] = status
        return raw

    def _emit(self, etype: ev.EventType, ident: Identity, obj: dict[str, Any]) -> None:
        if self._sink is not None:
            self._sink.apply(ev.ObjectEvent(etype, ident[0], ident[1], ident[2], obj))

    def _rebase(self, ident: Identity, new_raw: dict[str, Any]) -> None:
        """The object's manifest changed: what the new file sets replaces the overlay's writes."""
        over = self._overlay.get(ident)
        if over is None:
            return
        if over.deleted:  # a pod whose manifest changed after its deletion is a new pod
            del self._overlay[ident]
            return
        meta = new_raw.get("metadata") or {}
        if "finalizers" in meta:
            over.finalizers = None
        over.labels = over.annotations = None
        over.time_added = None  # the file's (or its load time's) timeAdded wins
        if "status" in new_raw:
            over.status = None
        if (new_raw.get("spec") or {}).get("nodeName"):
            over.node_name = None
        if (new_raw.get("status") or {}).get("conditions"):
            over.conditions = {}
        if over.empty():
            del self._overlay[ident]

    def _apply_files(self, files: dict[Identity, _FileObject], *, emit: bool) -> None:
        """Make `files` the current definitions; emit events for what really changed."""
        files = {**{i: fo for i, fo in self._created.items() if i not in files}, **files}
        old_files, self._files = self._files, files
        for ident, fo in files.items():
            before = old_files.get(ident)
            changed = before is None or before.digest != fo.digest
            if changed and before is not None:
                self._rebase(ident, fo.raw)
            over = self._overlay.get(ident)
            if over is not None and over.deleted:
                continue
            current = self._objects.get(ident)
            if not changed and current is not None:
                continue
            obj = self._compose(ident)
            if current is not None and _without_rv(current) == obj:
                continue
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._objects[ident] = obj
            if emit:
                self._emit("ADDED" if current is None else "MODIFIED", ident, obj)
        gone_pods: list[tuple[Identity, str]] = []
        for ident in [i for i in self._objects if i not in files]:
            obj = self._objects.pop(ident)
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": self._next_rv()}}
            if ident[0] == ev.POD and obj["metadata"].get("uid"):
                gone_pods.append((ident, obj["metadata"]["uid"]))
            if emit:
                self._emit("DELETED", ident, obj)
        for ident in [i for i in self._overlay if i not in files]:
            del self._overlay[ident]
        for ident, uid in gone_pods:
            self._release_reservations(ident, uid, emit=emit)

    def _release_reservations(self, pod: Identity, uid: str, *, emit: bool) -> None:
        """A deleted pod no longer holds its claims: drop its reservations, and the allocation of a
        claim nobody reserves any more (what the resourceclaim controller does in a cluster)."""
        for ident, current in list(self._objects.items()):
            if ident[0] != ev.RESOURCE_CLAIM:
                continue
            status = current.get("status") or {}
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if not (isinstance(r, dict) and r.get("uid") == uid)]
            if len(kept) == len(reserved):
                continue
            over = self._overlay_of(ident)
            over.status = {**copy.deepcopy(status), "reservedFor": kept}
            if not kept:
                over.status.pop("reservedFor")
                over.status.pop("allocation", None)
                finalizers = current["metadata"].get("finalizers") or []
                over.finalizers = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            if emit:
                self._write(ident, "release reservation of deleted pod", pod=_ref(pod), deallocated=not kept)
            else:
                obj = self._compose(ident)
                obj["metadata"]["resourceVersion"] = self._next_rv()
                self._objects[ident] = obj

    # ------------------------------------------------------------------ loading and following

    def reload(self) -> None:
        """Re-read the directory now and emit events for what changed (synchronous; tests, tools)."""
        files = self._merge(*self._scan())
        self._apply_files(files, emit=True)

    async def _reload(self) -> None:
        started = time.monotonic()
        scanned = await asyncio.to_thread(self._scan)
        files = self._merge(*scanned)
        self._apply_files(files, emit=True)
        took = time.monotonic() - started
        if took > SLOW_RELOAD_SECONDS:
            log.warning(
                "reloading the manifest directory was slow",
                extra={"path": str(self.directory), "seconds": round(took, 2), "files": len(scanned[0])},
            )

    async def _initial(self, sink: EventSink) -> None:
        scanned = await asyncio.to_thread(self._scan)
        files = self._merge(*scanned)
        self._apply_files(files, emit=False)
        for kind, group in TRACKED:
            sink.replace(kind, group, [o for (k, g, _), o in self._objects.items() if k == kind and g == group])
        for kind, group in TRACKED:
            sink.mark_synced(kind, group)
        # The loaded state is long-lived: a full collection scanning it (~0.4 s at 10,000
        # devices) holds the GIL, and with it the probe thread. As the cluster source does.
        gc.freeze()
        report = self.load_report
        log.info(
            "loaded manifest directory",
            extra={"path": str(self.directory), "files": report.files, "objects": dict(report.objects), "errors": len(report.errors)},
        )

    async def run(self, sink: EventSink) -> None:
        """Load everything, mark every kind synced, then follow the directory until cancelled."""
        self._sink = sink
        if not self.watch:
            await self._initial(sink)
            await asyncio.Event().wait()
            return
        from watchfiles import awatch

        loaded = False
        retry = 1.0
        while True:
            stop = asyncio.Event()
            changes = awatch(
                self.directory,
                watch_filter=None,  # any change rescans: a ConfigMap volume swaps a hidden `..data` link
                debounce=self.debounce_ms,
                step=min(50, self.debounce_ms),
                stop_event=stop,
                rust_timeout=RESCAN_MS,
                yield_on_timeout=True,
                ignore_permission_denied=True,
            )

            async def step(changes: Any = changes) -> Any:
                return await changes.__anext__()

            pending = asyncio.ensure_future(step())
            try:
                # The generator creates its watcher when first stepped; from then on no change is missed,
                # including those made while the (re)load below runs.
                await asyncio.sleep(0)
                if not loaded:
                    await self._initial(sink)
                    loaded = True
                else:
                    await self._reload()
                while True:
                    # shield: our cancellation must not wait for the watcher thread's timeout.
                    await asyncio.shield(pending)
                    retry = 1.0
                    await self._reload()
                    pending = asyncio.ensure_future(step())
            except Exception as e:
                log.warning(
                    "watching the manifest directory failed; retrying",
                    extra={"path": str(self.directory), "err": f"{type(e).__name__}: {e}", "retry_s": retry},
                )
            finally:
                stop.set()  # the watcher thread sees this within one step and returns
                if not pending.done():
                    await asyncio.wait([pending], timeout=2.0)
                if pending.done() and not pending.cancelled():
                    pending.exception()  # retrieved, so asyncio does not log it as lost
                with contextlib.suppress(Exception):
                    await changes.aclose()
            await asyncio.sleep(retry)
            retry = min(retry * 2, _RETRY_MAX_S)

    # ------------------------------------------------------------------ reads

    def _find(self, kind: str, namespace: str, name: str, group: str | None = None) -> Identity | None:
        key = f"{namespace or 'default'}/{name}" if kind in ev.NAMESPACED_KINDS else name
        groups = [group] if group is not None else [ev.GROUP_CORE, ev.GROUP_RESOURCE, ev.GROUP_EXTENDER]
        for g in groups:
            ident = (kind, g, key)
            if ident in self._objects:
                return ident
        return None

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        """The freshest copy (files + overlay); a DeviceTaintRule is looked up in resource.k8s.io first."""
        ident = self._find(kind, namespace, name, group)
        return copy.deepcopy(self._objects[ident]) if ident is not None else None

    @property
    def rule_status(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(group, name) -> status written with update_rule_status (for tests and tools)."""
        return {
            (g, key): copy.deepcopy(over.status)
            for (kind, g, key), over in self._overlay.items()
            if kind == ev.DEVICE_TAINT_RULE and over.status is not None
        }

    # ------------------------------------------------------------------ writes (the overlay)

    def _write(self, ident: Identity, what: str, **details: Any) -> dict[str, Any]:
        obj = self._compose(ident)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[ident] = obj
        log.debug(  # one per claim write and Binding: at INFO it would cost more than the write
            "recorded write in the overlay",
            extra={"write": what, "object": _ref(ident), "resourceVersion": obj["metadata"]["resourceVersion"], **details},
        )
        self._emit("MODIFIED", ident, obj)
        return copy.deepcopy(obj)

    def _overlay_of(self, ident: Identity) -> _Overlay:
        return self._overlay.setdefault(ident, _Overlay())

    def _claim_for_write(self, claim: dict[str, Any]) -> Identity:
        meta = claim.get("metadata") if isinstance(claim, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise Invalid("ResourceClaim: metadata.name is required")
        namespace = meta.get("namespace") or "default"
        ident = self._find(ev.RESOURCE_CLAIM, namespace, meta["name"])
        if ident is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{meta["name"]}" not found in namespace {namespace}')
        current = self._objects[ident]["metadata"]
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
        if "spec" in claim and claim["spec"] != self._objects[ident].get("spec"):
            raise Invalid(f"ResourceClaim {ident[2]}: spec: field is immutable")
        meta = claim["metadata"]
        over = self._overlay_of(ident)
        over.finalizers = [str(f) for f in meta.get("finalizers") or ()]
        over.labels = dict(meta.get("labels") or {})
        over.annotations = dict(meta.get("annotations") or {})
        return self._write(ident, "update claim", finalizers=over.finalizers)

    async def update_claim_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Only `.status` is taken (allocation, reservedFor), as the /status subresource does."""
        ident = self._claim_for_write(claim)
        status = claim.get("status")
        if status is not None and not isinstance(status, dict):
            raise Invalid(f"ResourceClaim {ident[2]}: status must be an object")
        self._overlay_of(ident).status = copy.deepcopy(status or {})
        allocation = (status or {}).get("allocation") or {}
        devices = [
            f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
            for r in (allocation.get("devices") or {}).get("results") or ()
            if isinstance(r, dict)
        ]
        reserved = [r.get("name") for r in (status or {}).get("reservedFor") or () if isinstance(r, dict)]
        return self._write(ident, "update claim status", devices=devices, reservedFor=reserved)

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the claim or its /status, as the API server applies it."""
        current = await self.get(ev.RESOURCE_CLAIM, namespace, name)
        if current is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found in namespace {namespace or "default"}')
        want_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        merged = merge_patch(current, patch)
        if not want_rv:
            merged["metadata"].pop("resourceVersion", None)  # no precondition asked for
        return await (self.update_claim_status(merged) if status else self.update_claim(merged))

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        """A claim made at /bind, named from generateName, kept in memory until the pod is gone."""
        meta = dict(claim.get("metadata") or {})
        namespace = namespace or "default"
        name = meta.get("name") or f"{meta.get('generateName') or ''}{hashlib.sha256(str(self._rv + 1).encode()).hexdigest()[:5]}"
        ident = (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, f"{namespace}/{name}")
        if ident in self._objects:
            raise Conflict(f'resourceclaims.resource.k8s.io "{name}" already exists')
        meta.update(name=name, namespace=namespace, uid=f"created-{namespace}-{name}", creationTimestamp=rfc3339(now_utc()))
        meta.pop("generateName", None)
        raw = {**claim, "metadata": meta}
        raw.pop("status", None)
        digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).digest()
        fo = _FileObject(None, raw, digest, digest)
        self._created[ident] = fo
        self._files[ident] = fo
        obj = self._compose(ident)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[ident] = obj
        log.info("recorded claim creation in the overlay", extra={"object": _ref(ident)})
        self._emit("ADDED", ident, obj)
        return copy.deepcopy(obj)

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        ident = self._find(ev.RESOURCE_CLAIM, namespace, name)
        if ident is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found')
        if uid and self._objects[ident]["metadata"].get("uid") != uid:
            raise Conflict(f"ResourceClaim {ident[2]}: precondition failed: UID {uid}")
        if ident not in self._created:
            raise Invalid(f"ResourceClaim {ident[2]}: only claims created while running can be deleted in --source mode")
        del self._created[ident]
        self._files.pop(ident, None)
        self._overlay.pop(ident, None)
        last = self._objects.pop(ident)
        last = {**last, "metadata": {**last["metadata"], "resourceVersion": self._next_rv()}}
        self._emit("DELETED", ident, last)

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        ident = self._pod_for_write(namespace, name, "")
        over = self._overlay_of(ident)
        over.pod_status = merge_patch(over.pod_status or {}, patch.get("status") or {})
        return self._write(ident, "pod status", status=sorted((patch.get("status") or {}).keys()))

    def _pod_for_write(self, namespace: str, name: str, uid: str) -> Identity:
        ident = self._find(ev.POD, namespace, name)
        if ident is None:
            raise NotFound(f'pods "{name}" not found in namespace {namespace or "default"}')
        have = self._objects[ident]["metadata"].get("uid")
        if uid and have != uid:
            raise Conflict(f"Pod {ident[2]}: precondition failed: UID in precondition: {uid}, UID in object meta: {have}")
        return ident

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        ident = self._pod_for_write(namespace, name, uid)
        bound = (self._objects[ident].get("spec") or {}).get("nodeName")
        if bound:
            raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{bound}"')
        if not node:
            raise Invalid(f"Pod {ident[2]}: binding target node is required")
        self._overlay_of(ident).node_name = node
        self._write(ident, "bind", node=node)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """The pod stays deleted, though its file is unchanged, until its manifest changes."""
        ident = self._pod_for_write(namespace, name, uid)
        self._overlay_of(ident).deleted = True
        last = {**self._objects.pop(ident)}
        last["metadata"] = {**last["metadata"], "resourceVersion": self._next_rv()}
        log.info("recorded pod deletion in the overlay", extra={"object": _ref(ident), "uid": uid})
        self._emit("DELETED", ident, last)
        pod_uid = last["metadata"].get("uid")
        if pod_uid:
            self._release_reservations(ident, pod_uid, emit=True)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Without PodDisruptionBudgets to consult, an eviction here is a deletion."""
        await self.delete_pod(namespace, name, uid)

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Set one pod condition (by type), like a strategic-merge patch of status.conditions."""
        ident = self._pod_for_write(namespace, name, "")
        if not isinstance(condition, dict) or not isinstance(condition.get("type"), str) or not condition["type"]:
            raise Invalid(f"Pod {ident[2]}: status.conditions[].type is required")
        self._overlay_of(ident).conditions[condition["type"]] = copy.deepcopy(condition)
        self._write(ident, "pod condition", condition=condition["type"], status=condition.get("status"))

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into a DeviceTaintRule's status (a merge patch of /status)."""
        ident = self._find(ev.DEVICE_TAINT_RULE, "", name, group)
        if ident is None:
            raise NotFound(f'devicetaintrules.{group} "{name}" not found')
        if not isinstance(status, dict):
            raise Invalid(f"DeviceTaintRule {name}: status must be an object")
        over = self._overlay_of(ident)
        over.status = {**(over.status or {}), **copy.deepcopy(status)}
        self._write(ident, "rule status")

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a rule's `spec.taint.timeAdded` in the overlay (until its file changes)."""
        ident = self._find(ev.DEVICE_TAINT_RULE, "", name, group)
        if ident is None:
            raise NotFound(f'devicetaintrules.{group} "{name}" not found')
        self._overlay_of(ident).time_added = time_added
        self._write(ident, "rule timeAdded", timeAdded=time_added)

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Set a PVC's or PV's volume-taints annotation in the overlay (until its file changes)."""
        from tracker.volumes import TAINTS_ANNOTATION

        ident = self._find(kind, namespace, name)
        if ident is None:
            raise NotFound(f'{kind} "{name}" not found')
        current = (self._objects[ident].get("metadata") or {}).get("annotations") or {}
        self._overlay_of(ident).annotations = {**current, TAINTS_ANNOTATION: text}
        self._write(ident, "volume taints", annotation=TAINTS_ANNOTATION)

    def api_version(self, kind: str, group: str) -> str:
        """The registry's apiVersion (upstream DeviceTaintRule: the default version; a directory serves no versions)."""
        return registry_api_version(kind, group)

    async def create_event(self, event: dict[str, Any]) -> None:
        """Kept in `events` and logged: a directory has nowhere to post an Event."""
        self.events.append(copy.deepcopy(event))
        involved = event.get("involvedObject") or {}
        log.info(
            "event",
            extra={
                "type": event.get("type"),
                "reason": event.get("reason"),
                "object": f"{involved.get('kind')} {involved.get('namespace') or ''}/{involved.get('name')}".replace(" /", " "),
                "note": event.get("message"),
            },
        )


if TYPE_CHECKING:

    def _implements_source(source: ManifestSource) -> Source:
        return source  # mypy checks ManifestSource against the Source protocol here
