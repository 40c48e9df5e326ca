"""`--source DIR`: a directory of manifests as the cluster.

Objects get the defaults the API server would give them (namespace, uid,
creationTimestamp, generation, resourceVersion, taint timeAdded); a file
that does not parse, or an object that is invalid, is logged and skipped
alone (see `tracker.manifest.load`). The directory is watched and real differences
are emitted as events.

Four parts, composed here: the directory (`tracker.manifest.directory`: reading, merging,
time defaults, watching), the overlay store standing in for the API server's
storage (`tracker.manifest.overlay`: the files' objects with the writes made while
running on top), the writes with the API server's checks
(`tracker.manifest.writes`), and the stand-in resourceclaim controller
(`tracker.manifest.claims`: a deleted pod's claims released). Events have nowhere
to go: they are kept in `events` and logged.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.events import EventSink
from tracker.manifest.claims import ClaimController
from tracker.manifest.directory import LoadReport, ManifestDirectory, follow_directory, now_utc
from tracker.manifest.load import SUFFIXES, TRACKED, FileResult, LoadError
from tracker.manifest.overlay import OverlayStore
from tracker.manifest.writes import OverlayWrites
from tracker.resources import api_version as registry_api_version
from tracker.source import Source

__all__ = ["SUFFIXES", "TRACKED", "LoadError", "LoadReport", "ManifestSource", "now_utc"]

log = logging.getLogger("dra_extender.source")

SLOW_RELOAD_SECONDS = 3.0  # a reload slower than this is logged (changes wait behind it)


class ManifestSource(OverlayWrites):
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
        self.watch = watch
        self.debounce_ms = max(1, int(debounce_ms))
        self.events: list[dict[str, Any]] = []  # Events "created" (recorded and logged)
        self.manifests = ManifestDirectory(self.directory, clock)
        store = OverlayStore()
        super().__init__(store, ClaimController(store))

    @property
    def load_report(self) -> LoadReport:
        """What the last (re)load found."""
        return self.manifests.load_report

    # ------------------------------------------------------------------ loading and following

    def _apply(self, scanned: tuple[dict[str, FileResult], list[LoadError]], *, emit: bool) -> None:
        """Make the scanned files the current definitions; a pod gone with its file releases its claims."""
        files, gone = self.manifests.merge(*scanned)
        for pod, uid in self.store.apply_files(files, gone, emit=emit):
            self.claims.release(pod, uid, emit=emit)

    def reload(self) -> None:
        """Re-read the directory now and emit events for what changed (synchronous; tests, tools)."""
        self._apply(self.manifests.scan(), emit=True)

    async def _reload(self) -> None:
        started = time.monotonic()
        scanned = await asyncio.to_thread(self.manifests.scan)
        self._apply(scanned, emit=True)
        took = time.monotonic() - started
        if took > SLOW_RELOAD_SECONDS:
            log.warning(
                "reloading the manifest directory was slow",
                extra={"path": str(self.directory), "seconds": round(took, 2), "files": len(scanned[0])},
            )

    async def _initial(self, sink: EventSink) -> None:
        self._apply(await asyncio.to_thread(self.manifests.scan), emit=False)
        objects = self.store.objects
        for kind, group in TRACKED:
            sink.replace(kind, group, [o for (k, g, _), o in objects.items() if k == kind and g == group])
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
        self.store.sink = sink
        if not self.watch:
            await self._initial(sink)
            await asyncio.Event().wait()
            return
        await follow_directory(self.directory, self.debounce_ms, load=lambda: self._initial(sink), reload=self._reload)

    # ------------------------------------------------------------------ reads

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        """The freshest copy (files + overlay); a DeviceTaintRule is looked up in resource.k8s.io first."""
        return self.store.get(kind, namespace, name, group)

    def api_version(self, kind: str, group: str) -> str:
        """The registry's apiVersion (upstream DeviceTaintRule: the default version; a directory serves no versions)."""
        return registry_api_version(kind, group)

    # ------------------------------------------------------------------ writes: OverlayWrites (tracker.manifest.writes)

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
