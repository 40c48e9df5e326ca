"""ClusterState: everything the extender knows about the cluster, kept current.

Sources push ObjectEvents in; the state parses each object once, keeps the
patched device views (recomputing only the devices a change can touch), an
index from node to slices, the devices allocated to claims and the in-flight
ledger of allocations being written. Readers (filter, bind, eviction) get
read-only values and never see a half-applied change: every mutation happens
synchronously on the event loop.

Composed of private parts, along upstream's seams:

- tracker/store.py: the object store (nodes, pods, claims, templates,
  volumes), the change log and the problem reporter;
- tracker/views/devices.py: the patched device views (slices, rules,
  patches, classes, the CEL warm-up), as upstream's resourceslice/tracker,
  itself composed of one part per job (intake, view builder, recompute
  scheduler, node changes, queries);
- tracker/ledger.py: which devices are allocated or in flight, the only
  writer of `allocated` and `inflight`.

ClusterState owns intake (the EventSink methods), readiness, the versions
held and the listeners; readers see read-only mappings and the device
views' query object (`queries`: tracker/views/queries.py), and writers go through `apply`, `replace`, `mark_synced`,
`reserve` and `report`, never through a part.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from allocator.allocated_state import AllocatedState, AlsoHeld
from allocator.allocation import Allocator, Outcome
from allocator.counters import describe_consumption
from allocator.device_view import DeviceView, SliceView
from allocator.failures import Failure
from allocator.parse import ValidationError
from allocator.types import (
    AllocationResult,
    CounterConsumption,
    DeviceClass,
    DeviceID,
    DeviceTaintRule,
    Node,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    ResourceSlicePatch,
)
from tracker import events as ev
from tracker.claim_status import ClaimStatus
from tracker.foreground import Foreground
from tracker.ledger import AllocationLedger, Reservation
from tracker.pod_status import PodStatus
from tracker.resources import REQUIRED_KINDS
from tracker.store import (
    CHANGE_LOG_MAX,
    COUNTER_RECORD_MALFORMED,
    POD_CLAIM_NAME_ANNOTATION,
    ChangeLog,
    ObjectStore,
    Problem,
    ProblemReporter,
)
from tracker.views.devices import DeviceViews
from tracker.views.queries import DeviceQueries
from tracker.volumes import VolumeIndex

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

__all__ = [
    "CHANGE_LOG_MAX",
    "COUNTERS_LOWERED",
    "COUNTER_RECORD_MALFORMED",
    "DUPLICATE_SHARE_ID",
    "POD_CLAIM_NAME_ANNOTATION",
    "REQUIRED_KINDS",
    "ClusterState",
    "Problem",
]

log = logging.getLogger("dra_extender.tracker")

Listener = Callable[[ev.ObjectEvent], None]

DUPLICATE_SHARE_ID = "DuplicateShareID"  # the Warning Event's reason on a claim whose shareID another result repeats
COUNTERS_LOWERED = "CountersLowered"  # ... on a claim holding a device whose slice now says it consumes less than charged


class _Versions(Mapping[tuple[str, str], Mapping[str, str]]):
    """A read-only, live view of the versions held: every (kind, group) reads as a mapping, empty if none is held."""

    __slots__ = ("_by_kind",)

    def __init__(self, by_kind: defaultdict[tuple[str, str], dict[str, str]]) -> None:
        self._by_kind = by_kind

    def __getitem__(self, kind: tuple[str, str]) -> Mapping[str, str]:
        return MappingProxyType(self._by_kind[kind])

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._by_kind)

    def __len__(self) -> int:
        return len(self._by_kind)


class ClusterState:
    """What the extender, the eviction controller and kubectl dra read; the EventSink both sources feed."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        *,
        required: Iterable[tuple[str, str]] = REQUIRED_KINDS,
        on_problem: Callable[[Problem], None] | None = None,
    ) -> None:
        self._required = frozenset(required)
        self._synced: set[tuple[str, str]] = set()
        self._generation = 0  # bumped on every applied change
        self._listeners: list[Listener] = []
        # resourceVersion of every object the view holds, per (kind, group): lets an
        # operator (and the tests) compare the view with the API server's state.
        self._versions: defaultdict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self._changes = ChangeLog()
        self._problems = ProblemReporter(on_problem, self._uid_of)
        self._ledger = AllocationLedger(
            self._device_changed,
            lookup=self._published_consumption,
            on_duplicate=self._duplicate_share,
            on_lowered=self._counters_lowered,
            on_unrecorded=self._counters_unrecorded,
        )
        self._store = ObjectStore(self._ledger, self._changes, self._problems.report)
        # The scheduler's verbs in flight (counted by the extender's routes): the CEL warm-up waits for a quiet moment.
        self.foreground = Foreground()
        self._views = DeviceViews(
            cel,
            self._ledger,
            self._changes,
            self._problems.report,
            release=self._tell_listeners,
            started=lambda: bool(self._synced),
            foreground=self.foreground,
        )
        self._parts = (self._store, self._views)
        s, v = self._store, self._views
        # Live read-only views of the parts' maps, made once (no cost per read).
        self._ro_nodes = MappingProxyType(s.nodes)
        self._ro_pods = MappingProxyType(s.pods)
        self._ro_claims = MappingProxyType(s.claims)
        self._ro_templates = MappingProxyType(s.templates)
        self._ro_pod_statuses = MappingProxyType(s.pod_statuses)
        self._ro_classes = MappingProxyType(v.classes)
        self._ro_slices = MappingProxyType(v.slices)
        self._ro_rules = MappingProxyType(v.rules)
        self._ro_patches = MappingProxyType(v.patches)
        self._ro_devices = MappingProxyType(v.devices)
        self._ro_slice_views = MappingProxyType(v.slice_views)
        # The device views' read queries (slices a node reaches, a pool's slices, a device's slice,
        # counters and shares, whether anything may evict), asked directly: `state.queries.x(...)`.
        self.queries: DeviceQueries = v.queries

    # ------------------------------------------------------------------ intake (the EventSink)

    # A reflector may apply the first list of a kind page by page while nothing is served yet
    # (tracker/apiserver/reflector.py, `Reflector.list`): every object goes through `apply` either way.
    streams_initial_lists = True

    def apply(self, event: ev.ObjectEvent) -> None:
        """One change of one object: parsed by the part that holds its kind, then told to the listeners."""
        part = next((p for p in self._parts if p.handles(event.kind)), None)
        if part is None:
            return
        if event.type != "DELETED" and self._store.is_echo(event):
            return
        self._problems.track_spec(event)
        try:
            part.apply(event)
        except ValidationError as e:
            self.report(Problem(event.kind, event.group, event.key, str(e), ev.object_uid(event.object)))
            log.warning(
                "ignoring invalid object",
                extra={"kind": event.kind, "object": event.key, "field": e.field, "err": e.reason},
            )
            return
        self._generation += 1
        versions = self._versions[(event.kind, event.group)]
        if event.type == "DELETED" or not part.holds(event.kind, event.group, event.key):
            versions.pop(event.key, None)
        else:
            versions[event.key] = self._store.version_of(event)
        if not self._views.hold_back(event):
            self._tell_listeners(event)

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        """A consistent full list of one kind: upsert all, delete what is not in it."""
        keys = set()
        for raw in objects:
            key = ev.object_key(kind, raw)
            keys.add(key)
            self.apply(ev.ObjectEvent("MODIFIED", kind, group, key, raw))
        held: set[str] = set()
        for part in self._parts:
            if part.handles(kind):
                held = part.keys_of(kind, group)
        for key in held - keys:
            self.apply(ev.ObjectEvent("DELETED", kind, group, key, {}))

    def mark_synced(self, kind: str, group: str) -> None:
        if (kind, group) not in self._synced:
            was_ready = self._required <= self._synced
            self._synced.add((kind, group))
            log.info("initial state complete", extra={"kind": kind, "group": group})
            if self._required <= self._synced and not was_ready:
                self._views.warm_all()

    def subscribe(self, listener: Listener) -> None:
        """`listener` hears of every applied change, after the device views it touches are computed."""
        self._listeners.append(listener)

    def problem_of(self, kind: str, group: str, name: str) -> str | None:
        """The last problem reported about a class, rule or patch with its current spec (a selector failing at run time)."""
        return self._problems.latest.get((kind, group, name))

    def report(self, problem: Problem) -> None:
        """Report a faulty object once (an Event and a metric downstream).

        Classes, rules and patches are reported once per spec (a new spec or a
        re-created object may be reported again); other kinds once per message while the object exists.
        """
        self._problems.report(problem)

    def _tell_listeners(self, event: ev.ObjectEvent) -> None:
        for listener in self._listeners:
            listener(event)

    def _device_changed(self, did: DeviceID) -> None:
        self._views.device_changed(did)

    def _published_consumption(self, did: DeviceID) -> tuple[CounterConsumption, ...] | None:
        """What a published device consumes of its pool's counters (None: not published), for the ledger's records."""
        s = self.queries.slice_of(did)
        device = next((d for d in s.devices if d.name == did.device), None) if s is not None else None
        return device.consumes_counters if device is not None else None

    def _duplicate_share(self, claim_key: str, share_id: str, did: DeviceID, claims: tuple[str, ...]) -> None:
        """Two allocation results with one shareID on one device: each counts as its own share; warn on the claim."""
        log.warning(
            "duplicate shareID on a shared device: counted once per allocation result",
            extra={"claim": claim_key, "device": str(did), "share_id": share_id, "claims": ", ".join(claims)},
        )
        self.report(
            Problem(
                ev.RESOURCE_CLAIM,
                ev.GROUP_RESOURCE,
                claim_key,
                f"status.allocation: shareID {share_id} of device {did} is used by {len(claims)} allocation results "
                f"(claims {', '.join(claims)}); each is counted as its own share, only one allocator may manage a device pool",
                reason=DUPLICATE_SHARE_ID,
            )
        )

    def _counters_lowered(
        self, did: DeviceID, holders: str, recorded: tuple[CounterConsumption, ...], now: tuple[CounterConsumption, ...]
    ) -> None:
        """A held device's slice says it consumes less than it was charged: the charge stands; warn on each claim."""
        was, is_now = describe_consumption(recorded), describe_consumption(now) or "nothing"
        log.warning(
            "slice lowers what a held device consumes of its counters: charged as recorded until deallocated",
            extra={"device": str(did), "claims": holders, "recorded": was, "slice": is_now},
        )
        for claim_key in holders.split(", ") if holders else ():
            self.report(
                Problem(
                    ev.RESOURCE_CLAIM,
                    ev.GROUP_RESOURCE,
                    claim_key,
                    f"device {did}: its ResourceSlice now says it consumes {is_now} of its pool's counters, "
                    f"less than the {was} it was allocated with; the pool stays charged {was} until the claim is deallocated",
                    reason=COUNTERS_LOWERED,
                )
            )

    def _counters_unrecorded(self, claim_key: str, did: DeviceID) -> None:
        """Once per claim: allocated without a counter record (before records, or by another allocator)."""
        log.info(
            "claim has no counter record: its devices are charged what their slices say (a slice lowered since allocation is not seen)",
            extra={"claim": claim_key, "device": str(did)},
        )

    def _uid_of(self, kind: str, group: str, name: str) -> str:
        part = next((p for p in self._parts if p.handles(kind)), None)
        return part.uid_of(kind, group, name) if part is not None else ""

    # ------------------------------------------------------------------ the ledger's writers (the binder's decisions)

    def reserve(self, allocations: Mapping[str, AllocationResult]) -> Reservation:
        """Hold what an allocation decision takes, in flight until the reservation is released."""
        return self._ledger.reserve_results(allocations)

    # ------------------------------------------------------------------ readiness

    @property
    def ready(self) -> bool:
        """Every required kind listed and, the first time, the device views those lists ask for computed."""
        return self._required <= self._synced and self._views.views_ready()

    def missing(self) -> list[str]:
        return sorted(f"{k}.{g}" if g else k for k, g in self._required - self._synced)

    def not_ready(self) -> str | None:
        """Why a process over this state cannot work yet (the initial state of some kinds is missing), or None."""
        if self.ready:
            return None
        return f"not ready: waiting for the initial state of {', '.join(self.missing())}"

    @property
    def required(self) -> frozenset[tuple[str, str]]:
        return self._required

    @property
    def synced(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._synced)

    @property
    def generation(self) -> int:
        """Bumped on every applied change."""
        return self._generation

    @property
    def versions(self) -> Mapping[tuple[str, str], Mapping[str, str]]:
        """resourceVersion of every object held, by (kind, group) then key (live, read-only)."""
        return _Versions(self._versions)

    # ------------------------------------------------------------------ the change log

    @property
    def change_seq(self) -> int:
        """The sequence number the next change will get."""
        return self._changes.seq

    def allocate_on(
        self,
        allocator: Allocator[Any],
        node: Node,
        claims: Sequence[ResourceClaim],
        *,
        timestamp: str = "",
        also_held: frozenset[DeviceID] = frozenset(),
    ) -> Outcome:
        """`claims` (one pod's) allocated by `allocator` on `node` as this state sees it: the slices reachable from it,
        the classes, the devices allocated or in flight, each device's patched view. The one way /filter's verdicts,
        /bind's decision and the tests ask. `also_held`: devices counted as held whole besides (pods expected on the
        node, for /prioritize)."""
        queries = self.queries
        held: AllocatedState = self.allocated_state
        return allocator.allocate(
            node,
            claims,
            queries.slices_for_node(node.name),
            self.classes,
            AlsoHeld(held, also_held) if also_held else held,
            self.device,
            timestamp=timestamp,
            pool_slices=queries.pool_slices,
        )

    def changed_nodes_since(self, seq: int) -> list[str | None] | None:
        """Nodes changed at or after `seq`; None when every node may have (or the log no longer reaches back)."""
        return self._changes.changed_nodes_since(seq)

    # ------------------------------------------------------------------ objects

    @property
    def nodes(self) -> Mapping[str, Node]:
        return self._ro_nodes

    def node(self, name: str) -> Node | None:
        return self._store.nodes.get(name)

    @property
    def pods(self) -> Mapping[str, Pod]:
        """Only pods with resource claims, extended resources or PVC volumes."""
        return self._ro_pods

    @property
    def claims(self) -> Mapping[str, ResourceClaim]:
        return self._ro_claims

    def claim_status(self, key: str) -> ClaimStatus | None:
        """What writing the claim back needs (its version, finalizers, reservations) and its devices' conditions."""
        return self._store.claim_statuses.get(key)

    @property
    def templates(self) -> Mapping[str, ResourceClaimTemplate]:
        return self._ro_templates

    @property
    def pod_statuses(self) -> Mapping[str, PodStatus]:
        """Of each pod held (as `pods`): its conditions and volume tolerations (the eviction controller reads them)."""
        return self._ro_pod_statuses

    @property
    def volumes(self) -> VolumeIndex:
        """The volume taints and which pods use which PVC (read it; only intake changes it)."""
        return self._store.volumes

    def pod_claims(self, pod: Pod) -> tuple[list[ResourceClaim], Failure | None]:
        """The pod's claims in allocation order (allocator.pod_claims), or why they cannot be resolved yet."""
        return self._store.pod_claims(pod)

    # ------------------------------------------------------------------ devices

    @property
    def cel(self) -> SelectorEngine[Any]:
        return self._views.cel

    @property
    def classes(self) -> Mapping[str, DeviceClass]:
        return self._ro_classes

    @property
    def slices(self) -> Mapping[str, ResourceSlice]:
        """The drivers' slices as published (before patches and rules)."""
        return self._ro_slices

    @property
    def rules(self) -> Mapping[tuple[str, str], DeviceTaintRule]:
        """By (group, name)."""
        return self._ro_rules

    @property
    def patches(self) -> Mapping[str, ResourceSlicePatch]:
        return self._ro_patches

    @property
    def devices(self) -> Mapping[DeviceID, DeviceView]:
        """Every device's patched view."""
        return self._ro_devices

    @property
    def slice_views(self) -> Mapping[str, SliceView]:
        return self._ro_slice_views

    def device(self, did: DeviceID) -> DeviceView | None:
        return self._views.devices.get(did)

    # ------------------------------------------------------------------ allocation state

    @property
    def allocated(self) -> Mapping[DeviceID, str]:
        """Device -> claim key, from the claims' statuses."""
        return self._ledger.allocated

    @property
    def inflight(self) -> Mapping[DeviceID, str]:
        """Device -> claim key, chosen at /bind and not in a claim's status yet."""
        return self._ledger.inflight

    @property
    def allocated_state(self) -> AllocatedState:
        """What the allocator asks of allocated and in-flight devices (read-only)."""
        return self._ledger

    def is_taken(self, did: DeviceID) -> bool:
        return self._ledger.is_taken(did)

    def recorded_counters(self, did: DeviceID) -> tuple[CounterConsumption, ...] | None:
        """What a held device is charged of its pool's counters (None: not held, or never seen)."""
        return self._ledger.recorded_counters(did)

    def holder(self, did: DeviceID) -> str | None:
        """The claim(s) holding a device, allocated or in flight."""
        return self._ledger.holder(did)

    def taken_on_node(self, node_name: str) -> int:
        """How many of the node's own (node-local) devices are allocated or in flight."""
        return self._views.taken_on_node(node_name)
