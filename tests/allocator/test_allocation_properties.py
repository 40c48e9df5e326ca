"""Allocation over random small slices, claims and tolerations, judged by a brute-force oracle.

The oracle enumerates every assignment of devices to requests and keeps the
first that the rules, written here again apart from the allocator's code,
accept. Every path of the allocator (tests/allocator/paths.py) must succeed
exactly when the oracle finds an assignment, and any allocation it makes must
pass the oracle's checker: so a wrong refusal fails as surely as a wrong
allocation. The paths agree with each other on the verdict and its code, and
first fit and the full search on the devices too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from allocator.allocation import Allocator, Outcome
from allocator.cel import CelEnvironment
from allocator.device_view import DeviceView, SliceView
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    DeviceID,
    DeviceTaint,
    DeviceToleration,
    ExactRequest,
    Node,
    ResourceClaim,
)
from tests.allocator.builders import DRIVER, claim, dev, device_class, slice_, taint, view
from tests.allocator.paths import FIRST_FIT, FULL_SEARCH, PATHS, allocator_for
from tests.tiers import examples

NODE = Node("node-1")
KEYS = ["a", "b", "gpu.example.com/xid"]
EFFECTS = ["NoSchedule", "NoExecute", "None", "Weird"]
CLASSES = {
    "gpu": device_class("gpu", f'device.driver == "{DRIVER}"'),
    "even": device_class("even", f'device.attributes["{DRIVER}"].idx % 2 == 0'),
}
IDX, NUMA = f"{DRIVER}/idx", f"{DRIVER}/numa"
CEL = CelEnvironment()
ALLOCATORS: dict[str, Allocator] = {path: allocator_for(path, CEL) for path in PATHS}

taints_st = st.lists(st.builds(taint, st.sampled_from(KEYS), st.sampled_from(EFFECTS), st.sampled_from(["", "1"])), max_size=2)
tolerations_st = st.lists(
    st.fixed_dictionaries(
        {"operator": st.sampled_from(["Exists", "Equal"])},
        optional={"key": st.sampled_from(KEYS), "effect": st.sampled_from(EFFECTS[:2]), "value": st.sampled_from(["1"])},
    ),
    max_size=2,
)


@dataclass(frozen=True)
class Scenario:
    slices: list[SliceView]
    claims: list[ResourceClaim]
    allocated: set[DeviceID]


@st.composite
def scenario(draw: st.DrawFn) -> Scenario:
    n_slices = draw(st.integers(1, 3))
    slices = []
    idx = 0
    for s in range(n_slices):
        # One pool in three partitions its devices: a counters slice beside the devices slice.
        counters = draw(st.sampled_from([None, None, {"mem": str(draw(st.integers(1, 6)))}]))
        devices = []
        for _ in range(draw(st.integers(0 if s else 1, 5))):
            consumes = counters is not None and draw(st.integers(0, 3)) > 0  # a device of such a pool may consume nothing
            # A consuming device is untainted half the time: a rejected one's charge is kept (see Oracle).
            taints = draw(taints_st) if not consumes or draw(st.booleans()) else []
            d = dev(f"d{idx}", {"idx": idx, "numa": draw(st.integers(0, 2))}, taints=taints)
            if consumes:
                d["consumesCounters"] = [{"counterSet": "cs", "counters": {"mem": {"value": str(draw(st.integers(1, 3)))}}}]
            devices.append(d)
            idx += 1
        whole = 1 if counters is None else 2
        count = draw(st.sampled_from([whole, whole, whole, whole + 1]))  # one in four: a slice missing, the pool incomplete
        generation = draw(st.integers(0, 1))
        slices.append(view(slice_(f"s{s}", devices, pool=f"p{s}", count=count, generation=generation)))
        if counters is not None:
            slices.append(view(slice_(f"s{s}-counters", [], pool=f"p{s}", count=count, generation=generation, counters={"cs": counters})))
    drawn = [t for sl in slices for d in sl.devices for t in d.taints]
    requests = []
    for r in range(draw(st.integers(1, 3))):
        tolerations = draw(tolerations_st)
        if drawn and draw(st.booleans()):  # half the requests name a taint that is there: by key, by value, or the other effect
            t = draw(st.sampled_from(drawn))
            other = "NoExecute" if t.effect == "NoSchedule" else "NoSchedule"
            forms = [
                {"key": t.key, "operator": "Exists"},
                {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect},
                {"key": t.key, "operator": "Exists", "effect": other},  # tolerates nothing of this taint
            ]
            tolerations.append(draw(st.sampled_from(forms)))
        e = {"deviceClassName": draw(st.sampled_from(["gpu", "even"])), "tolerations": tolerations}
        # One in six: All rarely fits beside other requests, and refusals alone prove little.
        if draw(st.sampled_from([False] * 5 + [True])):
            e["allocationMode"] = "All"
        else:
            e["count"] = draw(st.integers(1, 3))
        requests.append({"name": f"r{r}", "exactly": e})
    constraints = []
    if draw(st.sampled_from([False, False, True])):
        constraints.append({draw(st.sampled_from(["matchAttribute", "distinctAttribute"])): NUMA})
    claims = [claim("c0", *requests, constraints=constraints)]
    if draw(st.booleans()):
        claims.append(claim("c1", {"name": "x", "exactly": {"deviceClassName": "gpu", "count": 1}}))
    allocated = {DeviceID(DRIVER, f"p{draw(st.integers(0, 2))}", f"d{draw(st.integers(0, 10))}") for _ in range(draw(st.integers(0, 3)))}
    return Scenario(slices, claims, allocated)


# ----------------------------------------------------------------------------- the oracle

Assignment = dict[str, list[tuple[str, DeviceID]]]  # claim key -> [(request, device)]


def _tolerates(toleration: DeviceToleration, t: DeviceTaint) -> bool:
    """Upstream's ToleratesTaint, written again so that a slip in allocator/tolerations.py shows here."""
    if toleration.effect and toleration.effect != t.effect:
        return False
    if toleration.key and toleration.key != t.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == t.value
    return toleration.operator == "Exists"


def _in_class(name: str, device: DeviceView) -> bool:
    """The two classes' CEL selectors, read as Python."""
    idx = device.attributes[IDX]
    return name == "gpu" or (isinstance(idx, int) and idx % 2 == 0)


def _consumption(d: DeviceView) -> dict[tuple[str, str], Fraction]:
    out: dict[tuple[str, str], Fraction] = {}
    for use in d.consumes_counters:
        for name, q in use.counters.items():
            out[(use.counter_set, name)] = out.get((use.counter_set, name), Fraction(0)) + q.value
    return out


def _distinct_defined(c: ResourceClaim) -> bool:
    """Whether `distinctAttribute` means "all pairwise distinct" for `c`: with one device per request.

    Upstream keeps one value per request (its latest device's) and forgets it
    when a device is taken back, so with more devices per request the outcome
    depends on the search's history and no assignment-wise rule defines it.
    """
    if not any(k.distinct_attribute for k in c.constraints):
        return True
    return all(r.exactly is not None and r.exactly.allocation_mode != MODE_ALL and r.exactly.count == 1 for r in c.requests)


class Oracle:
    """Every assignment of a scenario's devices to its requests, tried one by one."""

    def __init__(self, s: Scenario) -> None:
        self.claims = s.claims
        self.allocated = s.allocated
        newest: dict[str, int] = {}
        for sl in s.slices:
            newest[sl.pool] = max(newest.get(sl.pool, sl.generation), sl.generation)
        current = [sl for sl in s.slices if sl.generation == newest[sl.pool]]
        self.incomplete = {
            sl.pool for sl in current if sum(1 for o in current if o.pool == sl.pool) < sl.resource_slice_count
        }  # a pool missing slices of its newest generation
        self.devices = [d for sl in current if sl.pool not in self.incomplete for d in sl.devices]
        self.by_id = {d.id: d for d in self.devices}
        # Counters left per pool, per (set, counter), after the allocated devices' consumption.
        self.left: dict[str, dict[tuple[str, str], Fraction]] = {}
        for sl in current:
            for cs in sl.shared_counters:
                for name, q in cs.counters.items():
                    self.left.setdefault(sl.pool, {})[(cs.name, name)] = q.value
        for d in self.devices:
            if d.id in self.allocated:
                for key, amount in _consumption(d).items():
                    self.left[d.id.pool][key] -= amount
        self.defined = all(_distinct_defined(c) for c in s.claims) and not self._counters_leak()

    def _counters_leak(self) -> bool:
        """Whether upstream's search would keep a device's counters charged after rejecting it.

        It charges a candidate's counters before it checks taints and
        constraints, and a rejection there does not give them back for the rest
        of the call: an assignment-wise rule cannot say what then fits.
        """
        consuming = [d for d in self.devices if d.consumes_counters and d.id not in self.allocated]
        if not consuming:
            return False
        if any(c.constraints for c in self.claims):
            return True
        requests = [r.exactly for c in self.claims for r in c.requests if r.exactly is not None]
        return any(_in_class(q.device_class_name, d) and not self.tolerated(q, d) for q in requests for d in consuming)

    def counters_hold(self, devices: Sequence[DeviceView]) -> bool:
        """Every counter of a pool covers what is picked from it (all of them, once one is charged)."""
        used: dict[str, dict[tuple[str, str], Fraction]] = {}
        for d in devices:
            for key, amount in _consumption(d).items():
                pool = used.setdefault(d.id.pool, {})
                pool[key] = pool.get(key, Fraction(0)) + amount
        return all(left - used[pool].get(key, 0) >= 0 for pool in used for key, left in self.left[pool].items())

    def tolerated(self, request: ExactRequest, d: DeviceView) -> bool:
        blocking = [t for t in d.taints if t.effect in ("NoSchedule", "NoExecute")]
        return all(any(_tolerates(tol, t) for tol in request.tolerations) for t in blocking)

    def usable(self, request: ExactRequest, d: DeviceView) -> bool:
        return d.id not in self.allocated and self.tolerated(request, d)

    def options(self, request: ExactRequest) -> Iterator[tuple[DeviceView, ...]]:
        """Every set of devices the request may get on its own."""
        matching = [d for d in self.devices if _in_class(request.device_class_name, d)]
        if request.allocation_mode == MODE_ALL:
            # All of them, from pools seen whole: none may be unusable, and there must be one.
            if matching and not self.incomplete and all(self.usable(request, d) for d in matching):
                yield tuple(matching)
            return
        yield from combinations([d for d in matching if self.usable(request, d)], request.count)

    def constraints_hold(self, c: ResourceClaim, devices: Sequence[DeviceView]) -> bool:
        for k in c.constraints:
            values = [d.attributes.get(k.match_attribute or k.distinct_attribute or "") for d in devices]
            if None in values:
                return False
            if k.match_attribute and len(set(values)) > 1:
                return False
            if k.distinct_attribute and _distinct_defined(c) and len(set(values)) < len(values):
                return False
        return True

    def find(self) -> Assignment | None:
        """The first assignment that the checker accepts, or None: there is none."""
        slots = [(ci, r.name, r.exactly) for ci, c in enumerate(self.claims) for r in c.requests if r.exactly is not None]
        picked: list[list[tuple[str, DeviceView]]] = [[] for _ in self.claims]

        def fill(i: int, used: frozenset[DeviceID]) -> bool:
            if i == len(slots):
                return True
            ci, name, request = slots[i]
            for option in self.options(request):
                if any(d.id in used for d in option):
                    continue
                picked[ci].extend((name, d) for d in option)
                # Constraints and counters hold for every subset of a valid set: checking early prunes, never loses.
                now = used | {d.id for d in option}
                if (
                    self.constraints_hold(self.claims[ci], [d for _, d in picked[ci]])
                    and self.counters_hold([self.by_id[did] for did in now])
                    and fill(i + 1, now)
                ):
                    return True
                del picked[ci][len(picked[ci]) - len(option) :]
            return False

        if not fill(0, frozenset()):
            return None
        return {c.key: [(name, d.id) for name, d in picked[ci]] for ci, c in enumerate(self.claims)}

    def check(self, assignment: Mapping[str, Sequence[tuple[str, DeviceID]]]) -> str | None:
        """Why `assignment` breaks the rules, or None: it is feasible."""
        seen: set[DeviceID] = set()
        for c in self.claims:
            results = assignment.get(c.key)
            if results is None:
                return f"{c.key}: not allocated"
            if len(results) > ALLOCATION_RESULTS_MAX_SIZE:
                return f"{c.key}: {len(results)} results"
            requests = {r.name: r.exactly for r in c.requests if r.exactly is not None}
            for name, did in results:
                request = requests.get(name)
                d = self.by_id.get(did)
                if request is None or d is None:
                    return f"{c.key}: {name} -> {did}: no such request, or not a device of a complete pool"
                if did in seen:
                    return f"{did} allocated twice"
                seen.add(did)
                if not _in_class(request.device_class_name, d) or not self.usable(request, d):
                    return f"{c.key}: {name} -> {did}: not of its class, allocated already or tainted untolerated"
            for name, request in requests.items():
                got = {did for n, did in results if n == name}
                options = {frozenset(d.id for d in o) for o in self.options(request)} if request.allocation_mode == MODE_ALL else None
                if options is not None and got not in options:
                    return f"{c.key}: {name} (mode All) got {sorted(map(str, got))}"
                if options is None and len(got) != request.count:
                    return f"{c.key}: {name} got {len(got)} devices, asked for {request.count}"
            if not self.constraints_hold(c, [self.by_id[did] for _, did in results]):
                return f"{c.key}: constraints broken"
        if not self.counters_hold([self.by_id[did] for did in seen]):
            return "shared counters over-committed"
        return None


def _assignment(out: Outcome) -> Assignment:
    return {key: [(r.request, r.device_id) for r in result.results] for key, result in out.allocations.items()}


# ----------------------------------------------------------------------------- the property


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_allocation_agrees_with_the_oracle(s: Scenario) -> None:
    oracle = Oracle(s)
    witness = oracle.find()
    if witness is not None:
        assert oracle.check(witness) is None, "the oracle's own witness fails its checker"
    event(f"oracle: {'feasible' if witness else 'infeasible'}{'' if oracle.defined else ' (verdict not compared)'}")
    event(f"counters: {'drawn' if oracle.left else 'none'}")
    outcomes = {path: allocator.allocate(NODE, s.claims, s.slices, CLASSES, s.allocated) for path, allocator in ALLOCATORS.items()}
    for path, out in outcomes.items():
        if out.ok:
            problem = oracle.check(_assignment(out))
            assert problem is None, f"{path}: allocated {_assignment(out)}, which the oracle refuses: {problem}"
            for c in s.claims:
                requests = {r.name: r.exactly for r in c.requests if r.exactly is not None}
                assert all(r.tolerations == requests[r.request].tolerations for r in out.allocations[c.key].results)
        else:
            assert out.failure is not None and out.failure.message
            if oracle.defined:
                assert witness is None, f"{path}: refused ({out.failure.message}), but the oracle finds {witness}"
    verdicts = {path: (out.ok, out.failure.code if out.failure else None) for path, out in outcomes.items()}
    if oracle.defined:
        assert len(set(verdicts.values())) == 1, f"the paths disagree: {verdicts}"
    else:
        # Where upstream's verdict depends on its search history (charges kept after a rejection, distinct
        # attributes over several devices), spread's other order may rightly find what pool order does not;
        # each of its answers is still checked above. The two paths in pool order must agree.
        assert verdicts[FIRST_FIT] == verdicts[FULL_SEARCH], f"first fit and the full search disagree: {verdicts}"
    if outcomes[FIRST_FIT].ok:
        assert _assignment(outcomes[FIRST_FIT]) == _assignment(outcomes[FULL_SEARCH]), "first fit and the full search pick differently"
        if oracle.defined:
            # Upstream's order: requests in pod order, devices in pool order, the first fit wins; the
            # oracle enumerates in that order, so its first witness is the answer.
            assert _assignment(outcomes[FIRST_FIT]) == witness, "not the first assignment in pool order"
