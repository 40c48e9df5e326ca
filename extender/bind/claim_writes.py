"""A bind's writes to claims: delete protection, allocation and reservation, guarded by the claim's resourceVersion.

Every write's response goes back into the cluster state at once (unless the
watch already brought something newer), so the next decision sees it. What
a write needs of the claim comes from the state's typed views
(`ClusterState.claim_status`), and the API server's responses are parsed
the same way (tracker/claim_status.py) where they arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from allocator.counter_record import COUNTERS_ANNOTATION, format_counter_record
from allocator.extended_resources import RequestMapping, claim_manifest
from allocator.failures import REASON_NOT_BOUND, Failure, plain
from allocator.parse import parse_resource_claim
from allocator.pod_claims import claim_names
from allocator.types import DELETE_PROTECTION_FINALIZER, AllocationResult, DeviceID, Pod, ResourceClaim
from serving.metrics import Metrics
from tracker import events as ev
from tracker.claim_status import ClaimStatus, parse_claim_status
from tracker.leadership_gate import MayWrite
from tracker.source import BindingSource, SourceError
from tracker.state import ClusterState

log = logging.getLogger("dra_extender.bind")

BIND_ATTEMPTS = 5  # decisions per /bind when claims change under it; also tries per claim when undoing or deallocating


class BindFailed(Exception):
    """The bind cannot succeed; `failure` is the scheduler's answer (str() its message), always under REASON_NOT_BOUND."""

    def __init__(self, failure: Failure | str) -> None:
        self.failure = replace(failure, code=REASON_NOT_BOUND) if isinstance(failure, Failure) else plain(REASON_NOT_BOUND, failure)
        super().__init__(self.failure.message)


class NotLeading(SourceError):
    """Leadership ended during a bind, before one of its writes: the write is not sent; the undo checks again."""

    status = 0


@dataclass(slots=True)
class Written:
    """What one bind changed on one claim, so exactly that can be taken back."""

    key: str
    finalizer_added: bool = False
    allocated: frozenset[DeviceID] = frozenset()
    reserved: bool = False
    created_uid: str = ""  # an extended-resource claim this bind created: deleted on undo


@dataclass(slots=True)
class Extended:
    """The pod's extended-resource claim to create at this bind (or allocated already), and which containers use which request."""

    claim: ResourceClaim  # in memory, not created yet; or, with `exists`, the allocated claim the pod's status does not name
    mappings: tuple[RequestMapping, ...]
    stale: ResourceClaim | None = None  # an unallocated one left by an earlier bind: deleted first
    exists: bool = False  # allocated before (by a bind cut short): only the pod's status is left to write


OWN_KEPT_SECONDS = 600.0  # how long an expectation of our own write is kept when its outcome is unknown
OWN_PRUNE_AT = 4096  # expectations held before the old ones are dropped


class ForeignAllocations:
    """Warns when, while we lead, a claim gets an allocation this process did not write (one allocator per pool).

    The devices of every allocation seen, and those this process wrote, so an
    allocation made by anyone else can be named (see docs/kube-scheduler.md).
    A write whose outcome is unknown (timed out, cancelled, the connection
    lost) may still land: its expectation is kept (for `OWN_KEPT_SECONDS`),
    so our own late write is not reported as another allocator's. Only an
    answer that refused it (HTTP 4xx) withdraws it.
    """

    def __init__(self, state: ClusterState, metrics: Metrics, leadership: MayWrite) -> None:
        self.state = state
        self.metrics = metrics
        self.leadership = leadership
        self._seen: dict[str, frozenset[DeviceID]] = {}
        self._own: dict[tuple[str, frozenset[DeviceID]], float] = {}  # -> when expected (time.monotonic())
        state.subscribe(self.on_event)

    def expect(self, claim_key: str, devices: frozenset[DeviceID]) -> None:
        """Our own write is about to allocate these devices to the claim."""
        now = time.monotonic()
        if len(self._own) >= OWN_PRUNE_AT:
            self._own = {k: t for k, t in self._own.items() if now - t < OWN_KEPT_SECONDS}
        self._own[(claim_key, devices)] = now

    def withdraw(self, claim_key: str, devices: frozenset[DeviceID]) -> None:
        """The API server refused the write: it will not land."""
        self._own.pop((claim_key, devices), None)

    def on_event(self, event: ev.ObjectEvent) -> None:
        if event.kind != ev.RESOURCE_CLAIM:
            return
        claim = self.state.claims.get(event.key)
        devices = frozenset(r.device_id for r in claim.allocation.results) if claim and claim.allocation else frozenset()
        before = self._seen.get(event.key, frozenset())
        if devices:
            self._seen[event.key] = devices
        else:
            self._seen.pop(event.key, None)
        if not devices or devices == before or not self.state.ready:
            return
        if self._own.pop((event.key, devices), None) is not None:
            return
        if self.leadership.may_write():
            self.metrics.foreign_allocations.inc()
            log.warning(
                "claim allocated by another allocator: only one allocator may manage a device pool",
                extra={"claim": event.key, "devices": sorted(str(d) for d in devices)},
            )


class ClaimWrites:
    """Reads, writes and re-reads the claims of one bind; the state hears of every write's result."""

    def __init__(
        self, state: ClusterState, source: BindingSource, foreign: ForeignAllocations, timeout: float, leadership: MayWrite
    ) -> None:
        self.state = state
        self.source = source
        self.foreign = foreign
        self.timeout = timeout  # the bind budget, named in messages
        self.leadership = leadership

    def leading(self, key: str) -> None:
        """Raise NotLeading unless this process leads: asked right before each write, so an ex-leader never writes.

        The lead is counted from before its renewal was sent (tracker/apiserver/leadership.py), so a write
        that starts while this holds starts inside the lease; the undo that follows a refusal checks again.
        """
        if not self.leadership.may_write():
            raise NotLeading(f"not leader: leadership ended before writing claim {key}")

    def apply(self, raw: dict[str, Any]) -> None:
        """A claim as the API server returned it, into the state at once, not only when the watch brings it.

        The store keeps whichever of this and the watch's copy is newer
        (tracker/store.py `_is_older`), so a late watch event cannot make the
        devices this write allocated look free again.
        """
        key = ev.object_key(ev.RESOURCE_CLAIM, raw)
        self.state.apply(ev.ObjectEvent("MODIFIED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, raw))

    def _held(self, key: str) -> ClaimStatus:
        held = self.state.claim_status(key)
        if held is None:
            raise KeyError(key)
        return held

    async def write(self, claim: ResourceClaim, allocation: AllocationResult | None, pod: Pod, uid: str, written: list[Written]) -> None:
        """Allocate and/or reserve one claim with merge patches guarded by its resourceVersion."""
        held = self._held(claim.key)
        ns, _, name = claim.key.partition("/")
        reservation = {"resource": "pods", "name": pod.meta.name, "uid": uid}
        reserved = list(held.reserved_for)
        if allocation is None and uid in held.reserved_uids:
            return  # a retried bind: the reservation belongs to the earlier success
        if written and written[-1].key == claim.key and written[-1].created_uid:
            record = written[-1]  # the claim this bind just created
        else:
            record = Written(claim.key)
            written.append(record)
        version = held.resource_version
        self.leading(claim.key)
        if allocation is not None:
            version = await self._protect(ns, name, held, record, self._counter_record(allocation))
            devices = frozenset(r.device_id for r in allocation.results)
            record.allocated = devices  # before the write: one that times out may still land
            self.foreign.expect(claim.key, devices)
            patch = {
                "metadata": {"resourceVersion": version},
                "status": {"allocation": allocation.to_api(), "reservedFor": [*reserved, reservation]},
            }
            try:
                self.leading(claim.key)
                raw = await self.source.patch_claim(ns, name, patch, status=True)
            except SourceError as e:
                if 400 <= e.status < 500:  # refused: it did not land (a 5xx or no answer may have)
                    self.foreign.withdraw(claim.key, devices)
                raise
            record.reserved = True
            self.apply(raw)
            return
        patch = {"metadata": {"resourceVersion": version}, "status": {"reservedFor": [*reserved, reservation]}}
        self.leading(claim.key)
        raw = await self.source.patch_claim(ns, name, patch, status=True)
        record.reserved = True
        self.apply(raw)

    def _counter_record(self, allocation: AllocationResult) -> str:
        """The annotation recording what the allocation's devices are charged of their counters ("" if none are).

        The figures are the ledger's (the decision reserved the devices, so each is recorded): what the
        pool is charged for them now, read back after a restart (allocator/counter_record.py).
        """
        charged = {}
        for r in allocation.results:
            consumption = None if r.admin_access else self.state.recorded_counters(r.device_id)
            if consumption:
                charged[r.device_id] = consumption
        return format_counter_record(allocation.allocation_timestamp, charged) if charged else ""

    async def _protect(self, ns: str, name: str, held: ClaimStatus, record: Written, counters: str) -> str:
        """Before an allocation, in one metadata write: the delete-protection finalizer and the counter record.

        Written before the allocation, so an allocation of ours never lands without its record; a record
        whose allocation then fails names another allocationTimestamp and is ignored (both "" without
        binding conditions: then it can only over-reserve, allocator/counter_record.py). Returns the
        resourceVersion to write against next.
        """
        finalizers = list(held.finalizers)
        metadata: dict[str, Any] = {"resourceVersion": held.resource_version}
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            metadata["finalizers"] = [*finalizers, DELETE_PROTECTION_FINALIZER]
        if counters:
            metadata["annotations"] = {COUNTERS_ANNOTATION: counters}
        if len(metadata) == 1:
            return held.resource_version
        raw = await self.source.patch_claim(ns, name, {"metadata": metadata})
        record.finalizer_added = "finalizers" in metadata
        self.apply(raw)
        return parse_claim_status(raw).resource_version

    async def drop_finalizer(self, held: ClaimStatus) -> None:
        """A claim without an allocation no longer needs delete protection (as upstream's Unreserve)."""
        if DELETE_PROTECTION_FINALIZER not in held.finalizers:
            return
        kept = [f for f in held.finalizers if f != DELETE_PROTECTION_FINALIZER]
        patch = {"metadata": {"resourceVersion": held.resource_version, "finalizers": kept or None}}
        self.leading(f"{held.namespace}/{held.name}")
        self.apply(await self.source.patch_claim(held.namespace, held.name, patch))

    async def create_extended(self, pod: Pod, extended: Extended, written: list[Written]) -> ResourceClaim:
        """Create the pod's extended-resource claim (generateName), after deleting a stale one."""
        ns = pod.meta.namespace
        stale = extended.stale
        self.leading(f"{ns}/{pod.meta.name} (its extended-resource claim)")
        if stale is not None:
            with contextlib.suppress(SourceError):
                await self.source.delete_claim(ns, stale.meta.name, stale.meta.uid)
        raw = await self.source.create_claim(ns, claim_manifest(pod, extended.claim.requests))
        self.apply(raw)
        created = parse_resource_claim(raw)
        written.append(Written(created.key, created_uid=created.meta.uid))
        return created

    async def record_extended(self, pod: Pod, extended: Extended, claim_key: str) -> None:
        """pod.status.extendedResourceClaimStatus: the claim's name and which container uses which request."""
        name = claim_key.partition("/")[2]
        status = {"requestMappings": [m.to_api() for m in extended.mappings], "resourceClaimName": name}
        await self.source.patch_pod_status(pod.meta.namespace, pod.meta.name, {"status": {"extendedResourceClaimStatus": status}})

    async def fetch_missing(self, pod: Pod, deadline: float) -> None:
        """A claim missing from the cache may just not have arrived through the watch yet."""
        for name in claim_names(pod):
            key = f"{pod.meta.namespace}/{name}"
            if key in self.state.claims:
                continue
            raw = await self.read(pod.meta.namespace, name, deadline)
            if raw is not None:
                self.apply(raw)

    async def refresh(self, pod: Pod, deadline: float) -> None:
        for name in claim_names(pod):
            raw = await self.read(pod.meta.namespace, name, deadline)
            key = f"{pod.meta.namespace}/{name}"
            if raw is not None:
                self.apply(raw)
            elif key in self.state.claims:
                self.state.apply(ev.ObjectEvent("DELETED", ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, key, {}))

    async def read(self, namespace: str, name: str, deadline: float) -> dict[str, Any] | None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BindFailed(f"claim {namespace}/{name}: out of time reading it (bind budget {self.timeout:g}s)")
        try:
            async with asyncio.timeout(left):
                return await self.source.get(ev.RESOURCE_CLAIM, namespace, name)
        except TimeoutError:
            raise BindFailed(f"claim {namespace}/{name}: reading it timed out (bind budget {self.timeout:g}s)") from None
        except SourceError as e:
            raise BindFailed(f"claim {namespace}/{name}: reading it failed: {e.message}") from None
