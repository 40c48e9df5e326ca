"""The verdict cache's claim signatures and failure templates.

A signature must tell apart every pair of claim specs whose verdicts (or
failure messages) can differ, and only those; a failure template must give
back exactly the failure it was made from, and the same message with other
names for claims of the same shape.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from allocator.allocation import Failure
from allocator.failures import ClaimName, Text
from allocator.parse import parse_resource_claim
from allocator.types import TOLERATIONS_ANNOTATION
from extender.filter.outcomes import FailureTemplate, spec_signature
from kubesim.objects import claim


def _claim(name: str = "a", **exactly: Any) -> dict[str, Any]:
    return claim(name, request="r", exactly=exactly, uid=f"uid-{name}", resourceVersion="1")


def _with(path: str, value: Any) -> dict[str, Any]:
    """The base claim with one field set (`path`: dotted, from `spec.devices`)."""
    raw = _claim()
    node: Any = raw["spec"]["devices"]
    *parents, last = path.split(".")
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if isinstance(node, list):
        node[int(last) : int(last) + 1] = [value]
    else:
        node[last] = value
    return raw


CEL = 'device.attributes["gpu.example.com"].model == "a"'

# One row per field of a claim spec that allocation (or its failure message) reads.
DIFFERENT = [
    ("request name", _with("requests.0.name", "other")),
    ("device class", _with("requests.0.exactly.deviceClassName", "fpga")),
    ("selector", _with("requests.0.exactly.selectors", [{"cel": {"expression": CEL}}])),
    ("allocation mode", _with("requests.0.exactly.allocationMode", "All")),
    ("count", _with("requests.0.exactly.count", 2)),
    ("admin access", _with("requests.0.exactly.adminAccess", True)),
    ("toleration", _with("requests.0.exactly.tolerations", [{"key": "health", "operator": "Exists"}])),
    ("toleration seconds", _with("requests.0.exactly.tolerations", [{"key": "health", "operator": "Exists", "tolerationSeconds": 5}])),
    ("capacity amount", _with("requests.0.exactly.capacity", {"requests": {"memory": "2Gi"}})),
    ("capacity as written", _with("requests.0.exactly.capacity", {"requests": {"memory": "1024Mi"}})),
    (
        "firstAvailable",
        _with("requests.0", {"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "gpu"}]}),
    ),
    (
        "firstAvailable order",
        _with(
            "requests.0",
            {"name": "r", "firstAvailable": [{"name": "t", "deviceClassName": "fpga"}, {"name": "s", "deviceClassName": "gpu"}]},
        ),
    ),
    ("constraint", _with("constraints", [{"matchAttribute": "gpu.example.com/model"}])),
    ("second request", _with("requests.1", {"name": "q", "exactly": {"deviceClassName": "gpu"}})),
]


def _signature(raw: dict[str, Any]) -> tuple[Any, ...]:
    claim = parse_resource_claim(raw)
    return (*spec_signature(claim), claim.meta.annotations.get(TOLERATIONS_ANNOTATION))


def _base() -> dict[str, Any]:
    return _with("requests.0.exactly.capacity", {"requests": {"memory": "1Gi"}})


@pytest.mark.parametrize(("field", "raw"), DIFFERENT, ids=[f for f, _ in DIFFERENT])
def test_a_spec_that_can_allocate_differently_has_another_signature(field: str, raw: dict[str, Any]) -> None:
    signatures = {_signature(_base()), _signature(_claim())}
    assert len(signatures) == 2, "with and without a capacity request"
    assert _signature(raw) not in signatures, field


def test_the_rows_differ_from_each_other() -> None:
    assert len({_signature(raw) for _, raw in DIFFERENT}) == len(DIFFERENT)


def test_name_uid_and_version_do_not_count_and_equal_specs_share() -> None:
    other = copy.deepcopy(_base())
    other["metadata"].update(name="b", uid="uid-b", resourceVersion="7")
    other["spec"]["devices"]["config"] = [{"opaque": {"driver": "gpu.example.com", "parameters": {"x": 1}}}]
    assert _signature(other) == _signature(_base())


def test_annotation_tolerations_count() -> None:
    raw = _base()
    raw["metadata"]["annotations"] = {TOLERATIONS_ANNOTATION: '{"r": [{"key": "health", "operator": "Exists"}]}'}
    assert _signature(raw) != _signature(_base())


def _c(key: str) -> ClaimName:
    return ClaimName(key)


TEMPLATES = [
    ("deleted", ("claim ", _c("default/a"), " is being deleted"), "default/a"),
    ("two claims", ("claim ", _c("default/a"), ", request r: no device fits; claim ", _c("default/b"), " too"), "default/a"),
    ("a longer name as text", ("claim default/ab: not one of ours",), ""),
    ("the longer name", ("claim ", _c("default/a.b"), ", request r: the longer name is mentioned"), "default/a.b"),
    ("no claim", ("no allocation found for the pod's claims on this node",), ""),
    ("blames another", ("device class gpu not found (claim ", _c("default/b"), ")"), "default/b"),
    ("names without 'claim'", ("the constraints of ", _c("default/a"), ", ", _c("default/b"), " admit too many"), ""),
    # The traps the old regex over the message had to get right, kept as rows now that slots come from the parts:
    ("text naming a longer claim, then the claim", ("(claim default/a.bz) and claim ", _c("default/a"), ": no fit"), "default/a"),
    (
        "a key as text without the word",
        ("; default/a is named without the word; claim ", _c("default/b"), " is being deleted"),
        "default/b",
    ),
    ("the same claim twice", ("claim ", _c("default/a"), ": no fit; claim ", _c("default/a"), " is being deleted"), "default/a"),
    ("blames a claim the text does not name", ("no allocation found for the pod's claims on this node",), "default/b"),
    ("a prefix and its longer key", ("claim ", _c("default/a.b"), " and claim ", _c("default/a"), " conflict"), "default/a.b"),
]


@pytest.mark.parametrize(("parts", "claim"), [(p, c) for _, p, c in TEMPLATES], ids=[n for n, _, _ in TEMPLATES])
def test_a_template_renders_the_failure_it_was_made_from_and_the_same_for_other_names(parts: Text, claim: str) -> None:
    names = ("default/a", "default/b", "default/a.b")
    failure = Failure("code", parts, claim, "r", "gpu")
    template = FailureTemplate.of(failure, names)
    assert template.render(names) == failure and template.render(names).message == failure.message
    others = ("x/one", "x/two", "x/three")
    told = template.render(others)
    renamed = dict(zip(names, others, strict=True))
    assert told.message == "".join(p if isinstance(p, str) else renamed[p.key] for p in parts)
    assert told.claim == (renamed[claim] if claim else "")
    assert (told.code, told.request, told.device_class) == ("code", "r", "gpu")


FOREIGN = {
    "a claim not among the pod's keeps its name": (
        ("claim ", _c("other/z"), " is not the pod's"),
        "other/z",
        "claim other/z is not the pod's",
    ),
    "a name twice among the pod's takes its first place": (("claim ", _c("default/a"), ": no fit"), "default/a", "claim x/one: no fit"),
}


@pytest.mark.parametrize(("parts", "claim", "message"), list(FOREIGN.values()), ids=list(FOREIGN))
def test_a_template_for_names_outside_the_slots(parts: Text, claim: str, message: str) -> None:
    template = FailureTemplate.of(Failure("code", parts, claim), ("default/a", "default/b", "default/a"))
    told = template.render(("x/one", "x/two", "x/three"))
    assert told.message == message
    assert told.claim == (claim if claim.startswith("other/") else "x/one")


def test_failures_alike_for_claims_of_the_same_shape_share_one_template() -> None:
    a = FailureTemplate.of(Failure("code", ("claim ", _c("default/a"), ": no fit"), "default/a"), ("default/a",))
    b = FailureTemplate.of(Failure("code", ("claim ", _c("default/b"), ": no fit"), "default/b"), ("default/b",))
    assert a == b and hash(a) == hash(b)
