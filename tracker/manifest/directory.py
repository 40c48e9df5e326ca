"""Reading and watching a manifest directory (`--source DIR`).

`ManifestDirectory` turns the files into each object's winning definition
(the last path defining an object wins) with the time defaults the API
server would give it: creationTimestamp, and a taint's timeAdded, both the
time the object was first seen and kept while it is unchanged. A file that
does not parse, or an object that is invalid, is logged and skipped alone
(see `tracker.manifest.load`). `follow_directory` reloads after every change.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tracker import events as ev
from tracker.manifest.load import MAX_FILE_BYTES, FileResult, Identity, LoadError, json_copy, manifest_files, read_file
from tracker.timestamps import rfc3339

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
class FileObject:
    """The winning definition of one object, with the time defaults filled in (or a claim created while running)."""

    source: Any  # the tracker.manifest.load.Candidate it came from (same object: file unchanged); None when created
    raw: dict[str, Any]
    digest: bytes
    spec_digest: bytes


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


def object_ref(ident: Identity) -> str:
    """How logs name an object: `Kind namespace/name`, a DeviceTaintRule with its group."""
    kind, group, key = ident
    return f"{kind}.{group} {key}" if kind == ev.DEVICE_TAINT_RULE else f"{kind} {key}"


class ManifestDirectory:
    """The directory's objects: read (only changed files are parsed again), merged, time defaults filled."""

    def __init__(self, directory: Path, clock: Callable[[], datetime]) -> None:
        self.directory = directory
        self.clock = clock
        self.load_report = LoadReport()
        self._results: dict[str, FileResult] = {}  # path -> parse result, cached by content
        self._skipped: set[str] = set()  # paths not read (not regular files), warned about once
        self._winners: dict[Identity, FileObject] = {}  # the last merge's definitions
        self._first_seen: dict[Identity, str] = {}
        self._taint_times: dict[Identity, dict[str, str]] = {}
        self._duplicates: set[tuple[Identity, str, str]] = set()
        self._ignored_logged: set[str] = set()

    # ------------------------------------------------------------------ reading (a worker thread)

    def scan(self) -> tuple[dict[str, FileResult], list[LoadError]]:
        """Read every manifest; parse only those whose bytes changed. Runs in a worker thread."""
        listing_errors: list[LoadError] = []

        def on_list_error(path: str, message: str) -> None:
            listing_errors.append(LoadError(path, message))
            log.error("cannot list manifest directory", extra={"path": path, "err": message})

        results: dict[str, FileResult] = {}
        for path in manifest_files(self.directory, on_list_error):
            result = self._read(path)
            if result is not None:
                results[str(path)] = result
        return results, listing_errors

    def _read(self, path: Path) -> FileResult | None:
        """One file's parse result (the cached one when its bytes are unchanged); None to leave it out."""
        where = str(path)
        previous = self._results.get(where)
        try:
            data = _read_regular(path)
        except _NotRegular as e:
            # A FIFO would block the reload forever (a device or socket, misbehave): skip it.
            if where not in self._skipped:
                self._skipped.add(where)
                log.warning("skipping manifest path that is not a regular file", extra={"path": where, "type": str(e)})
            return None
        except FileNotFoundError:
            return None  # deleted since the listing: the next event removes its objects
        except OSError as e:
            message = f"cannot read: {e.strerror or e}"
            digest = b"unreadable:" + message.encode()
            if previous is None or previous.digest != digest:
                log.error("cannot read manifest file", extra={"path": where, "err": message})
            return FileResult(digest, (), (LoadError(where, message),), ())
        if len(data) > MAX_FILE_BYTES:
            message = f"larger than {MAX_FILE_BYTES} bytes"
            digest = b"too-large"
            if previous is None or previous.digest != digest:
                log.error("skipping manifest file that is too large", extra={"path": where, "err": message})
            return FileResult(digest, (), (LoadError(where, message),), ())
        digest = hashlib.sha1(data).digest()
        if previous is not None and previous.digest == digest:
            return previous
        return read_file(path, data, digest)

    # ------------------------------------------------------------------ merging (the event loop)

    def merge(self, results: dict[str, FileResult], listing_errors: list[LoadError]) -> tuple[dict[Identity, FileObject], list[Identity]]:
        """Each object's winning definition (last path wins) with the time defaults; and the objects no file defines any more."""
        load_time = rfc3339(self.clock())
        winners, ignored = self._pick(results)
        self._results = results
        files: dict[Identity, FileObject] = {}
        for ident, candidate in winners.items():
            old = self._winners.get(ident)
            if old is not None and old.source is candidate:
                files[ident] = old
                continue
            raw = json_copy(candidate.raw)
            raw["metadata"].setdefault("creationTimestamp", self._first_seen.setdefault(ident, load_time))
            self._fill_taint_times(ident, raw, load_time)
            files[ident] = FileObject(candidate, raw, _digest(raw), _digest(raw.get("spec")))
        gone = [i for i in self._first_seen if i not in files]
        for ident in gone:
            # Gone from the files: a later object of that name is a new object.
            self._first_seen.pop(ident, None)
            self._taint_times.pop(ident, None)
        errors = [*listing_errors, *(e for result in results.values() for e in result.errors)]
        counts = Counter(ident[0] for ident in files)
        self.load_report = LoadReport(len(results), dict(counts), tuple(errors), dict(ignored))
        self._winners = files
        return files, gone

    def _pick(self, results: dict[str, FileResult]) -> tuple[dict[Identity, Any], Counter[str]]:
        """The last candidate of each object (a duplicate is warned about once), and the ignored objects per kind."""
        winners: dict[Identity, Any] = {}
        duplicates: set[tuple[Identity, str, str]] = set()
        ignored: Counter[str] = Counter()
        for path, result in results.items():
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
                extra={"object": object_ref(ident), "path": winner, "overridden": loser},
            )
        self._duplicates = duplicates
        return winners, ignored

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


# ---------------------------------------------------------------------- watching


async def follow_directory(
    directory: Path, debounce_ms: int, *, load: Callable[[], Awaitable[None]], reload: Callable[[], Awaitable[None]]
) -> None:
    """`load` once, then `reload` after every change, until cancelled; a failed watch restarts with backoff."""
    from watchfiles import awatch

    loaded = False
    retry = 1.0
    while True:
        stop = asyncio.Event()
        changes = awatch(
            directory,
            watch_filter=None,  # any change rescans: a ConfigMap volume swaps a hidden `..data` link
            debounce=debounce_ms,
            step=min(50, debounce_ms),
            stop_event=stop,
            rust_timeout=RESCAN_MS,
            yield_on_timeout=True,
            ignore_permission_denied=True,
        )
        pending = asyncio.ensure_future(_next(changes))
        try:
            # The generator creates its watcher when first stepped; from then on no change is missed,
            # including those made while the (re)load below runs.
            await asyncio.sleep(0)
            if not loaded:
                await load()
                loaded = True
            else:
                await reload()
            while True:
                # shield: our cancellation must not wait for the watcher thread's timeout.
                await asyncio.shield(pending)
                retry = 1.0
                await reload()
                pending = asyncio.ensure_future(_next(changes))
        except Exception as e:
            log.warning(
                "watching the manifest directory failed; retrying",
                extra={"path": str(directory), "err": f"{type(e).__name__}: {e}", "retry_s": retry},
            )
        finally:
            await _stop_watching(changes, stop, pending)
        await asyncio.sleep(retry)
        retry = min(retry * 2, _RETRY_MAX_S)


async def _next(changes: Any) -> Any:
    return await changes.__anext__()


async def _stop_watching(changes: Any, stop: asyncio.Event, pending: asyncio.Future[Any]) -> None:
    stop.set()  # the watcher thread sees this within one step and returns
    if not pending.done():
        await asyncio.wait([pending], timeout=2.0)
    if pending.done() and not pending.cancelled():
        pending.exception()  # retrieved, so asyncio does not log it as lost
    with contextlib.suppress(Exception):
        await changes.aclose()
