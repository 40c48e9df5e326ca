"""Which devices each request of a pod's claims may take on one node.

The first half of upstream's allocator: for every request (and each
firstAvailable subrequest) the devices of the node's pools in pool order,
checked in upstream's order (reachable, selectable, selectors, in use,
capacity, counters, taints). What is left is a `Slot` of `Alternative`s for
the search (allocator/search.py); what was rejected, and why, is counted in
`Rejections`, so a node that does not fit says so in words.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from allocator import capacity as cap
from allocator.allocated_state import AllocatedState
from allocator.counters import Availability, CounterTally, Tally, describe_short
from allocator.device_view import DeviceView, SliceView
from allocator.failures import (
    REASON_ALLOCATED,
    REASON_CAPACITY,
    REASON_CLASS_MISSING,
    REASON_COUNTERS,
    REASON_DEVICE_REFUSED,
    REASON_FEATURE_DISABLED,
    REASON_NO_DEVICES,
    REASON_POOL_INCOMPLETE,
    REASON_POOL_INVALID,
    REASON_SELECTOR,
    REASON_SELECTOR_ERROR,
    REASON_TAINTED,
    REASON_TOO_MANY,
    Failure,
    of_claim,
)
from allocator.features import Features
from allocator.pools import Pool
from allocator.tolerations import untolerated_blocking_taints
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    DeviceClass,
    DeviceRequest,
    ExactRequest,
    Node,
    ResourceClaim,
)

SELECTOR_MEMO_PER_SLICE = 64  # distinct (class, request) selector sets remembered per slice view

# (class selector expressions, request selector expressions) -> (in class, matches the request) per device
_SelectorMemo = dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[bool, bool], ...]]


class Selector(Protocol):
    """A compiled CEL selector: the allocator only needs its source text (for memo keys)."""

    @property
    def expression(self) -> str: ...


SelectorT = TypeVar("SelectorT", bound=Selector)


class SelectorEngine(Protocol[SelectorT]):
    """Compiles and evaluates CEL selectors; raises ValueError (naming the
    expression and the cause) on a compile or runtime error."""

    def compile(self, expression: str) -> SelectorT: ...

    def evaluate(self, selector: SelectorT, device: DeviceView) -> bool: ...

    def forget(self, cel_key: Hashable) -> None:
        """Drop what is cached for a device (its CEL activation); called when its view is replaced."""
        return None

    @property
    def stats(self) -> dict[str, int]:
        """Cumulative counters and cache sizes, for metrics (allocator/cel/engine.py names them)."""
        ...


@dataclass(slots=True)
class Candidate:
    """A device a request may take, with what taking it involves."""

    device: DeviceView
    pool: Pool | None = None  # set when the device consumes counters (and DRAPartitionableDevices is on)
    shared: bool = False  # allows multiple allocations (and DRAConsumableCapacity is on)
    amounts: cap.Amounts | None = None  # what the request consumes of its capacities (DRAConsumableCapacity)
    blocked: bool = False  # an untolerated taint: never taken, but its counters are charged first, as upstream


@dataclass(slots=True)
class Alternative:
    """A concrete way to satisfy a slot: `exactly` or one subrequest."""

    result_name: str  # "req" or "req/sub"
    request: ExactRequest
    device_class: DeviceClass
    count: int
    candidates: list[Candidate]  # pool order; `usable` of them are not blocked
    all_mode: bool = False

    @property
    def usable(self) -> int:
        return sum(1 for c in self.candidates if not c.blocked)


@dataclass(slots=True)
class Slot:
    """One request of one claim (with its alternatives for firstAvailable)."""

    claim_index: int
    request_name: str
    alternatives: list[Alternative]


# Which rejection names a count request's failure, most telling first.
_SHORT_CODES = (REASON_TAINTED, REASON_ALLOCATED, REASON_COUNTERS, REASON_CAPACITY, REASON_DEVICE_REFUSED)


@dataclass(slots=True)
class Rejections:
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
    refused: list[str] = field(default_factory=list)  # why, per refused device (first few)

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
        if self.counts[REASON_DEVICE_REFUSED]:
            why = "; ".join(self.refused[:3])
            parts.append(f"{self.counts[REASON_DEVICE_REFUSED]} refused ({why})")
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

    def all_mode_code(self) -> str:
        for code in (REASON_TAINTED, REASON_ALLOCATED, REASON_DEVICE_REFUSED, REASON_FEATURE_DISABLED):
            if self.counts[code]:
                return code
        return REASON_NO_DEVICES

    def count_code(self) -> str:
        for code in _SHORT_CODES:
            if self.counts[code]:
                return code
        if self.incomplete_pools or self.invalid_pools:
            return REASON_POOL_INCOMPLETE
        for code in (REASON_SELECTOR, REASON_FEATURE_DISABLED):
            if self.counts[code]:
                return code
        return REASON_NO_DEVICES


def selectable(s: SliceView, device: DeviceView, node: Node, features: Features) -> bool:
    """Reachable from the node, and not a device upstream's isSelectable hides (binding conditions, gate off)."""
    if s.per_device_node_selection and not device.reachable_from(node):
        return False
    return not (device.binding_conditions and not features.binding_conditions)


@dataclass(slots=True)
class _Scan:
    """The candidates of one (sub)request on one node, and why the others were rejected."""

    claim_key: str
    result_name: str
    req: ExactRequest
    state: AllocatedState
    features: Features
    counters: CounterTally  # availability only: charges happen in the search
    rejected: Rejections
    candidates: list[Candidate] = field(default_factory=list)
    pool: Pool | None = None
    available: Tally | None = None  # the current pool's counters left, computed on first need

    @property
    def all_mode(self) -> bool:
        return self.req.allocation_mode == MODE_ALL

    def fail(self, code: str, text: str, device_class: str = "") -> Failure:
        """A failure of this (sub)request: "claim <key>, request <name>: <text>"."""
        return of_claim(code, self.claim_key, f", request {self.result_name}: {text}", self.result_name, device_class)

    def unusable_pool(self, pool: Pool) -> Failure | None:
        """Note a pool that is being updated or invalid; mode All fails, as it cannot see the pool whole."""
        if self.all_mode:
            state_text = "is currently being updated" if pool.incomplete else f"is currently invalid ({pool.invalid})"
            code = REASON_POOL_INCOMPLETE if pool.incomplete else REASON_POOL_INVALID
            return self.fail(code, f"asks for all devices, but resource pool {pool.id} {state_text}")
        (self.rejected.incomplete_pools if pool.incomplete else self.rejected.invalid_pools).append(pool.id)
        return None

    def enter(self, pool: Pool) -> None:
        self.pool, self.available = pool, None

    def consider(self, device: DeviceView, in_class: bool, matches: bool) -> None:
        if not in_class:
            return  # another kind of device: not worth mentioning
        rejected = self.rejected
        rejected.in_class += 1
        if not matches:
            rejected.counts[REASON_SELECTOR] += 1
            return
        rejected.matched += 1
        if device.refused:
            # Never allocated (a mode All request then cannot have all); its slice's other devices stay usable.
            rejected.counts[REASON_DEVICE_REFUSED] += 1
            if len(rejected.refused) < 3:
                rejected.refused.append(f"{device.id}: {device.refused}")
            return
        shared = self.features.consumable_capacity and device.allow_multiple_allocations
        fits, amounts = self._capacity(device, shared)
        if not fits:
            return
        partitionable = self.features.partitionable_devices
        if device.consumes_counters and not partitionable:
            rejected.counts[REASON_FEATURE_DISABLED] += 1
            if not self.all_mode:
                return
        bad = untolerated_blocking_taints(device.taints, self.req.tolerations)
        if not self.req.admin_access and self.state.is_taken(device.id):
            rejected.counts[REASON_ALLOCATED] += 1
            if not self.all_mode:
                return
        elif bad:
            rejected.counts[REASON_TAINTED] += 1
            rejected.taints.update(str(t) for t in bad)
        counted = bool(device.consumes_counters) and partitionable
        charged_alone = counted and not self.all_mode and not (shared and self.state.consumed_capacity(device.id) is not None)
        if charged_alone and not self._counters_fit(device, reported=not bad):
            return
        if bad and not self.all_mode:
            if counted:
                # Never taken, but upstream charges its counters before it looks at taints.
                self.candidates.append(Candidate(device, self.pool, shared, amounts, blocked=True))
            return
        self.candidates.append(Candidate(device, self.pool if counted else None, shared, amounts))

    def _capacity(self, device: DeviceView, shared: bool) -> tuple[bool, cap.Amounts | None]:
        """What the request consumes of `device`'s capacity, and whether that is left (DRAConsumableCapacity)."""
        wanted = self.req.capacity_requests
        # A whole device without a request policy always holds a request without capacity requests.
        if not (self.features.consumable_capacity and (wanted or shared or device.capacity_policies)):
            return True, None
        amounts = cap.request_amounts(dict(wanted), device.driver, device.capacity, device.capacity_policies)
        committed = self.state.consumed_capacity(device.id)
        if amounts is not None and cap.fits(amounts, device.capacity, device.capacity_policies, committed, None):
            return True, amounts
        # Upstream skips such a device, in mode All too (it is then not part of "all").
        self.rejected.counts[REASON_CAPACITY] += 1
        if len(self.rejected.capacity_short) < 3:
            self.rejected.capacity_short.append(
                f"{device.id}: lacks a requested capacity" if amounts is None else f"{device.id}: {cap.left(device.capacity, committed)}"
            )
        return False, amounts

    def _counters_fit(self, device: DeviceView, *, reported: bool) -> bool:
        pool = self.pool
        assert pool is not None
        if self.available is None:
            self.available = self.counters.available(pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices], pool.driver)
        if self.counters.would_fit_alone(pool.name, self.available, device.consumes_counters):
            return True
        if reported:
            self.rejected.counts[REASON_COUNTERS] += 1
            if len(self.rejected.counters_short) < 3:
                self.rejected.counters_short.append(
                    f"{device.id}: {describe_short(self.available, device.consumes_counters, self.counters.unknown(pool.name))}"
                )
        return False

    def alternative(self, device_class: DeviceClass) -> Alternative | Failure:
        """The scan's answer: the alternative, or why the node cannot satisfy the request."""
        req, rejected, candidates = self.req, self.rejected, self.candidates
        if self.all_mode:
            bad = (
                rejected.counts[REASON_TAINTED]
                + rejected.counts[REASON_ALLOCATED]
                + rejected.counts[REASON_FEATURE_DISABLED]
                + rejected.counts[REASON_DEVICE_REFUSED]
            )
            if bad or not candidates:
                why = rejected.describe() if rejected.matched or rejected.counts else "no matching devices on this node"
                return self.fail(
                    rejected.all_mode_code(),
                    f"asks for all {rejected.matched} matching devices, {len(candidates) - bad} available: {why}",
                )
            if len(candidates) > ALLOCATION_RESULTS_MAX_SIZE:
                return self.fail(
                    REASON_TOO_MANY,
                    f"asks for all devices, {len(candidates)} match, more than the {ALLOCATION_RESULTS_MAX_SIZE} one claim may hold",
                )
            return Alternative(self.result_name, req, device_class, len(candidates), candidates, all_mode=True)
        usable = sum(1 for c in candidates if not c.blocked)
        if usable < req.count:
            return self.fail(rejected.count_code(), f"{usable} of {req.count} devices available: {rejected.describe()}")
        return Alternative(self.result_name, req, device_class, req.count, candidates)


@dataclass(slots=True)
class _FirstFit(Generic[SelectorT]):
    """Upstream's allocateOne for a lone request: the first `count` usable devices in pool order."""

    req: ExactRequest
    state: AllocatedState
    features: Features
    avail: Availability
    class_selectors: list[SelectorT]
    request_selectors: list[SelectorT]
    evaluate: Callable[[SelectorT, DeviceView], bool]
    candidates: list[Candidate] = field(default_factory=list)
    counters: CounterTally | None = None
    pool: Pool | None = None
    available: Tally | None = None

    def enter(self, pool: Pool) -> None:
        self.pool, self.available = pool, None

    def take(self, device: DeviceView) -> bool | None:
        """Add `device` if usable (True), skip it (False), or None: give up, the full pass decides."""
        features, state = self.features, self.state
        if device.refused:
            return False
        single = self.req.count == 1
        shared = features.consumable_capacity and device.allow_multiple_allocations
        if not single and (device.consumes_counters or shared):
            return None  # picks interact through counters or shares: the full search decides
        try:
            if not all(self.evaluate(sel, device) for sel in self.class_selectors):
                return False
            if not all(self.evaluate(sel, device) for sel in self.request_selectors):
                return False
        except ValueError:
            return None
        amounts: cap.Amounts | None = None
        committed = state.consumed_capacity(device.id) if shared else None
        wanted = self.req.capacity_requests
        if features.consumable_capacity and (wanted or shared or device.capacity_policies):
            amounts = cap.request_amounts(dict(wanted), device.driver, device.capacity, device.capacity_policies)
            if amounts is None or not cap.fits(amounts, device.capacity, device.capacity_policies, committed, None):
                return False
        counted = False
        if device.consumes_counters:
            if not features.partitionable_devices:
                return False
            if committed is None and not self._charge(device):
                return False
            counted = True
        if untolerated_blocking_taints(device.taints, self.req.tolerations):
            return False  # its counters stay charged for the rest of the call, as upstream's do
        self.candidates.append(Candidate(device, self.pool if counted else None, shared, amounts))
        return True

    def _charge(self, device: DeviceView) -> bool:
        pool = self.pool
        assert pool is not None
        if self.counters is None:
            self.counters = CounterTally(self.state, self.avail)
        if self.available is None:
            self.available = self.counters.available(pool.name, pool.counter_sets, [*pool.slices, *pool.other_slices], pool.driver)
        return self.counters.charge(pool.name, self.available, device.consumes_counters)


def _lone_request(
    pending: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass]
) -> tuple[DeviceRequest, ExactRequest, DeviceClass] | None:
    """The request first fit can answer: one claim, one `exactly` ExactCount request, no constraints or admin access."""
    if len(pending) != 1:
        return None
    claim = pending[0]
    if len(claim.requests) != 1 or claim.constraints:
        return None
    request = claim.requests[0]
    req = request.exactly
    if req is None or req.allocation_mode == MODE_ALL or req.admin_access or req.count < 1:
        return None
    if req.capacity_requests and req.count != 1:
        return None
    device_class = classes.get(req.device_class_name)
    return None if device_class is None else (request, req, device_class)


class CandidateFinder(Generic[SelectorT]):
    """Builds the slots of a pod's requests on a node; remembers selector answers per slice view."""

    def __init__(self, selectors: SelectorEngine[SelectorT], features: Features) -> None:
        self._cel = selectors
        self.features = features
        # slice view -> selector set -> (in class, matches) per device
        self._selector_memo: weakref.WeakKeyDictionary[SliceView, _SelectorMemo] = weakref.WeakKeyDictionary()

    def first_fit(
        self,
        pending: Sequence[ResourceClaim],
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> Slot | None:
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
        lone = _lone_request(pending, classes)
        if lone is None:
            return None
        request, req, device_class = lone
        try:
            class_selectors = [self._cel.compile(e) for e in device_class.selectors]
            request_selectors = [self._cel.compile(e) for e in req.selectors]
        except ValueError:
            return None
        fit = _FirstFit(req, state, self.features, avail, class_selectors, request_selectors, self._cel.evaluate)
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            fit.enter(pool)
            for s in pool.slices:
                for device in s.devices:
                    # "In use" before the selectors, as upstream: a device in use is never evaluated.
                    if not selectable(s, device, node, self.features) or state.is_taken(device.id):
                        continue
                    took = fit.take(device)
                    if took is None:
                        return None
                    if took and len(fit.candidates) == req.count:
                        return Slot(0, request.name, [Alternative(request.name, req, device_class, req.count, fit.candidates)])
        return None

    def slot(
        self,
        ci: int,
        claim: ResourceClaim,
        request: DeviceRequest,
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> Slot | Failure:
        alternatives: list[Alternative] = []
        failures: list[tuple[str, Failure]] = []
        for sub in request.subrequests:
            result_name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
            alt = self._alternative(claim, result_name, sub, node, pools, classes, state, avail)
            if isinstance(alt, Failure):
                if alt.code in (REASON_SELECTOR_ERROR, REASON_CLASS_MISSING) and request.exactly is not None:
                    return alt
                failures.append((result_name, alt))
                continue
            alternatives.append(alt)
        if alternatives:
            return Slot(ci, request.name, alternatives)
        if len(failures) == 1:
            return failures[0][1]
        detail = "; ".join(f"{name}: {f.message.split(': ', 1)[-1]}" for name, f in failures)
        return of_claim(failures[0][1].code, claim.key, f", request {request.name}: no subrequest can be satisfied: {detail}", request.name)

    def _alternative(
        self,
        claim: ResourceClaim,
        result_name: str,
        req: ExactRequest,
        node: Node,
        pools: list[Pool],
        classes: Mapping[str, DeviceClass],
        state: AllocatedState,
        avail: Availability,
    ) -> Alternative | Failure:
        compiled = self._compile(claim.key, result_name, req, classes)
        if isinstance(compiled, Failure):
            return compiled
        device_class, class_selectors, request_selectors = compiled
        scan = _Scan(
            claim.key,
            result_name,
            req,
            state,
            self.features,
            CounterTally(state, avail),
            Rejections(class_name=device_class.meta.name),
        )
        for pool in pools:
            if pool.incomplete or pool.invalid:
                failure = scan.unusable_pool(pool)
                if failure is not None:
                    return failure
                continue
            scan.enter(pool)
            for s in pool.slices:
                flags = self._selector_flags(s, class_selectors, request_selectors)
                for index, device in enumerate(s.devices):
                    if not selectable(s, device, node, self.features):
                        continue
                    verdict = (
                        flags[index]
                        if flags is not None
                        else self._flags_or_error(scan, device_class, device, class_selectors, request_selectors)
                    )
                    if isinstance(verdict, Failure):
                        return verdict
                    scan.consider(device, *verdict)
        return scan.alternative(device_class)

    def _compile(
        self, claim_key: str, result_name: str, req: ExactRequest, classes: Mapping[str, DeviceClass]
    ) -> tuple[DeviceClass, list[SelectorT], list[SelectorT]] | Failure:
        where = f", request {result_name}"
        device_class = classes.get(req.device_class_name)
        if device_class is None:
            return of_claim(REASON_CLASS_MISSING, claim_key, f"{where}: device class {req.device_class_name} not found", result_name)
        name = device_class.meta.name
        try:
            class_selectors = [self._cel.compile(e) for e in device_class.selectors]
        except ValueError as e:  # CelCompileError names the expression and the reason
            return of_claim(REASON_SELECTOR_ERROR, claim_key, f"{where}: device class {name}: {e}", result_name, name)
        try:
            request_selectors = [self._cel.compile(e) for e in req.selectors]
        except ValueError as e:
            return of_claim(REASON_SELECTOR_ERROR, claim_key, f"{where}: {e}", result_name)
        return device_class, class_selectors, request_selectors

    def _flags_or_error(
        self,
        scan: _Scan,
        device_class: DeviceClass,
        device: DeviceView,
        class_selectors: Sequence[SelectorT],
        request_selectors: Sequence[SelectorT],
    ) -> tuple[bool, bool] | Failure:
        """(in class, matches) for a device of a slice where some selector fails: find which, for the reason."""
        evaluate = self._cel.evaluate
        name = device_class.meta.name
        try:
            in_class = all(evaluate(sel, device) for sel in class_selectors)
        except ValueError as e:  # CelRuntimeError names the expression and the cause
            return scan.fail(REASON_SELECTOR_ERROR, f"device class {name}, device {device.id}: {e}", name)
        try:
            return in_class, in_class and all(evaluate(sel, device) for sel in request_selectors)
        except ValueError as e:
            return scan.fail(REASON_SELECTOR_ERROR, f"device {device.id}: {e}")

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
