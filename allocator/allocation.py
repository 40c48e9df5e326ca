"""The structured allocator: one node, one pod's claims, the patched devices.

It mirrors upstream `k8s.io/dynamic-resource-allocation/structured`: pools
are gathered for the node (newest generation only, incomplete pools noted),
claims are handled in pod order, requests in claim order, devices in pool
order, depth-first with backtracking; the first complete solution wins.

Beyond upstream it explains itself: a failure says which claim and request
could not be satisfied and why the candidate devices were rejected, in words
an admin can act on.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeGuard, cast

from allocator import capacity as cap
from allocator.allocated_state import AllocatedState, DedicatedOnly, SharesFolded
from allocator.candidates import CandidateFinder, Selector, SelectorEngine, SelectorT, Slot
from allocator.counters import Availability
from allocator.device_order import BINPACK, SPREAD, order_name, spread_candidates
from allocator.device_view import DeviceView, SliceView
from allocator.failures import (
    REASON_CLAIM_UNUSABLE,
    REASON_CLASS_MISSING,
    REASON_FEATURE_DISABLED,
    REASON_NO_DEVICES,
    REASON_NO_EXECUTE,
    REASON_NODE_MISMATCH,
    REASON_POOL_INVALID,
    REASON_SELECTOR_ERROR,
    REASON_TOO_MANY,
    Failure,
    of_claim,
)
from allocator.features import DEFAULT_FEATURES, Features
from allocator.node_selection import node_name_selector, node_selector_matches
from allocator.pools import Pool, PoolSlices, gather_pools
from allocator.search import Pick, Search
from allocator.tolerations import allocated_tolerations, untolerated_no_execute_taints
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    AllocatedConfig,
    AllocationResult,
    DeviceClass,
    DeviceID,
    DeviceRequestAllocationResult,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
)

__all__ = ["Allocator", "Failure", "Outcome", "Selector", "SelectorEngine", "gather_pools"]

# Upper bound on backtracking steps per node, so a pathological constraint
# set cannot hold the scheduler past its extender timeout.
DEFAULT_SEARCH_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """A node's verdict for a pod's claims.

    `allocations` holds a result for every claim that needed allocation;
    `devices` every device the pod would use (new and already allocated),
    which scoring reads.
    """

    failure: Failure | None = None
    allocations: Mapping[str, AllocationResult] = field(default_factory=dict)
    devices: tuple[DeviceView, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None


_STATE_TYPES: dict[type, bool] = {}  # type -> whether its instances are AllocatedStates


def _is_allocated_state(obj: object) -> TypeGuard[AllocatedState]:
    """isinstance(obj, AllocatedState) once per type: the runtime Protocol check costs ~10 us, once per node of a first pass."""
    kind = type(obj)
    known = _STATE_TYPES.get(kind)
    if known is None:
        known = _STATE_TYPES[kind] = isinstance(obj, AllocatedState)
    return known


def _fewest_results(claim: ResourceClaim) -> int:
    """The fewest results any allocation of `claim` has (ExactCount counts; All and firstAvailable at least 1)."""
    total = 0
    for request in claim.requests:
        total += min((1 if sub.allocation_mode == MODE_ALL else sub.count for sub in request.subrequests), default=0)
    return total


class Allocator(Generic[SelectorT]):
    """Stateless apart from the selector engine, whose caches make repeated calls cheap."""

    def __init__(
        self,
        selectors: SelectorEngine[SelectorT],
        *,
        search_budget: int = DEFAULT_SEARCH_BUDGET,
        features: Features = DEFAULT_FEATURES,
        device_placement: str = BINPACK,
        first_fit: bool = True,
    ) -> None:
        """`first_fit=False` sends a lone request through the full search too, which must answer the same
        (the allocation table runs every row both ways)."""
        self.features = features
        self._spread = order_name(device_placement) == SPREAD  # allocator/device_order.py; off: upstream's first fit
        self._first_fit = first_fit and not self._spread  # spread reorders the full candidate lists: no fast path
        self._budget = search_budget
        self._candidates = CandidateFinder(selectors, features)

    # ------------------------------------------------------------------ entry point

    def allocate(
        self,
        node: Node,
        claims: Sequence[ResourceClaim],
        slices: Iterable[SliceView],
        classes: Mapping[str, DeviceClass],
        allocated: AllocatedState | Callable[[DeviceID], bool] | frozenset[DeviceID] | set[DeviceID],
        lookup: Callable[[DeviceID], DeviceView | None] = lambda _id: None,
        *,
        timestamp: str = "",
        pool_slices: PoolSlices | None = None,
    ) -> Outcome:
        """Decide whether `claims` (one pod's, in pod order) fit on `node`.

        `allocated` says which devices other claims hold (or have in flight),
        whole or shared; `lookup` finds the current view of an already-allocated
        device so its taints can be checked; `pool_slices` every slice of a pool,
        for pools only partly reachable from the node.
        """
        state: AllocatedState
        if _is_allocated_state(allocated):
            state = allocated
        else:
            taken = cast("Callable[[DeviceID], bool] | frozenset[DeviceID] | set[DeviceID]", allocated)  # not one, by the check
            state = DedicatedOnly(taken if callable(taken) else taken.__contains__)
        if not self.features.consumable_capacity:
            state = SharesFolded(state)
        used: list[DeviceView] = []
        # Already-allocated claims: they fit or they do not; never re-allocated.
        for claim in claims:
            if claim.allocation is None:
                continue
            if claim.meta.deletion_timestamp:
                # Never reserved for another pod: its devices are about to be released.
                return Outcome(of_claim(REASON_CLAIM_UNUSABLE, claim.key, " is being deleted"))
            failure = self._check_allocated(node, claim, lookup, used)
            if failure is not None:
                return Outcome(failure)
        pending = [c for c in claims if c.allocation is None]
        if not pending:
            return Outcome(None, {}, tuple(used))
        refused = self._refused(pending)
        if refused is not None:
            return Outcome(refused)
        return self._search(node, pending, gather_pools(node, slices, self.features, pool_slices), classes, state, used, timestamp)

    def _refused(self, pending: Sequence[ResourceClaim]) -> Failure | None:
        """A claim no node can hold, known before any search."""
        for claim in pending:
            if claim.meta.deletion_timestamp:
                return of_claim(REASON_CLAIM_UNUSABLE, claim.key, " is being deleted")
            fewest = _fewest_results(claim)
            if fewest > ALLOCATION_RESULTS_MAX_SIZE:  # upstream checks the same bound
                return of_claim(
                    REASON_TOO_MANY,
                    claim.key,
                    f": its requests ask for at least {fewest} devices, more than the {ALLOCATION_RESULTS_MAX_SIZE} one claim may hold",
                )
            if not self.features.consumable_capacity:
                disabled = _capacity_requests_disabled(claim)
                if disabled is not None:
                    return disabled
            negative = _negative_capacity_request(claim)
            if negative is not None:
                return negative
        return None

    def _search(
        self,
        node: Node,
        pending: list[ResourceClaim],
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        used: list[DeviceView],
        timestamp: str,
    ) -> Outcome:
        avail: Availability = {}  # pool name -> counters left by allocated devices: the same for every tally of this call
        slots: list[Slot] = []
        first = self._candidates.first_fit(pending, node, pools, classes, state, avail) if self._first_fit else None
        if first is not None:
            slots.append(first)
        for ci, claim in enumerate(pending if first is None else ()):
            for request in claim.requests:
                slot_or_failure = self._candidates.slot(ci, claim, request, node, pools, classes, state, avail)
                if isinstance(slot_or_failure, Failure):
                    return Outcome(_with_invalid_pools(slot_or_failure, pools))
                slots.append(slot_or_failure)
        if self._spread:
            spread_candidates(slots, avail, state)
        search = Search(pending, slots, self._budget, state, any(p.counter_sets for p in pools), avail)
        solution = search.run()
        if solution is None:
            return Outcome(_with_invalid_pools(search.failure(), pools))
        allocations: dict[str, AllocationResult] = {}
        for ci, claim in enumerate(pending):
            picks = solution[ci]
            selector = _node_selector_for([p.candidate.device for p in picks], node.name, self.features.binding_conditions)
            if isinstance(selector, Failure):
                return Outcome(selector.within(claim.key))
            allocations[claim.key] = _result(claim, picks, search.classes_used[ci], timestamp, selector, self.features)
            used.extend(p.candidate.device for p in picks)
        return Outcome(None, allocations, tuple(used))

    # ------------------------------------------------------------------ allocated claims

    def _check_allocated(
        self,
        node: Node,
        claim: ResourceClaim,
        lookup: Callable[[DeviceID], DeviceView | None],
        used: list[DeviceView],
    ) -> Failure | None:
        alloc = claim.allocation
        assert alloc is not None
        if alloc.node_selector is not None and not node_selector_matches(alloc.node_selector, node):
            return of_claim(REASON_NODE_MISMATCH, claim.key, f" is allocated to devices not reachable from node {node.name}")
        for result in alloc.results:
            device = lookup(result.device_id)
            if device is None:
                continue
            used.append(device)
            bad = untolerated_no_execute_taints(device.taints, allocated_tolerations(claim, result))
            if bad:
                return of_claim(
                    REASON_NO_EXECUTE,
                    claim.key,
                    f", request {result.request}: allocated device {result.device_id} has "
                    f"taint {', '.join(str(t) for t in bad)} not tolerated; a new pod may not use it",
                    result.request,
                )
        return None


def _negative_capacity_request(claim: ResourceClaim) -> Failure | None:
    """A capacity request below zero would make room on a shared device: refused (upstream accepts it)."""
    for request in claim.requests:
        for name, sub in ((request.name, request.exactly), *((f"{request.name}/{s.name}", s) for s in request.first_available)):
            if sub is None:
                continue
            bad = cap.negative_request(sub.capacity_requests)
            if bad:
                return of_claim(
                    REASON_CLAIM_UNUSABLE,
                    claim.key,
                    f", request {name}: capacity.requests {bad} is negative; a request must not be below zero",
                    name,
                )
    return None


def _capacity_requests_disabled(claim: ResourceClaim) -> Failure | None:
    """Upstream refuses a claim with capacity requests outright when DRAConsumableCapacity is off."""
    for request in claim.requests:
        if request.exactly is not None and request.exactly.capacity_requests:
            return of_claim(
                REASON_FEATURE_DISABLED,
                claim.key,
                f", request {request.name}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                request.name,
            )
        for sub in request.first_available:
            if sub.capacity_requests:
                return of_claim(
                    REASON_FEATURE_DISABLED,
                    claim.key,
                    f", subrequest {sub.name}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                    f"{request.name}/{sub.name}",
                )
    return None


def _with_invalid_pools(failure: Failure, pools: Sequence[Pool]) -> Failure:
    """Upstream: no allocation on a node where some pool is invalid says so, whatever else failed."""
    if failure.code in (REASON_CLASS_MISSING, REASON_SELECTOR_ERROR, REASON_POOL_INVALID, REASON_CLAIM_UNUSABLE):
        return failure
    invalid = [f"{p.id}: {p.invalid}" for p in pools if p.invalid]
    if not invalid:
        return failure
    return failure.prefixed(REASON_POOL_INVALID, f"invalid resource pools were encountered ({'; '.join(invalid)}); ")


def _same_requirement(a: NodeSelectorRequirement, b: NodeSelectorRequirement) -> bool:
    return a.key == b.key and a.operator == b.operator and set(a.values) == set(b.values)


def _node_selector_for(devices: Sequence[DeviceView], node_name: str, binds_to_node: bool = False) -> NodeSelector | Failure | None:
    """Upstream createNodeSelector: a node-local device (or one that binds to the node) pins the node;
    selectors merge into one term."""
    expressions: list[NodeSelectorRequirement] = []
    fields_: list[NodeSelectorRequirement] = []
    for d in devices:
        if d.node_name is not None:
            return node_name_selector(node_name)
        if binds_to_node and d.binds_to_node:
            return node_name_selector(node_name)
        if d.node_selector is not None:
            terms = d.node_selector.terms
            if len(terms) > 1:
                return Failure(REASON_NO_DEVICES, (f"create NodeSelector: unsupported ResourceSlice.NodeSelector with {len(terms)} terms",))
            if terms:
                for into, reqs in ((fields_, terms[0].match_fields), (expressions, terms[0].match_expressions)):
                    for q in reqs:
                        if not any(_same_requirement(q, have) for have in into):
                            into.append(q)
    if expressions or fields_:
        return NodeSelector((NodeSelectorTerm(tuple(expressions), tuple(fields_)),))
    return None


def _result(
    claim: ResourceClaim,
    picks: list[Pick],
    classes_used: list[tuple[str, DeviceClass]],
    timestamp: str,
    node_selector: NodeSelector | None,
    features: Features = DEFAULT_FEATURES,
) -> AllocationResult:
    binding = features.binding_conditions
    results = []
    for p in picks:
        d = p.candidate.device
        shared = p.candidate.shared
        amounts = p.candidate.amounts
        results.append(
            DeviceRequestAllocationResult(
                request=p.result_name,
                driver=d.id.driver,
                pool=d.id.pool,
                device=d.id.device,
                admin_access=True if p.request.admin_access else None,
                # Copied so NoExecute tolerations survive scheduling (kubernetes#134434).
                tolerations=p.request.tolerations,
                share_id=str(uuid.uuid4()) if shared else None,
                consumed_capacity=cap.as_quantities(amounts) if shared and amounts else None,
                binding_conditions=d.binding_conditions if binding else (),
                binding_failure_conditions=d.binding_failure_conditions if binding else (),
            )
        )
    config: list[AllocatedConfig] = []
    for name, device_class in classes_used:
        for c in device_class.config:
            config.append(AllocatedConfig("FromClass", c.opaque, (name,)))
    for c in claim.config:
        config.append(AllocatedConfig("FromClaim", c.opaque, c.requests))
    return AllocationResult(tuple(results), tuple(config), node_selector, timestamp)
