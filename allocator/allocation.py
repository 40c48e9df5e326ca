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
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Generic, Protocol, TypeVar

from allocator import capacity as cap
from allocator import constraints as cons
from allocator.allocated_state import AllocatedState, DedicatedOnly, SharesFolded
from allocator.counters import Availability, CounterTally, Tally, describe_short
from allocator.device_view import DeviceView, SliceView
from allocator.features import DEFAULT_FEATURES, Features
from allocator.node_selection import node_name_selector, node_selector_matches
from allocator.pools import Pool, PoolSlices, gather_pools
from allocator.tolerations import untolerated_blocking_taints, untolerated_no_execute_taints
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    AllocatedConfig,
    AllocationResult,
    DeviceClass,
    DeviceID,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceToleration,
    ExactRequest,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
)

# Failure categories, used for metrics labels and for the reason's wording.
REASON_TAINTED = "tainted"
REASON_ALLOCATED = "allocated"
REASON_SELECTOR = "selector_mismatch"
REASON_SELECTOR_ERROR = "selector_error"
REASON_POOL_INCOMPLETE = "pool_incomplete"
REASON_NO_DEVICES = "no_devices"
REASON_CONSTRAINTS = "constraints"
REASON_CLASS_MISSING = "class_missing"
REASON_TOO_MANY = "too_many_results"
REASON_NODE_MISMATCH = "node_mismatch"
REASON_NO_EXECUTE = "no_execute_taint"
REASON_CLAIM_UNUSABLE = "claim_unusable"
REASON_SEARCH_LIMIT = "search_limit"
REASON_COUNTERS = "counters_exhausted"
REASON_CAPACITY = "capacity_exhausted"
REASON_POOL_INVALID = "pool_invalid"
REASON_FEATURE_DISABLED = "feature_disabled"

__all__ = ["Allocator", "Failure", "Outcome", "SelectorEngine", "gather_pools"]

# Upper bound on backtracking steps per node, so a pathological constraint
# set cannot hold the scheduler past its extender timeout.
DEFAULT_SEARCH_BUDGET = 200_000
SELECTOR_MEMO_PER_SLICE = 64  # distinct (class, request) selector sets remembered per slice view


class Selector(Protocol):
    """A compiled selector; the allocator reads only its expression (its memo's key)."""

    @property
    def expression(self) -> str: ...


SelectorT = TypeVar("SelectorT", bound=Selector)


class SelectorEngine(Protocol[SelectorT]):
    """The CEL interface the allocator needs (allocator.cel.CelEnvironment).

    Generic in the engine's selector type: an engine evaluates the selectors it compiled.
    """

    def compile(self, expression: str) -> SelectorT: ...

    def evaluate(self, selector: SelectorT, device: DeviceView) -> bool: ...

    def forget(self, cel_key: Hashable) -> None:
        """Drop what is cached for a device version that is gone (the tracker calls it)."""


# (class selector expressions, request selector expressions) -> (in class, matches the request) per device
_SelectorMemo = dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[bool, bool], ...]]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a node does not fit; `message` is what the scheduler shows."""

    code: str
    message: str
    claim: str = ""
    request: str = ""
    device_class: str = ""  # set when a DeviceClass selector failed: the class is at fault


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


@dataclass(slots=True)
class _Slot:
    """One request of one claim (with its alternatives for firstAvailable)."""

    claim_index: int
    request_name: str
    alternatives: list[_Alternative]


@dataclass(slots=True)
class _Candidate:
    """A device a request may take, with what taking it involves."""

    device: DeviceView
    pool: Pool | None = None  # set when the device consumes counters (and DRAPartitionableDevices is on)
    shared: bool = False  # allows multiple allocations (and DRAConsumableCapacity is on)
    amounts: cap.Amounts | None = None  # what the request consumes of its capacities (DRAConsumableCapacity)
    blocked: bool = False  # an untolerated taint: never taken, but its counters are charged first, as upstream


@dataclass(slots=True)
class _Alternative:
    """A concrete way to satisfy a slot: `exactly` or one subrequest."""

    result_name: str  # "req" or "req/sub"
    request: ExactRequest
    device_class: DeviceClass
    count: int
    candidates: list[_Candidate]  # pool order; `usable` of them are not blocked
    all_mode: bool = False

    @property
    def usable(self) -> int:
        return sum(1 for c in self.candidates if not c.blocked)


@dataclass(slots=True)
class _Tally:
    """Why candidate devices were not usable for one request."""

    matched: int = 0
    in_class: int = 0
    class_name: str = ""
    counts: Counter[str] = field(default_factory=Counter)
    taints: Counter[str] = field(default_factory=Counter)
    incomplete_pools: list[str] = field(default_factory=list)
    invalid_pools: list[str] = field(default_factory=list)
    counters_short: list[str] = field(default_factory=list)  # why, per device short of counters (first few)
    capacity_short: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        if self.counts[REASON_TAINTED]:
            names = ", ".join(f"{t} not tolerated" for t in sorted(self.taints))
            parts.append(f"{self.counts[REASON_TAINTED]} tainted ({names})")
        if self.counts[REASON_ALLOCATED]:
            parts.append(f"{self.counts[REASON_ALLOCATED]} allocated")
        if self.counts[REASON_SELECTOR]:
            parts.append(f"{self.counts[REASON_SELECTOR]} not matching the request's selectors")
        if self.counts[REASON_COUNTERS]:
            why = "; ".join(self.counters_short[:3])
            parts.append(f"{self.counts[REASON_COUNTERS]} short of shared counters ({why})")
        if self.counts[REASON_CAPACITY]:
            why = "; ".join(self.capacity_short[:3])
            parts.append(f"{self.counts[REASON_CAPACITY]} without enough capacity left ({why})")
        if self.counts[REASON_FEATURE_DISABLED]:
            parts.append(f"{self.counts[REASON_FEATURE_DISABLED]} consuming shared counters, but DRAPartitionableDevices is disabled")
        if self.incomplete_pools:
            parts.append(f"pool {', '.join(self.incomplete_pools)} incomplete (being updated)")
        if self.invalid_pools:
            parts.append(f"pool {', '.join(self.invalid_pools)} invalid")
        if parts:
            return ", ".join(parts)
        if self.in_class:
            return f"only {self.in_class} devices of class {self.class_name} reachable from this node"
        return f"no devices of class {self.class_name} reachable from this node"


def _fewest_results(claim: ResourceClaim) -> int:
    """The fewest results any allocation of `claim` has (ExactCount counts; All and firstAvailable at least 1)."""
    total = 0
    for request in claim.requests:
        subs = [request.exactly] if request.exactly is not None else list(request.first_available)
        total += min((1 if sub.allocation_mode == MODE_ALL else sub.count for sub in subs), default=0)
    return total


class Allocator(Generic[SelectorT]):
    """Stateless apart from the selector engine, whose caches make repeated calls cheap."""

    def __init__(
        self,
        selectors: SelectorEngine[SelectorT],
        *,
        search_budget: int = DEFAULT_SEARCH_BUDGET,
        features: Features = DEFAULT_FEATURES,
    ) -> None:
        self._cel = selectors
        self.features = features
        self._budget = search_budget
        self.features = features
        # slice view -> selector set -> (in class, matches) per device
        self._selector_memo: weakref.WeakKeyDictionary[SliceView, _SelectorMemo] = weakref.WeakKeyDictionary()

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
        if isinstance(allocated, AllocatedState):
            state = allocated
        else:
            state = DedicatedOnly(allocated if callable(allocated) else allocated.__contains__)
        if not self.features.consumable_capacity:
            state = SharesFolded(state)
        used: list[DeviceView] = []
        # Already-allocated claims: they fit or they do not; never re-allocated.
        for claim in claims:
            if claim.allocation is None:
                continue
            failure = self._check_allocated(node, claim, lookup, used)
            if failure is not None:
                return Outcome(failure)
        pending = [c for c in claims if c.allocation is None]
        if not pending:
            return Outcome(None, {}, tuple(used))
        for claim in pending:
            if claim.meta.deletion_timestamp:
                return Outcome(Failure(REASON_CLAIM_UNUSABLE, f"claim {claim.key} is being deleted", claim.key))
            fewest = _fewest_results(claim)
            if fewest > ALLOCATION_RESULTS_MAX_SIZE:
                # Known before any search: no node can hold it (upstream checks the same bound).
                return Outcome(
                    Failure(
                        REASON_TOO_MANY,
                        f"claim {claim.key}: its requests ask for at least {fewest} devices, more than the "
                        f"{ALLOCATION_RESULTS_MAX_SIZE} one claim may hold",
                        claim.key,
                    )
                )
            if not self.features.consumable_capacity:
                disabled = _capacity_requests_disabled(claim)
                if disabled is not None:
                    return Outcome(disabled)
        pools = gather_pools(node, slices, self.features, pool_slices)
        avail: Availability = {}  # pool name -> counters left by allocated devices: the same for every tally of this call
        slots: list[_Slot] = []
        first = self._first_fit(pending, node, pools, classes, state, avail)
        if first is not None:
            slots.append(first)
        for ci, claim in enumerate(pending if first is None else ()):
            for request in claim.requests:
                slot_or_failure = self._build_slot(ci, claim, request, node, pools, classes, state, avail)
                if isinstance(slot_or_failure, Failure):
                    return Outcome(_with_invalid_pools(slot_or_failure, pools))
                slots.append(slot_or_failure)
        search = _Search(pending, slots, self._budget, state, any(p.counter_sets for p in pools), avail)
        solution = search.run()
        if solution is None:
            return Outcome(_with_invalid_pools(search.failure(), pools))
        allocations: dict[str, AllocationResult] = {}
        for ci, claim in enumerate(pending):
            picks = solution[ci]
            selector = _node_selector_for([p.candidate.device for p in picks], node.name, self.features.binding_conditions)
            if isinstance(selector, Failure):
                return Outcome(replace(selector, message=f"claim {claim.key}: {selector.message}", claim=claim.key))
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
            return Failure(
                REASON_NODE_MISMATCH,
                f"claim {claim.key} is allocated to devices not reachable from node {node.name}",
                claim.key,
            )
        for result in alloc.results:
            device = lookup(result.device_id)
            if device is None:
                continue
            used.append(device)
            tolerations = result.tolerations or _spec_tolerations(claim, result.request)
            bad = untolerated_no_execute_taints(device.taints, tolerations)
            if bad:
                return Failure(
                    REASON_NO_EXECUTE,
                    f"claim {claim.key}, request {result.request}: allocated device {result.device_id} has "
                    f"taint {', '.join(str(t) for t in bad)} not tolerated; a new pod may not use it",
                    claim.key,
                    result.request,
                )
        return None

    # ------------------------------------------------------------------ per-request candidates

    def _first_fit(
        self,
        pending: Sequence[ResourceClaim],
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> _Slot | None:
        """The slot of a pod's lone request, found as upstream's allocateOne does; None: take the full pass.

        One claim with one `exactly` request (ExactCount, no constraints, no
        admin access) is answered by its first `count` usable devices in pool
        order, which is what the search would pick from the full candidate
        list. So, as upstream, evaluate the selectors one device at a time and
        stop there: a never-seen request selector then costs a device or two
        per node instead of every device of every slice. A request for one
        device goes through upstream's checks in upstream's order (in use,
        selectors, capacity, counters charged, taints), so shared devices and
        partitions take this path too; for more devices, counters and shares
        make the picks depend on each other and the full search decides.
        Anything else, too few devices, or a selector error takes the full
        pass, which finds the same answer and explains a failure.
        """
        if len(pending) != 1:
            return None
        claim = pending[0]
        if len(claim.requests) != 1 or claim.constraints:
            return None
        request = claim.requests[0]
        req = request.exactly
        if req is None or req.allocation_mode == MODE_ALL or req.admin_access or req.count < 1:
            return None
        single = req.count == 1
        if req.capacity_requests and not single:
            return None
        device_class = classes.get(req.device_class_name)
        if device_class is None:
            return None
        try:
            class_selectors = [self._cel.compile(e) for e in device_class.selectors]
            request_selectors = [self._cel.compile(e) for e in req.selectors]
        except ValueError:
            return None
        evaluate = self._cel.evaluate
        is_taken = state.is_taken
        shares = self.features.consumable_capacity
        partitionable = self.features.partitionable_devices
        wanted = dict(req.capacity_requests)
        counters: CounterTally | None = None
        candidates: list[_Candidate] = []
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            available: Tally | None = None
            for s in pool.slices:
                for device in s.devices:
                    if (s.per_device_node_selection and not device.reachable_from(node)) or is_taken(device.id):
                        continue  # "in use" first, as upstream: a device in use is never evaluated
                    if device.binding_conditions and not self.features.binding_conditions:
                        continue  # upstream isSelectable: not selectable with the gate off
                    shared = shares and device.allow_multiple_allocations
                    if not single and (device.consumes_counters or shared):
                        return None  # picks interact through counters or shares: the full search decides
                    try:
                        if not all(evaluate(sel, device) for sel in class_selectors):
                            continue
                        if not all(evaluate(sel, device) for sel in request_selectors):
                            continue
                    except ValueError:
                        return None
                    amounts: cap.Amounts | None = None
                    committed = state.consumed_capacity(device.id) if shared else None
                    if shares and (wanted or shared or device.capacity_policies):
                        amounts = cap.request_amounts(wanted, device.driver, device.capacity, device.capacity_policies)
                        if amounts is None or not cap.fits(amounts, device.capacity, device.capacity_policies, committed, None):
                            continue
                    counted = False
                    if device.consumes_counters:
                        if not partitionable:
                            continue
                        if committed is None:
                            if counters is None:
                                counters = CounterTally(state, avail)
                            if available is None:
                                available = counters.available(pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices])
                            if not counters.charge(pool.name, available, device.consumes_counters):
                                continue
                        counted = True
                    if untolerated_blocking_taints(device.taints, req.tolerations):
                        continue  # its counters stay charged for the rest of the call, as upstream's do
                    candidates.append(_Candidate(device, pool if counted else None, shared, amounts))
                    if len(candidates) == req.count:
                        return _Slot(0, request.name, [_Alternative(request.name, req, device_class, req.count, candidates)])
        return None

    def _selector_flags(
        self, s: SliceView, class_selectors: Sequence[SelectorT], request_selectors: Sequence[SelectorT]
    ) -> tuple[tuple[bool, bool], ...] | None:
        """(in class, matches the request) per device of `s`; None if a selector fails on one of them."""
        # A filter asks the same question of every node's slices for each pod with the same
        # requests: answer it once per slice view (a view never changes; the memo goes with it).
        key = (tuple(c.expression for c in class_selectors), tuple(r.expression for r in request_selectors))
        memo = self._selector_memo.get(s)
        if memo is None:
            memo = self._selector_memo[s] = {}
        cached = memo.get(key)
        if cached is not None:
            return cached
        flags = []
        evaluate = self._cel.evaluate
        try:
            for device in s.devices:
                in_class = all(evaluate(sel, device) for sel in class_selectors)
                flags.append((in_class, in_class and all(evaluate(sel, device) for sel in request_selectors)))
        except ValueError:
            return None
        result = tuple(flags)
        if len(memo) >= SELECTOR_MEMO_PER_SLICE:
            memo.clear()  # many distinct request selectors: start over rather than grow
        memo[key] = result
        return result

    def _build_slot(
        self,
        ci: int,
        claim: ResourceClaim,
        request: DeviceRequest,
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> _Slot | Failure:
        subs = [request.exactly] if request.exactly is not None else list(request.first_available)
        alternatives: list[_Alternative] = []
        failures: list[tuple[str, Failure]] = []
        for sub in subs:
            result_name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
            alt = self._build_alternative(claim, result_name, sub, node, pools, classes, state, avail)
            if isinstance(alt, Failure):
                if alt.code in (REASON_SELECTOR_ERROR, REASON_CLASS_MISSING) and request.exactly is not None:
                    return alt
                failures.append((result_name, alt))
                continue
            alternatives.append(alt)
        if alternatives:
            return _Slot(ci, request.name, alternatives)
        if len(failures) == 1:
            return failures[0][1]
        detail = "; ".join(f"{name}: {f.message.split(': ', 1)[-1]}" for name, f in failures)
        return Failure(
            failures[0][1].code,
            f"claim {claim.key}, request {request.name}: no subrequest can be satisfied: {detail}",
            claim.key,
            request.name,
        )

    def _build_alternative(
        self,
        claim: ResourceClaim,
        result_name: str,
        req: ExactRequest,
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> _Alternative | Failure:
        where = f"claim {claim.key}, request {result_name}"
        device_class = classes.get(req.device_class_name)
        if device_class is None:
            return Failure(REASON_CLASS_MISSING, f"{where}: device class {req.device_class_name} not found", claim.key, result_name)
        try:
            class_selectors = [self._cel.compile(e) for e in device_class.selectors]
        except ValueError as e:  # CelCompileError names the expression and the reason
            return Failure(
                REASON_SELECTOR_ERROR,
                f"{where}: device class {device_class.meta.name}: {e}",
                claim.key,
                result_name,
                device_class.meta.name,
            )
        try:
            request_selectors = [self._cel.compile(e) for e in req.selectors]
        except ValueError as e:
            return Failure(REASON_SELECTOR_ERROR, f"{where}: {e}", claim.key, result_name)
        tally = _Tally(class_name=device_class.meta.name)
        candidates: list[_Candidate] = []
        all_mode = req.allocation_mode == MODE_ALL
        partitionable = self.features.partitionable_devices
        shares = self.features.consumable_capacity
        counters = CounterTally(state, avail)  # availability only: charges happen in the search
        for pool in pools:
            if pool.incomplete or pool.invalid:
                if all_mode:
                    state_text = "is currently being updated" if pool.incomplete else f"is currently invalid ({pool.invalid})"
                    return Failure(
                        REASON_POOL_INCOMPLETE if pool.incomplete else REASON_POOL_INVALID,
                        f"{where}: asks for all devices, but resource pool {pool.id} {state_text}",
                        claim.key,
                        result_name,
                    )
                (tally.incomplete_pools if pool.incomplete else tally.invalid_pools).append(pool.id)
                continue
            available: Tally | None = None
            for s in pool.slices:
                flags = self._selector_flags(s, class_selectors, request_selectors)
                for index, device in enumerate(s.devices):
                    if s.per_device_node_selection and not device.reachable_from(node):
                        continue
                    if device.binding_conditions and not self.features.binding_conditions:
                        continue  # upstream isSelectable: not selectable with the gate off
                    if flags is not None:
                        in_class, matches = flags[index]
                    else:  # some selector fails on this slice: find which, for the reason
                        try:
                            in_class = all(self._cel.evaluate(sel, device) for sel in class_selectors)
                        except ValueError as e:  # CelRuntimeError names the expression and the cause
                            return Failure(
                                REASON_SELECTOR_ERROR,
                                f"{where}: device class {device_class.meta.name}, device {device.id}: {e}",
                                claim.key,
                                result_name,
                                device_class.meta.name,
                            )
                        try:
                            matches = in_class and all(self._cel.evaluate(sel, device) for sel in request_selectors)
                        except ValueError as e:
                            return Failure(REASON_SELECTOR_ERROR, f"{where}: device {device.id}: {e}", claim.key, result_name)
                    if not in_class:
                        continue  # another kind of device: not worth mentioning
                    tally.in_class += 1
                    if not matches:
                        tally.counts[REASON_SELECTOR] += 1
                        continue
                    tally.matched += 1
                    shared = shares and device.allow_multiple_allocations
                    amounts: cap.Amounts | None = None
                    # A whole device without a request policy always holds a request without capacity requests.
                    if shares and (req.capacity_requests or shared or device.capacity_policies):
                        amounts = cap.request_amounts(dict(req.capacity_requests), device.driver, device.capacity, device.capacity_policies)
                        committed = state.consumed_capacity(device.id)
                        if amounts is None or not cap.fits(amounts, device.capacity, device.capacity_policies, committed, None):
                            # Upstream skips such a device, in mode All too (it is then not part of "all").
                            tally.counts[REASON_CAPACITY] += 1
                            if len(tally.capacity_short) < 3:
                                tally.capacity_short.append(
                                    f"{device.id}: lacks a requested capacity"
                                    if amounts is None
                                    else f"{device.id}: {cap.left(device.capacity, committed)}"
                                )
                            continue
                    if device.consumes_counters and not partitionable:
                        tally.counts[REASON_FEATURE_DISABLED] += 1
                        if not all_mode:
                            continue
                    bad = untolerated_blocking_taints(device.taints, req.tolerations)
                    in_use = not req.admin_access and state.is_taken(device.id)
                    if in_use:
                        tally.counts[REASON_ALLOCATED] += 1
                        if not all_mode:
                            continue
                    elif bad:
                        tally.counts[REASON_TAINTED] += 1
                        tally.taints.update(str(t) for t in bad)
                    counted = device.consumes_counters and partitionable
                    if counted and not all_mode and not (shared and state.consumed_capacity(device.id) is not None):
                        if available is None:
                            available = counters.available(pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices])
                        if not counters.would_fit_alone(pool.name, available, device.consumes_counters):
                            if not bad:
                                tally.counts[REASON_COUNTERS] += 1
                                if len(tally.counters_short) < 3:
                                    tally.counters_short.append(f"{device.id}: {describe_short(available, device.consumes_counters)}")
                            continue
                    if bad and not all_mode:
                        if counted:
                            # Never taken, but upstream charges its counters before it looks at taints.
                            candidates.append(_Candidate(device, pool, shared, amounts, blocked=True))
                        continue
                    candidates.append(_Candidate(device, pool if counted else None, shared, amounts))
        if all_mode:
            bad_count = tally.counts[REASON_TAINTED] + tally.counts[REASON_ALLOCATED] + tally.counts[REASON_FEATURE_DISABLED]
            if bad_count or not candidates:
                code = (
                    REASON_TAINTED
                    if tally.counts[REASON_TAINTED]
                    else REASON_ALLOCATED
                    if tally.counts[REASON_ALLOCATED]
                    else REASON_FEATURE_DISABLED
                    if tally.counts[REASON_FEATURE_DISABLED]
                    else REASON_NO_DEVICES
                )
                return Failure(
                    code,
                    f"{where}: asks for all {tally.matched} matching devices, "
                    f"{len(candidates) - bad_count} available: "
                    f"{tally.describe() if tally.matched or tally.counts else 'no matching devices on this node'}",
                    claim.key,
                    result_name,
                )
            if len(candidates) > ALLOCATION_RESULTS_MAX_SIZE:
                return Failure(
                    REASON_TOO_MANY,
                    f"{where}: asks for all devices, {len(candidates)} match, "
                    f"more than the {ALLOCATION_RESULTS_MAX_SIZE} one claim may hold",
                    claim.key,
                    result_name,
                )
            return _Alternative(result_name, req, device_class, len(candidates), candidates, all_mode=True)
        usable = sum(1 for c in candidates if not c.blocked)
        if usable < req.count:
            if tally.counts[REASON_TAINTED]:
                code = REASON_TAINTED
            elif tally.counts[REASON_ALLOCATED]:
                code = REASON_ALLOCATED
            elif tally.counts[REASON_COUNTERS]:
                code = REASON_COUNTERS
            elif tally.counts[REASON_CAPACITY]:
                code = REASON_CAPACITY
            elif tally.incomplete_pools or tally.invalid_pools:
                code = REASON_POOL_INCOMPLETE
            elif tally.counts[REASON_SELECTOR]:
                code = REASON_SELECTOR
            elif tally.counts[REASON_FEATURE_DISABLED]:
                code = REASON_FEATURE_DISABLED
            else:
                code = REASON_NO_DEVICES
            return Failure(
                code,
                f"{where}: {usable} of {req.count} devices available: {tally.describe()}",
                claim.key,
                result_name,
            )
        return _Alternative(result_name, req, device_class, req.count, candidates)


def _capacity_requests_disabled(claim: ResourceClaim) -> Failure | None:
    """Upstream refuses a claim with capacity requests outright when DRAConsumableCapacity is off."""
    for request in claim.requests:
        if request.exactly is not None and request.exactly.capacity_requests:
            return Failure(
                REASON_FEATURE_DISABLED,
                f"claim {claim.key}, request {request.name}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                claim.key,
                request.name,
            )
        for sub in request.first_available:
            if sub.capacity_requests:
                return Failure(
                    REASON_FEATURE_DISABLED,
                    f"claim {claim.key}, subrequest {sub.name}: has capacity requests, but the DRAConsumableCapacity feature is disabled",
                    claim.key,
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
    return replace(
        failure,
        code=REASON_POOL_INVALID,
        message=f"invalid resource pools were encountered ({'; '.join(invalid)}); {failure.message}",
    )


def _spec_tolerations(claim: ResourceClaim, result_request: str) -> tuple[DeviceToleration, ...]:
    """A request's tolerations from the claim spec, for results written without them."""
    parent, _, sub = result_request.partition("/")
    for request in claim.requests:
        if request.name != parent:
            continue
        if request.exactly is not None:
            return request.exactly.tolerations
        for s in request.first_available:
            if s.name == sub:
                return s.tolerations
    return ()


@dataclass(slots=True)
class _Pick:
    result_name: str
    candidate: _Candidate
    request: ExactRequest


class _Search:
    """Depth-first search with backtracking over all slots of all pending claims.

    Counters, shared capacity and constraints are tracked as picks are made
    and taken back, in upstream's order: in use, capacity, counters (charged),
    taints, constraints.
    """

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        slots: list[_Slot],
        budget: int,
        state: AllocatedState,
        counters_in_play: bool,
        avail: Availability,
    ) -> None:
        self.claims = claims
        self.slots = slots
        self.budget = budget
        self.state = state
        self.steps = 0
        self.picks: list[list[_Pick]] = [[] for _ in claims]
        self.classes_used: list[list[tuple[str, DeviceClass]]] = [[] for _ in claims]
        self.picked: dict[DeviceID, int] = {}  # device taken whole -> claim index
        self.constraints = [cons.build(c.constraints) for c in claims]
        self.counters = CounterTally(state, avail)
        self.available: dict[int, Tally] = {}  # id(pool) -> its availability
        self.allocating: dict[DeviceID, dict[str, Fraction]] = {}  # shared device -> capacity taken in this call
        # With counters, every candidate is tried (upstream has no early cut-off, and charges leak).
        self.exhaustive = counters_in_play
        self.constraint_blocked = 0
        self.counter_blocked = 0
        self.capacity_blocked = 0
        self.shortage: tuple[_Slot, _Alternative] | None = None
        self.exhausted = False

    def run(self) -> list[list[_Pick]] | None:
        return [list(p) for p in self.picks] if self._slot(0) else None

    def _slot(self, i: int) -> bool:
        if i == len(self.slots):
            return True
        slot = self.slots[i]
        for alt in slot.alternatives:
            self.classes_used[slot.claim_index].append((alt.result_name, alt.device_class))
            if self._pick(i, slot, alt, 0, 0):
                return True
            self.classes_used[slot.claim_index].pop()
            if self.exhausted:
                return False
        return False

    def _pick(self, i: int, slot: _Slot, alt: _Alternative, n: int, start: int) -> bool:
        if n == alt.count:
            return self._slot(i + 1)
        ci = slot.claim_index
        picks = self.picks[ci]
        if len(picks) >= ALLOCATION_RESULTS_MAX_SIZE:
            return False
        candidates = alt.candidates
        admin = alt.request.admin_access
        parent, _, sub = alt.result_name.partition("/")
        constraints = self.constraints[ci]
        # Without counters, stop where too few candidates are left to finish the request.
        end = len(candidates) if self.exhaustive else len(candidates) - (alt.count - n) + 1
        for pos in range(start, end):
            self.steps += 1
            if self.steps > self.budget:
                self.exhausted = True
                return False
            candidate = candidates[pos]
            device = candidate.device
            did = device.id
            shared = candidate.shared
            if not shared:
                owner = self.picked.get(did)
                if owner is not None and (not admin or owner == ci):
                    continue
            else:
                owner = None
            allocating = self.allocating.get(did) if shared else None
            if candidate.amounts is not None and allocating is not None:
                committed = self.state.consumed_capacity(did)
                if not cap.fits(candidate.amounts, device.capacity, device.capacity_policies, committed, allocating):
                    self.capacity_blocked += 1
                    continue
            pool = candidate.pool
            charged = False
            if pool is not None and not (shared and (allocating is not None or self.state.consumed_capacity(did) is not None)):
                available = self.available.get(id(pool))
                if available is None:
                    available = self.available[id(pool)] = self.counters.available(
                        pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices]
                    )
                if not self.counters.charge(pool.name, available, device.consumes_counters):
                    self.counter_blocked += 1
                    continue
                charged = True
            if candidate.blocked:
                continue  # tainted: its counters stay charged for the rest of the call, as upstream's do
            added = 0
            for c in constraints:
                if not c.add(parent, sub, device):
                    break
                added += 1
            if added < len(constraints):
                for c in constraints[:added]:
                    c.remove(parent, sub, device)
                self.constraint_blocked += 1
                continue  # counters charged above stay charged, as upstream's do
            picks.append(_Pick(alt.result_name, candidate, alt.request))
            fresh = not shared and owner is None
            if fresh:
                self.picked[did] = ci
            if shared:
                taken = self.allocating.setdefault(did, {})
                for name, amount in (candidate.amounts or {}).items():
                    taken[name] = taken.get(name, Fraction(0)) + amount
            if self._pick(i, slot, alt, n + 1, pos + 1):
                return True
            picks.pop()
            for c in constraints:
                c.remove(parent, sub, device)
            if fresh:
                del self.picked[did]
            if shared:
                if candidate.amounts:  # upstream leaves an empty entry behind for a device without capacity
                    taken = self.allocating[did]
                    for name, amount in candidate.amounts.items():
                        taken[name] -= amount
                    if all(v == 0 for v in taken.values()):
                        del self.allocating[did]
            elif charged and pool is not None:
                self.counters.release(pool.name, device.consumes_counters)
            if self.exhausted:
                return False
        if self.shortage is None and not self.constraint_blocked:
            self.shortage = (slot, alt)
        return False

    def failure(self) -> Failure:
        if self.exhausted:
            return Failure(
                REASON_SEARCH_LIMIT,
                f"gave up after {self.budget} allocation steps: the constraints of "
                f"{', '.join(c.key for c in self.claims)} admit too many combinations on this node",
            )
        constrained = [c for c in self.claims if c.constraints]
        if self.constraint_blocked and constrained:
            c = constrained[0]
            what = "; ".join(
                f"{'matchAttribute' if k.match_attribute else 'distinctAttribute'} "
                f"{k.match_attribute or k.distinct_attribute}" + (f" on requests {', '.join(k.requests)}" if k.requests else "")
                for k in c.constraints
            )
            return Failure(
                REASON_CONSTRAINTS,
                f"claim {c.key}: no combination of available devices satisfies the constraints ({what})",
                c.key,
            )
        if self.shortage is not None:
            slot, alt = self.shortage
            claim = self.claims[slot.claim_index]
            if self.counter_blocked:
                return Failure(
                    REASON_COUNTERS,
                    f"claim {claim.key}, request {alt.result_name}: {alt.usable} devices usable, but the shared "
                    f"counters of their pools do not cover {alt.count} of them together with the other picks of this pod",
                    claim.key,
                    alt.result_name,
                )
            if self.capacity_blocked:
                return Failure(
                    REASON_CAPACITY,
                    f"claim {claim.key}, request {alt.result_name}: {alt.usable} devices usable, but not enough "
                    f"capacity is left on them for {alt.count} together with the other picks of this pod",
                    claim.key,
                    alt.result_name,
                )
            return Failure(
                REASON_ALLOCATED,
                f"claim {claim.key}, request {alt.result_name}: {alt.usable} devices usable, but "
                f"not enough left for {alt.count} after the devices picked for other requests of this pod",
                claim.key,
                alt.result_name,
            )
        return Failure(REASON_NO_DEVICES, "no allocation found for the pod's claims on this node")


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
                return Failure(REASON_NO_DEVICES, f"create NodeSelector: unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
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
    picks: list[_Pick],
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
