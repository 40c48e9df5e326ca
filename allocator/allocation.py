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

import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from allocator.device_view import DeviceView, SliceView
from allocator.features import DEFAULT_FEATURES, Features
from allocator.node_selection import node_name_selector, node_selector_matches
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
class _Pool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices: list[SliceView]
    incomplete: bool = False
    invalid: str = ""


def gather_pools(node: Node, slices: Iterable[SliceView]) -> list[_Pool]:
    """Upstream GatherPools: newest generation per pool among slices reaching `node`."""
    pools: dict[tuple[str, str], _Pool] = {}
    for s in slices:
        if not s.reachable_from(node):
            continue
        key = (s.driver, s.pool)
        pool = pools.get(key)
        if pool is None or s.generation > pool.generation:
            pools[key] = _Pool(s.driver, s.pool, s.generation, s.resource_slice_count, [s])
        elif s.generation == pool.generation:
            pool.slices.append(s)
    # Pools with devices that have binding conditions go last (upstream GatherPools): such devices
    # delay the pod's binding, so every other pool is tried first.
    out = sorted(pools.values(), key=lambda p: (_has_binding_conditions(p), p.driver, p.name))
    for pool in out:
        pool.slices.sort(key=lambda s: s.name)
        pool.incomplete = len(pool.slices) != pool.slices[0].resource_slice_count
        seen: set[str] = set()
        for s in pool.slices:
            for d in s.devices:
                if d.name in seen:
                    pool.invalid = f"duplicate device name {d.name!r}"
                seen.add(d.name)
    return out


def _has_binding_conditions(pool: _Pool) -> bool:
    return any(d.binding_conditions for s in pool.slices if s.node_name is not None or s.per_device_node_selection for d in s.devices)


@dataclass(slots=True)
class _Slot:
    """One request of one claim (with its alternatives for firstAvailable)."""

    claim_index: int
    request_name: str
    alternatives: list[_Alternative]


@dataclass(slots=True)
class _Alternative:
    """A concrete way to satisfy a slot: `exactly` or one subrequest."""

    result_name: str  # "req" or "req/sub"
    request: ExactRequest
    device_class: DeviceClass
    count: int
    candidates: list[DeviceView]  # usable devices, pool order
    all_mode: bool = False


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

    def describe(self) -> str:
        parts = []
        if self.counts[REASON_TAINTED]:
            names = ", ".join(f"{t} not tolerated" for t in sorted(self.taints))
            parts.append(f"{self.counts[REASON_TAINTED]} tainted ({names})")
        if self.counts[REASON_ALLOCATED]:
            parts.append(f"{self.counts[REASON_ALLOCATED]} allocated")
        if self.counts[REASON_SELECTOR]:
            parts.append(f"{self.counts[REASON_SELECTOR]} not matching the request's selectors")
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
        self, selectors: SelectorEngine[SelectorT], *, search_budget: int = DEFAULT_SEARCH_BUDGET, features: Features = DEFAULT_FEATURES
    ) -> None:
        self._cel = selectors
        self._features = features
        self._budget = search_budget
        # slice view -> selector set -> (in class, matches) per device
        self._selector_memo: weakref.WeakKeyDictionary[SliceView, _SelectorMemo] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ entry point

    def allocate(
        self,
        node: Node,
        claims: Sequence[ResourceClaim],
        slices: Iterable[SliceView],
        classes: Mapping[str, DeviceClass],
        allocated: Callable[[DeviceID], bool] | frozenset[DeviceID] | set[DeviceID],
        lookup: Callable[[DeviceID], DeviceView | None] = lambda _id: None,
        *,
        timestamp: str = "",
    ) -> Outcome:
        """Decide whether `claims` (one pod's, in pod order) fit on `node`.

        `allocated` says which devices other claims hold (or have in flight);
        `lookup` finds the current view of an already-allocated device so its
        taints can be checked.
        """
        is_allocated = allocated if callable(allocated) else allocated.__contains__
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
        pools = gather_pools(node, slices)
        slots: list[_Slot] = []
        first = self._first_fit(pending, node, pools, classes, is_allocated)
        if first is not None:
            slots.append(first)
        for ci, claim in enumerate(pending if first is None else ()):
            for request in claim.requests:
                slot_or_failure = self._build_slot(ci, claim, request, node, pools, classes, is_allocated)
                if isinstance(slot_or_failure, Failure):
                    return Outcome(slot_or_failure)
                slots.append(slot_or_failure)
        search = _Search(pending, slots, self._budget)
        solution = search.run()
        if solution is None:
            return Outcome(search.failure())
        allocations: dict[str, AllocationResult] = {}
        for ci, claim in enumerate(pending):
            picks = solution[ci]
            allocations[claim.key] = _result(claim, picks, search.classes_used[ci], timestamp, node.name, self._features)
            used.extend(d for _, d, _ in picks)
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
        pools: list[_Pool],
        classes: Mapping[str, DeviceClass],
        is_allocated: Callable[[DeviceID], bool],
    ) -> _Slot | None:
        """The slot of a pod's lone request, found as upstream's allocateOne does; None: take the full pass.

        One claim with one `exactly` request (ExactCount, no constraints, no
        admin access) is answered by its first `count` usable devices in pool
        order, which is what the search would pick from the full candidate
        list. So, as upstream, evaluate the selectors one device at a time
        and stop there: a never-seen request selector then costs a device or
        two per node instead of every device of every slice. Anything else,
        too few devices, or a selector error takes the full pass, which finds
        the same answer and explains a failure.
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
        device_class = classes.get(req.device_class_name)
        if device_class is None:
            return None
        try:
            class_selectors = [self._cel.compile(e) for e in device_class.selectors]
            request_selectors = [self._cel.compile(e) for e in req.selectors]
        except ValueError:
            return None
        evaluate = self._cel.evaluate
        candidates: list[DeviceView] = []
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            for s in pool.slices:
                for device in s.devices:
                    if (s.per_device_node_selection and not device.reachable_from(node)) or is_allocated(device.id):
                        continue  # "in use" first, as upstream: a device in use is never evaluated
                    if device.binding_conditions and not self._features.binding_conditions:
                        continue  # upstream isSelectable: not selectable with the gate off
                    try:
                        if not all(evaluate(sel, device) for sel in class_selectors):
                            continue
                        if not all(evaluate(sel, device) for sel in request_selectors):
                            continue
                    except ValueError:
                        return None
                    if untolerated_blocking_taints(device.taints, req.tolerations):
                        continue
                    candidates.append(device)
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
        pools: list[_Pool],
        classes: Mapping[str, DeviceClass],
        is_allocated: Callable[[DeviceID], bool],
    ) -> _Slot | Failure:
        subs = [request.exactly] if request.exactly is not None else list(request.first_available)
        alternatives: list[_Alternative] = []
        failures: list[tuple[str, Failure]] = []
        for sub in subs:
            result_name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
            alt = self._build_alternative(claim, result_name, sub, node, pools, classes, is_allocated)
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
        pools: list[_Pool],
        classes: Mapping[str, DeviceClass],
        is_allocated: Callable[[DeviceID], bool],
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
        candidates: list[DeviceView] = []
        all_mode = req.allocation_mode == MODE_ALL
        for pool in pools:
            if pool.incomplete or pool.invalid:
                if all_mode:
                    state = "is being updated (incomplete)" if pool.incomplete else f"is invalid: {pool.invalid}"
                    return Failure(
                        REASON_POOL_INCOMPLETE,
                        f"{where}: asks for all devices, but pool {pool.driver}/{pool.name} {state}",
                        claim.key,
                        result_name,
                    )
                (tally.incomplete_pools if pool.incomplete else tally.invalid_pools).append(f"{pool.driver}/{pool.name}")
                continue
            for s in pool.slices:
                flags = self._selector_flags(s, class_selectors, request_selectors)
                for index, device in enumerate(s.devices):
                    if s.per_device_node_selection and not device.reachable_from(node):
                        continue
                    if device.binding_conditions and not self._features.binding_conditions:
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
                    bad = untolerated_blocking_taints(device.taints, req.tolerations)
                    if bad:
                        tally.counts[REASON_TAINTED] += 1
                        tally.taints.update(str(t) for t in bad)
                        if not all_mode:
                            continue
                    elif not req.admin_access and is_allocated(device.id):
                        tally.counts[REASON_ALLOCATED] += 1
                        if not all_mode:
                            continue
                    candidates.append(device)
        if all_mode:
            if tally.counts[REASON_TAINTED] or tally.counts[REASON_ALLOCATED] or not tally.matched:
                code = (
                    REASON_TAINTED
                    if tally.counts[REASON_TAINTED]
                    else REASON_ALLOCATED
                    if tally.counts[REASON_ALLOCATED]
                    else REASON_NO_DEVICES
                )
                return Failure(
                    code,
                    f"{where}: asks for all {tally.matched} matching devices, "
                    f"{tally.matched - tally.counts[REASON_TAINTED] - tally.counts[REASON_ALLOCATED]} available: "
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
        if len(candidates) < req.count:
            if tally.counts[REASON_TAINTED]:
                code = REASON_TAINTED
            elif tally.counts[REASON_ALLOCATED]:
                code = REASON_ALLOCATED
            elif tally.incomplete_pools or tally.invalid_pools:
                code = REASON_POOL_INCOMPLETE
            elif tally.counts[REASON_SELECTOR]:
                code = REASON_SELECTOR
            else:
                code = REASON_NO_DEVICES
            return Failure(
                code,
                f"{where}: {len(candidates)} of {req.count} devices available: {tally.describe()}",
                claim.key,
                result_name,
            )
        return _Alternative(result_name, req, device_class, req.count, candidates)


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


class _Search:
    """Depth-first search with backtracking over all slots of all pending claims."""

    def __init__(self, claims: Sequence[ResourceClaim], slots: list[_Slot], budget: int) -> None:
        self.claims = claims
        self.slots = slots
        self.budget = budget
        self.steps = 0
        # per claim: (result name, device, request) in pick order
        self.picks: list[list[tuple[str, DeviceView, ExactRequest]]] = [[] for _ in claims]
        self.classes_used: list[list[tuple[str, DeviceClass]]] = [[] for _ in claims]
        self.picked: dict[DeviceID, int] = {}  # device -> claim index
        self.constraint_blocked = 0
        self.shortage: tuple[_Slot, _Alternative] | None = None
        self.exhausted = False

    def run(self) -> list[list[tuple[str, DeviceView, ExactRequest]]] | None:
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
        # Not enough candidates left to finish this request from here on.
        for pos in range(start, len(candidates) - (alt.count - n) + 1):
            self.steps += 1
            if self.steps > self.budget:
                self.exhausted = True
                return False
            device = candidates[pos]
            owner = self.picked.get(device.id)
            if owner is not None and (not alt.request.admin_access or owner == ci):
                continue
            if not self._constraints_ok(ci, alt.result_name, device):
                self.constraint_blocked += 1
                continue
            picks.append((alt.result_name, device, alt.request))
            fresh = owner is None
            if fresh:
                self.picked[device.id] = ci
            if self._pick(i, slot, alt, n + 1, pos + 1):
                return True
            picks.pop()
            if fresh:
                del self.picked[device.id]
            if self.exhausted:
                return False
        if self.shortage is None and not self.constraint_blocked:
            self.shortage = (slot, alt)
        return False

    def _constraints_ok(self, ci: int, result_name: str, device: DeviceView) -> bool:
        claim = self.claims[ci]
        if not claim.constraints:
            return True
        parent = result_name.split("/", 1)[0]
        for c in claim.constraints:
            if c.requests and parent not in c.requests and result_name not in c.requests:
                continue
            attr = c.match_attribute or c.distinct_attribute
            assert attr is not None
            value = device.attributes.get(attr)
            if value is None:
                return False  # upstream: a device without the attribute cannot satisfy the constraint
            for name, other, _ in self.picks[ci]:
                if c.requests and name.split("/", 1)[0] not in c.requests and name not in c.requests:
                    continue
                other_value = other.attributes.get(attr)
                if c.match_attribute is not None and (other_value != value or type(other_value) is not type(value)):
                    return False
                if c.distinct_attribute is not None and other_value == value and type(other_value) is type(value):
                    return False
        return True

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
            return Failure(
                REASON_ALLOCATED,
                f"claim {claim.key}, request {alt.result_name}: {len(alt.candidates)} devices usable, but "
                f"not enough left for {alt.count} after the devices picked for other requests of this pod",
                claim.key,
                alt.result_name,
            )
        return Failure(REASON_NO_DEVICES, "no allocation found for the pod's claims on this node")


def _node_selector_for(devices: Sequence[DeviceView], node_name: str = "", binds_to_node: bool = False) -> NodeSelector | None:
    """Upstream createNodeSelector: node-local wins (as does a device that binds to the node); selectors merge into one term."""
    expressions: list[NodeSelectorRequirement] = []
    fields_: list[NodeSelectorRequirement] = []
    for d in devices:
        if d.node_name is not None:
            return node_name_selector(d.node_name)
        if binds_to_node and d.binds_to_node and node_name:
            return node_name_selector(node_name)
        if d.node_selector is not None and d.node_selector.terms:
            term = d.node_selector.terms[0]
            expressions.extend(term.match_expressions)
            fields_.extend(term.match_fields)
    if expressions or fields_:
        return NodeSelector((NodeSelectorTerm(tuple(expressions), tuple(fields_)),))
    return None


def _result(
    claim: ResourceClaim,
    picks: list[tuple[str, DeviceView, ExactRequest]],
    classes_used: list[tuple[str, DeviceClass]],
    timestamp: str,
    node_name: str = "",
    features: Features = DEFAULT_FEATURES,
) -> AllocationResult:
    binding = features.binding_conditions
    results = tuple(
        DeviceRequestAllocationResult(
            request=name,
            driver=d.id.driver,
            pool=d.id.pool,
            device=d.id.device,
            admin_access=True if req.admin_access else None,
            # Copied so NoExecute tolerations survive scheduling (kubernetes#134434).
            tolerations=req.tolerations,
            binding_conditions=d.binding_conditions if binding else (),
            binding_failure_conditions=d.binding_failure_conditions if binding else (),
        )
        for name, d, req in picks
    )
    config: list[AllocatedConfig] = []
    for name, device_class in classes_used:
        for c in device_class.config:
            config.append(AllocatedConfig("FromClass", c.opaque, (name,)))
    for c in claim.config:
        config.append(AllocatedConfig("FromClaim", c.opaque, c.requests))
    return AllocationResult(results, tuple(config), _node_selector_for([d for _, d, _ in picks], node_name, binding), timestamp)
