"""Invariants of allocation over random slices, claims and tolerations."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from allocator.tolerations import untolerated_blocking_taints
from allocator.types import ALLOCATION_RESULTS_MAX_SIZE, MODE_ALL, DeviceID, Node
from tests.allocator.builders import DRIVER, claim, dev, device_class, slice_, taint, view
from tests.tiers import examples

NODE = Node("node-1")
KEYS = ["a", "b", "gpu.example.com/xid"]
EFFECTS = ["NoSchedule", "NoExecute", "None", "Weird"]
CLASSES = {
    "gpu": device_class("gpu", f'device.driver == "{DRIVER}"'),
    "even": device_class("even", f'device.attributes["{DRIVER}"].idx % 2 == 0'),
}
CEL = CelEnvironment()

taints_st = st.lists(st.builds(taint, st.sampled_from(KEYS), st.sampled_from(EFFECTS), st.sampled_from(["", "1"])), max_size=3)
tolerations_st = st.lists(
    st.fixed_dictionaries(
        {"operator": st.sampled_from(["Exists", "Equal"])},
        optional={"key": st.sampled_from(KEYS), "effect": st.sampled_from(EFFECTS[:2]), "value": st.sampled_from(["1"])},
    ),
    max_size=2,
)


@st.composite
def scenario(draw):
    n_slices = draw(st.integers(1, 3))
    slices = []
    idx = 0
    for s in range(n_slices):
        devices = []
        for _ in range(draw(st.integers(0, 5))):
            devices.append(dev(f"d{idx}", {"idx": idx, "numa": draw(st.integers(0, 2))}, taints=draw(taints_st)))
            idx += 1
        count = draw(st.sampled_from([1, 1, 1, 2]))
        slices.append(view(slice_(f"s{s}", devices, pool=f"p{s}", count=count, generation=draw(st.integers(0, 1)))))
    requests = []
    for r in range(draw(st.integers(1, 3))):
        e = {"deviceClassName": draw(st.sampled_from(["gpu", "even"])), "tolerations": draw(tolerations_st)}
        if draw(st.booleans()):
            e["allocationMode"] = "All"
        else:
            e["count"] = draw(st.integers(1, 3))
        requests.append({"name": f"r{r}", "exactly": e})
    constraints = []
    if draw(st.booleans()):
        constraints.append({draw(st.sampled_from(["matchAttribute", "distinctAttribute"])): f"{DRIVER}/numa"})
    claims = [claim("c0", *requests, constraints=constraints)]
    if draw(st.booleans()):
        claims.append(claim("c1", {"name": "x", "exactly": {"deviceClassName": "gpu", "count": 1}}))
    allocated = {DeviceID(DRIVER, f"p{draw(st.integers(0, 2))}", f"d{draw(st.integers(0, 10))}") for _ in range(draw(st.integers(0, 3)))}
    return slices, claims, allocated


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_allocation_invariants(data) -> None:
    slices, claims, allocated = data
    out = Allocator(CEL).allocate(NODE, claims, slices, CLASSES, allocated)
    devices = {d.id: d for s in slices for d in s.devices}
    if not out.ok:
        assert out.failure.message
        return
    seen: set[DeviceID] = set()
    for c in claims:
        result = out.allocations[c.key]
        assert len(result.results) <= ALLOCATION_RESULTS_MAX_SIZE
        requests = {r.name: r.exactly for r in c.requests}
        for r in result.results:
            d = r.device_id
            assert d not in seen, f"{d} allocated twice"
            seen.add(d)
            assert d not in allocated, f"{d} was already allocated"
            request = requests[r.request]
            view_ = devices[d]
            for expr in CLASSES[request.device_class_name].selectors:
                assert CEL.evaluate(CEL.compile(expr), view_)
            assert not untolerated_blocking_taints(view_.taints, request.tolerations)
            assert r.tolerations == request.tolerations
        for name, request in requests.items():
            got = [r for r in result.results if r.request == name]
            if request.allocation_mode == MODE_ALL:
                assert got
            else:
                assert len(got) == request.count
        for k in c.constraints:
            values = [devices[r.device_id].attributes.get(k.match_attribute or k.distinct_attribute) for r in result.results]
            if k.match_attribute:
                assert len(set(values)) == 1
            else:
                # Upstream keeps one value per request (the latest device's), and taking a device back
                # forgets its request's value: only with one device per request is every pair distinct.
                scope = [q for n, q in requests.items() if not k.requests or n in k.requests]
                if all(q.allocation_mode != MODE_ALL and q.count == 1 for q in scope):
                    assert len(set(values)) == len(values)
