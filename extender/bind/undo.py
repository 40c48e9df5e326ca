"""Taking back what a failed bind wrote, before its in-flight devices are released.

A write that timed out may still have landed, so every claim the bind
touched or held devices for is read back from the API server and only this
bind's part (its reservation, the allocation it wrote, the finalizer it
added, the extended-resource claim it created) is undone, and only while
this process leads: leadership is asked again before each write, and an
ex-leader stops there (its successor owns the claims now; the scheduler's
retry of the pod meets what was left).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from allocator.types import Pod
from extender.bind.background import BackgroundTasks
from extender.bind.claim_writes import BIND_ATTEMPTS, ClaimWrites, Written
from tracker import events as ev
from tracker.claim_status import parse_claim_status
from tracker.leadership_gate import MayWrite
from tracker.ledger import Reservation
from tracker.source import BindingSource, Conflict, SourceError

log = logging.getLogger("dra_extender.bind")


class _NotLeading(Exception):
    """Leadership ended during an undo: no further write."""


class BindUndo:
    def __init__(
        self,
        source: BindingSource,
        writer: ClaimWrites,
        background: BackgroundTasks,
        release: Callable[[Reservation], None],
        leadership: MayWrite,
    ) -> None:
        self.source = source
        self.leadership = leadership
        self.writer = writer
        self.background = background
        self.release = release  # frees the in-flight devices, once the undo is done

    def in_background(self, pod: Pod, uid: str, node: str, written: list[Written], hold: Reservation) -> asyncio.Future[Any]:
        return self.background.spawn(self.run(pod, uid, node, written, hold))

    async def within(
        self, deadline: float, pod: Pod, uid: str, node: str, written: list[Written], hold: Reservation
    ) -> asyncio.Future[Any]:
        """Undo before answering while the budget lasts; past it, finish in the background. Returns the undo's task.

        The scheduler's httpTimeout does not wait for clean-up, and the
        in-flight devices stay held until the undo is done either way (so
        does the pod's ownership of its claims, extender/bind/pod_owners.py).
        """
        task = self.in_background(pod, uid, node, written, hold)
        left = deadline - time.monotonic()
        if left > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(left):
                    await asyncio.shield(task)
        return task

    async def run(self, pod: Pod, uid: str, node: str, written: list[Written], hold: Reservation) -> None:
        """Take back this bind's reservations, allocations and finalizers; then free its devices.

        Nothing is undone for a pod the API server shows bound to this node: its claims are in use.
        """
        try:
            keys = {w.key: w for w in written}
            for claim_key in set(hold.devices.values()):
                keys.setdefault(claim_key, Written(claim_key))
            if keys and await self._bound_here(pod, node):
                return
            for record in keys.values():
                await self._undo_claim(record, uid)
                if record.created_uid:
                    await self._delete_created(record)
        except _NotLeading as e:
            log.warning(
                "stopped undoing a failed bind: this process no longer leads; the rest is left to the new leader",
                extra={"pod": pod.key, "claim": str(e)},
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("undoing a failed bind", extra={"pod": pod.key})
        finally:
            self.release(hold)

    def _leading(self, key: str) -> None:
        """Raise _NotLeading unless this process leads: asked right before each write, so an ex-leader never writes."""
        if not self.leadership.may_write():
            raise _NotLeading(key)

    async def _bound_here(self, pod: Pod, node: str) -> bool:
        try:
            raw = await self.source.get(ev.POD, pod.meta.namespace, pod.meta.name)
        except SourceError:
            return False
        if not raw:
            return False
        spec = raw.get("spec") or {}
        meta = raw.get("metadata") or {}
        return bool(spec.get("nodeName") == node and meta.get("uid") == pod.meta.uid)

    async def _undo_claim(self, record: Written, uid: str) -> None:
        ns, _, name = record.key.partition("/")
        for _ in range(BIND_ATTEMPTS):
            try:
                raw = await self.source.get(ev.RESOURCE_CLAIM, ns, name)
            except SourceError as e:
                log.error("could not read claim to undo a failed bind", extra={"claim": record.key, "err": e.message})
                return
            if raw is None:
                return
            held = parse_claim_status(raw)
            reserved = [r for r in held.reserved_for if r.get("uid") != uid]
            ours = bool(record.allocated) and held.allocated_devices == record.allocated
            deallocate = ours and not reserved
            try:
                if len(reserved) != len(held.reserved_for) or deallocate:
                    patch: dict[str, Any] = {
                        "metadata": {"resourceVersion": held.resource_version},
                        "status": {"reservedFor": reserved or None},
                    }
                    if deallocate:
                        patch["status"]["allocation"] = None
                    self._leading(record.key)
                    raw = await self.source.patch_claim(ns, name, patch, status=True)
                    self.writer.apply(raw)
                after = parse_claim_status(raw)
                if (deallocate or (record.finalizer_added and not held.allocated)) and not after.allocated:
                    self._leading(record.key)
                    await self.writer.drop_finalizer(after)
                return
            except Conflict:
                continue
            except SourceError as e:
                log.error("could not undo claim writes of a failed bind", extra={"claim": record.key, "err": e.message})
                return

    async def _delete_created(self, record: Written) -> None:
        """An extended-resource claim this failed bind created goes away (upstream's Unreserve)."""
        ns, _, name = record.key.partition("/")
        self._leading(record.key)
        try:
            await self.source.delete_claim(ns, name, record.created_uid)
        except SourceError as e:
            if e.status != 404:
                log.error("could not delete the extended-resource claim of a failed bind", extra={"claim": record.key, "err": e.message})
