"""The fake API server accepts and refuses ResourceSlices as a Kubernetes 1.36 API server does.

One row per validation rule of resource.k8s.io/v1 (the type limits and the
API server's slice validation), each sent over HTTP as a driver sends it:
accepted (201), refused (422, the failing field named by the API server's
path) or not decodable (400). The fake judges slices by these rules, not by
the extender's parser, so the rows where the two differ are visible: the
API server accepts a slice whose device (or whole slice) the extender
refuses, and the end-to-end tests below show the extender's refusal with its
reason.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubesim.fakeapi import FakeApiServer
from kubesim.objects import claim, node
from tests.extender.api_cluster import ApiCluster, gpu_class, pod_with_claim
from tracker.apiserver.requests import MERGE_PATCH

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
Slice = dict[str, Any]


def base() -> Slice:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "h100"}}, "capacity": {"memory": {"value": "80Gi"}}}],
        },
    }


def spec(**fields: Any) -> Callable[[Slice], None]:
    """Set (or, with None, remove) fields of the spec."""

    def edit(s: Slice) -> None:
        for k, v in fields.items():
            if v is None:
                s["spec"].pop(k, None)
            else:
                s["spec"][k] = v

    return edit


def device(**fields: Any) -> Callable[[Slice], None]:
    """Set (or, with None, remove) fields of the first device."""

    def edit(s: Slice) -> None:
        for k, v in fields.items():
            if v is None:
                s["spec"]["devices"][0].pop(k, None)
            else:
                s["spec"]["devices"][0][k] = v

    return edit


def policy(p: dict[str, Any], value: str = "80Gi", *, multiple: bool = True) -> Callable[[Slice], None]:
    return device(capacity={"memory": {"value": value, "requestPolicy": p}}, allowMultipleAllocations=multiple or None)


def devices(n: int, **extra: Any) -> Callable[[Slice], None]:
    return spec(devices=[{"name": f"gpu-{i}", **extra} for i in range(n)])


def counter_sets(*sets: dict[str, Any]) -> Callable[[Slice], None]:
    return spec(devices=None, sharedCounters=list(sets))


def taint(**t: Any) -> Callable[[Slice], None]:
    return device(taints=[{"key": "example.com/broken", "effect": "NoSchedule", **t}])


def consumes(*uses: dict[str, Any]) -> Callable[[Slice], None]:
    return device(consumesCounters=list(uses))


def per_device(**fields: Any) -> Callable[[Slice], None]:
    def edit(s: Slice) -> None:
        spec(nodeName=None, perDeviceNodeSelection=True)(s)
        device(**fields)(s)

    return edit


def attribute(name: str, value: Any) -> Callable[[Slice], None]:
    return device(attributes={name: value})


ONE_TERM = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
COUNTERS = {"c": {"value": "1"}}


@dataclass(frozen=True)
class Row:
    name: str
    edit: Callable[[Slice], None]
    status: int = 201
    field: str = ""  # the API server's path of the failing field (422)
    detail: str = ""  # words of its message


ROWS = [
    Row("a valid slice is accepted", lambda s: None),
    Row("negative capacity is accepted (the extender refuses the device)", device(capacity={"memory": {"value": "-80Gi"}})),
    Row("a policy default above the capacity without validValues or validRange is accepted", policy({"default": "100Gi"})),
    Row("taint effect None is accepted", taint(effect="None")),
    Row("a list-typed attribute beside a scalar one is dropped (alpha gate off)", attribute("model", {"string": "a", "strings": ["b"]})),
    Row("node-allocatable resource mappings are dropped (alpha gate off)", device(nodeAllocatableResourceMappings={"cpu": {}})),
    # the driver and the pool
    Row("driver is required", spec(driver=None), 422, "spec.driver", "Required value"),
    Row("driver at most 63 characters", spec(driver="a" * 60 + ".com"), 422, "spec.driver", "Too long"),
    Row("driver is a DNS subdomain", spec(driver="gpu_example.com"), 422, "spec.driver", "Invalid value"),
    Row("pool name is required", spec(pool={"resourceSliceCount": 1}), 422, "spec.pool.name", "Required value"),
    Row("pool name parts are DNS subdomains", spec(pool={"name": "a/B", "resourceSliceCount": 1}), 422, "spec.pool.name", "subdomain"),
    Row(
        "resourceSliceCount above zero",
        spec(pool={"name": "p", "resourceSliceCount": 0}),
        422,
        "spec.pool.resourceSliceCount",
        "greater than zero",
    ),
    Row(
        "generation not negative",
        spec(pool={"name": "p", "resourceSliceCount": 1, "generation": -1}),
        422,
        "spec.pool.generation",
        "greater than or equal to zero",
    ),
    # which nodes the slice reaches
    Row("one node choice is required", spec(nodeName=None), 422, "spec", "Required value: exactly one of `nodeName`"),
    Row("only one node choice", spec(allNodes=True), 422, "spec", "but multiple fields are set"),
    Row("nodeName not empty", spec(nodeName=""), 422, "spec.nodeName", "must be either unset or set to a non-empty string"),
    Row("nodeName is a node name", spec(nodeName="N1"), 422, "spec.nodeName", "subdomain"),
    Row("allNodes only true", spec(nodeName=None, allNodes=False), 422, "spec.allNodes", "must be either unset or set to true"),
    Row("perDeviceNodeSelection only true", spec(perDeviceNodeSelection=False), 422, "spec.perDeviceNodeSelection", "set to true"),
    Row(
        "a slice node selector has exactly one term",
        spec(nodeName=None, nodeSelector={"nodeSelectorTerms": [ONE_TERM["nodeSelectorTerms"][0]] * 2}),
        422,
        "spec.nodeSelector.nodeSelectorTerms",
        "exactly one node selector term",
    ),
    Row(
        "a node selector has a term",
        spec(nodeName=None, nodeSelector={"nodeSelectorTerms": []}),
        422,
        "spec.nodeSelector.nodeSelectorTerms",
        "at least one node selector term",
    ),
    Row(
        "node selector operators are known",
        spec(
            nodeName=None,
            nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]},
        ),
        422,
        "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator",
        "not a valid selector operator",
    ),
    Row(
        "In needs values",
        spec(nodeName=None, nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]}),
        422,
        "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values",
        "Required value",
    ),
    Row(
        "match fields select metadata.name",
        spec(nodeName=None, nodeSelector={"nodeSelectorTerms": [{"matchFields": [{"key": "spec.x", "operator": "In", "values": ["a"]}]}]}),
        422,
        "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
        "not a valid field selector key",
    ),
    Row(
        "device node fields need perDeviceNodeSelection",
        device(nodeName="n1"),
        422,
        "spec.devices[0]",
        "can only be set if `perDeviceNodeSelection`",
    ),
    Row(
        "with perDeviceNodeSelection a device names its nodes",
        per_device(),
        422,
        "spec.devices[0]",
        "Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes`",
    ),
    Row(
        "with perDeviceNodeSelection one choice per device",
        per_device(nodeName="n1", allNodes=True),
        422,
        "spec.devices[0]",
        "Invalid value",
    ),
    Row("with perDeviceNodeSelection a device may choose all nodes", per_device(allNodes=True)),
    # devices and counter sets
    Row(
        "devices or sharedCounters, not both",
        spec(sharedCounters=[{"name": "set", "counters": COUNTERS}]),
        422,
        "spec",
        "only one of `sharedCounters` or `devices` is allowed",
    ),
    Row("at most 128 devices", devices(129), 422, "spec.devices", "Too many: 129: must have at most 128 items"),
    Row("128 devices are accepted", devices(128)),
    Row(
        "at most 64 devices with taints",
        devices(65, taints=[{"key": "k", "effect": "NoSchedule"}]),
        422,
        "spec.devices",
        "must have at most 64 items",
    ),
    Row(
        "at most 64 devices consuming counters",
        devices(65, consumesCounters=[{"counterSet": "set", "counters": COUNTERS}]),
        422,
        "spec.devices",
        "must have at most 64 items",
    ),
    Row(
        "device names are unique", spec(devices=[{"name": "gpu-0"}, {"name": "gpu-0"}]), 422, "spec.devices[1]", 'Duplicate value: "gpu-0"'
    ),
    Row("device names are DNS labels", device(name="GPU_0"), 422, "spec.devices[0].name", "RFC 1123 label"),
    Row("a device name is required", device(name=None), 422, "spec.devices[0].name", "Required value"),
    Row(
        "at most 32 attributes and capacities",
        device(attributes={f"a{i}": {"int": i} for i in range(20)}, capacity={f"c{i}": {"value": "1"} for i in range(13)}),
        422,
        "spec.devices[0]",
        "must not exceed 32",
    ),
    Row("attribute names are C identifiers", attribute("bad-name", {"int": 1}), 422, "spec.devices[0].attributes", "C identifier"),
    Row("attribute identifiers at most 32 characters", attribute("a" * 33, {"int": 1}), 422, "spec.devices[0].attributes", "Too long"),
    Row("attribute domains are DNS subdomains", attribute("Bad_Domain/model", {"int": 1}), 422, "spec.devices[0].attributes", "subdomain"),
    Row(
        "a qualified attribute name needs its identifier",
        attribute("example.com/", {"int": 1}),
        422,
        "spec.devices[0].attributes",
        "the name must not be empty",
    ),
    Row(
        "an attribute has exactly one value",
        attribute("model", {"string": "a", "int": 1}),
        422,
        "spec.devices[0].attributes[model]",
        "exactly one value must be specified",
    ),
    Row(
        "an attribute has a value", attribute("model", {}), 422, "spec.devices[0].attributes[model]", "exactly one value must be specified"
    ),
    Row(
        "a list-typed attribute alone has no value left (alpha gate off)",
        attribute("model", {"strings": ["a"]}),
        422,
        "spec.devices[0].attributes[model]",
        "exactly one value must be specified",
    ),
    Row(
        "attribute strings at most 64 characters",
        attribute("model", {"string": "x" * 65}),
        422,
        "spec.devices[0].attributes[model].string",
        "Too long",
    ),
    Row(
        "attribute versions are semver",
        attribute("fw", {"version": "1.2"}),
        422,
        "spec.devices[0].attributes[fw].version",
        "semver.org spec 2.0.0",
    ),
    Row("capacity names are C identifiers", device(capacity={"mem-ory": {"value": "1"}}), 422, "spec.devices[0].capacity", "C identifier"),
    # consumable capacity
    Row(
        "a request policy needs allowMultipleAllocations",
        policy({"default": "1Gi"}, multiple=False),
        422,
        "spec.devices[0].capacity[memory].requestPolicy",
        "Forbidden: allowMultipleAllocations must be true",
    ),
    Row(
        "validValues or validRange, not both",
        policy({"default": "1Gi", "validValues": ["1Gi"], "validRange": {"min": "1Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy",
        "exactly one policy can be specified",
    ),
    Row(
        "validValues need a default",
        policy({"validValues": ["1Gi"]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.default",
        "required when validValues is defined",
    ),
    Row(
        "validValues ascending",
        policy({"default": "1Gi", "validValues": ["2Gi", "1Gi"]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validValues[1]",
        "sorted in ascending order",
    ),
    Row(
        "at most 10 validValues",
        policy({"default": "1Gi", "validValues": [f"{i}Gi" for i in range(1, 12)]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validValues",
        "Too many: 11: must have at most 10 items",
    ),
    Row(
        "validValues unique",
        policy({"default": "1Gi", "validValues": ["1Gi", "1Gi"]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validValues[1]",
        "Duplicate value",
    ),
    Row(
        "validValues within the capacity",
        policy({"default": "1Gi", "validValues": ["1Gi", "100Gi"]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validValues[1]",
        "option is larger than capacity value",
    ),
    Row(
        "the default is one of validValues",
        policy({"default": "3Gi", "validValues": ["1Gi", "2Gi"]}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validValues",
        "default value is not valid",
    ),
    Row(
        "validRange needs a default",
        policy({"validRange": {"min": "1Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.default",
        "required when validRange is defined",
    ),
    Row(
        "validRange needs a min",
        policy({"default": "1Gi", "validRange": {"max": "2Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.min",
        "Required value",
    ),
    Row(
        "validRange min within the capacity",
        policy({"default": "90Gi", "validRange": {"min": "90Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.min",
        "min is larger than capacity value",
    ),
    Row(
        "the default not below min",
        policy({"default": "1Gi", "validRange": {"min": "2Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.min",
        "default is less than min",
    ),
    Row(
        "min not above max",
        policy({"default": "4Gi", "validRange": {"min": "4Gi", "max": "2Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.max",
        "min is larger than max",
    ),
    Row(
        "max within the capacity",
        policy({"default": "4Gi", "validRange": {"min": "4Gi", "max": "100Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.max",
        "max is larger than capacity value",
    ),
    Row(
        "the default not above max",
        policy({"default": "8Gi", "validRange": {"min": "4Gi", "max": "6Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.max",
        "default is more than max",
    ),
    Row(
        "one step within the capacity",
        policy({"default": "40Gi", "validRange": {"min": "40Gi", "step": "50Gi"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.step",
        "is larger than capacity value",
    ),
    Row(
        "the default a whole number of steps from min",
        policy({"default": "3", "validRange": {"min": "1", "step": "4"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.step",
        "not a multiple of a given step",
    ),
    Row("a negative step that divides is accepted", policy({"default": "10Gi", "validRange": {"min": "10Gi", "step": "-10Gi"}}, "40Gi")),
    Row(
        "a zero step is refused (1.36 fails the request)",
        policy({"default": "1", "validRange": {"min": "1", "step": "0"}}),
        422,
        "spec.devices[0].capacity[memory].requestPolicy.validRange.step",
        "must not be zero",
    ),
    # taints
    Row(
        "at most 16 taints",
        device(taints=[{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)]),
        422,
        "spec.devices[0].taints",
        "Too many: 17: must have at most 16 items",
    ),
    Row("a taint key is required", taint(key=""), 422, "spec.devices[0].taints[0].key", "Required value"),
    Row("a taint key is a label key", taint(key="example.com/bad key"), 422, "spec.devices[0].taints[0].key", "Invalid value"),
    Row("a taint value is a label value", taint(value="not ok"), 422, "spec.devices[0].taints[0].value", "Invalid value"),
    Row("a taint effect is required", taint(effect=""), 422, "spec.devices[0].taints[0].effect", "Required value"),
    Row(
        "taint effects are NoSchedule, NoExecute or None",
        taint(effect="Future"),
        422,
        "spec.devices[0].taints[0].effect",
        'Unsupported value: "Future"',
    ),
    # partitionable devices
    Row(
        "at most 2 counter consumptions",
        consumes(*({"counterSet": f"s{i}", "counters": COUNTERS} for i in range(3))),
        422,
        "spec.devices[0].consumesCounters",
        "Too many: 3",
    ),
    Row(
        "consumed counter sets are unique",
        consumes({"counterSet": "s", "counters": COUNTERS}, {"counterSet": "s", "counters": COUNTERS}),
        422,
        "spec.devices[0].consumesCounters[1]",
        "Duplicate value",
    ),
    Row(
        "a consumption names its counter set",
        consumes({"counters": COUNTERS}),
        422,
        "spec.devices[0].consumesCounters[0].counterSet",
        "Required value",
    ),
    Row(
        "a consumption has counters",
        consumes({"counterSet": "s", "counters": {}}),
        422,
        "spec.devices[0].consumesCounters[0].counters",
        "Required value",
    ),
    Row(
        "at most 32 counters per consumption",
        consumes({"counterSet": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}),
        422,
        "spec.devices[0].consumesCounters[0].counters",
        "Too many: 33",
    ),
    Row(
        "counter names are DNS labels",
        consumes({"counterSet": "s", "counters": {"Mem": {"value": "1"}}}),
        422,
        "spec.devices[0].consumesCounters[0].counters",
        "RFC 1123 label",
    ),
    Row("a counter set slice is accepted", counter_sets({"name": "set", "counters": COUNTERS})),
    Row(
        "at most 8 counter sets",
        counter_sets(*({"name": f"s{i}", "counters": COUNTERS} for i in range(9))),
        422,
        "spec.sharedCounters",
        "Too many: 9: must have at most 8 items",
    ),
    Row(
        "counter set names are unique",
        counter_sets({"name": "s", "counters": COUNTERS}, {"name": "s", "counters": COUNTERS}),
        422,
        "spec.sharedCounters[1]",
        "Duplicate value",
    ),
    Row("a counter set has a name", counter_sets({"counters": COUNTERS}), 422, "spec.sharedCounters[0].name", "Required value"),
    Row(
        "a counter set has counters", counter_sets({"name": "s", "counters": {}}), 422, "spec.sharedCounters[0].counters", "Required value"
    ),
    Row(
        "at most 32 counters per set",
        counter_sets({"name": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}),
        422,
        "spec.sharedCounters[0].counters",
        "Too many: 33",
    ),
    # binding conditions
    Row(
        "binding conditions come with failure conditions",
        device(bindingConditions=["ready"]),
        422,
        "spec.devices[0].bindingFailureConditions",
        "required to use bindingConditions",
    ),
    Row(
        "failure conditions come with binding conditions",
        device(bindingFailureConditions=["failed"]),
        422,
        "spec.devices[0].bindingConditions",
        "required to use bindingFailureConditions",
    ),
    Row(
        "at most 4 binding conditions",
        device(bindingConditions=[f"c{i}" for i in range(5)], bindingFailureConditions=["f"]),
        422,
        "spec.devices[0].bindingConditions",
        "Too many: 5",
    ),
    Row(
        "binding conditions unique",
        device(bindingConditions=["a", "a"], bindingFailureConditions=["f"]),
        422,
        "spec.devices[0].bindingConditions[1]",
        "Duplicate value",
    ),
    Row(
        "failure conditions do not overlap binding conditions",
        device(bindingConditions=["a"], bindingFailureConditions=["a"]),
        422,
        "spec.devices[0].bindingFailureConditions[0]",
        "must not overlap",
    ),
    Row(
        "binding conditions are label keys",
        device(bindingConditions=["not ok"], bindingFailureConditions=["f"]),
        422,
        "spec.devices[0].bindingConditions[0]",
        "Invalid value",
    ),
    # what does not decode
    Row(
        "a capacity that is not a quantity does not decode",
        device(capacity={"memory": {"value": "lots"}}),
        400,
        "",
        "quantities must match the regular expression",
    ),
    Row("a taint time that is not RFC 3339 does not decode", taint(timeAdded="yesterday"), 400, "", "RFC 3339"),
]


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(crds=False) as server:
        yield server


async def send(api: FakeApiServer, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession(api.url) as s, s.request(method, path, json=body) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_a_slice_is_accepted_or_refused_as_by_the_api_server(api: FakeApiServer, row: Row) -> None:
    body = base()
    row.edit(body)
    status, out = await send(api, "POST", SLICES, body)
    assert status == row.status, out
    if status == 201:
        assert api.get("resourceslices", None, "s") is not None
        return
    assert row.detail in out["message"], out["message"]
    if status == 422:
        causes = out["details"]["causes"]
        assert row.field in [c["field"] for c in causes], causes
        assert f"{row.field}: " in out["message"], out["message"]


def test_dropped_alpha_fields_are_not_stored() -> None:
    """DRAListTypeAttributes and DRANodeAllocatableResources are off in 1.36: their fields vanish as on a real server."""
    from kubesim.fakeapi.resource_slices import slice_errors

    body = base()
    attribute("model", {"string": "a", "strings": ["b"]})(body)
    device(nodeAllocatableResourceMappings={"cpu": {}})(body)
    assert slice_errors(None, body) == []
    stored = body["spec"]["devices"][0]
    assert stored["attributes"]["model"] == {"string": "a"} and "nodeAllocatableResourceMappings" not in stored


UPDATES = [
    # name, edit of the stored slice, field refused (None: accepted)
    ("the driver is immutable", spec(driver="other.example.com"), "spec.driver"),
    ("the pool name is immutable", spec(pool={"name": "other", "resourceSliceCount": 1}), "spec.pool.name"),
    ("the node name is immutable", spec(nodeName="n2"), "spec.nodeName"),
    ("devices may change", device(attributes={"model": {"string": "b200"}}), None),
]


@pytest.mark.parametrize(("name", "edit", "field"), UPDATES, ids=[u[0] for u in UPDATES])
async def test_an_update_keeps_what_is_immutable(api: FakeApiServer, name: str, edit: Callable[[Slice], None], field: str | None) -> None:
    status, stored = await send(api, "POST", SLICES, base())
    assert status == 201, stored
    new = copy.deepcopy(stored)
    edit(new)
    status, out = await send(api, "PUT", f"{SLICES}/s", new)
    if field is None:
        assert status == 200, out
    else:
        assert status == 422 and f"{field}: Invalid value" in out["message"] and "field is immutable" in out["message"], out


async def test_taints_are_checked_only_when_they_change(api: FakeApiServer) -> None:
    """A stored taint a newer rule would refuse stays while the driver leaves it alone (the API server ratchets taints)."""
    old = base()
    taint(effect="Future")(old)
    api.create(old)  # written before the rule, as a privileged helper may
    current = api.get("resourceslices", None, "s")
    assert current is not None
    current["spec"]["devices"][0]["attributes"]["model"] = {"string": "b200"}
    status, out = await send(api, "PUT", f"{SLICES}/s", current)
    assert status == 200, out
    current = out
    current["spec"]["devices"][0]["taints"][0]["value"] = "v"
    status, out = await send(api, "PUT", f"{SLICES}/s", current)
    assert status == 422 and "spec.devices[0].taints[0].effect" in out["message"], out


# ---------------------------------------------------------------------- the API server accepts, the extender refuses


def gpu_slice(**capacity: Any) -> Slice:
    body = base()
    body["metadata"]["name"] = "n1-gpus"
    body["spec"]["devices"][0].update(capacity=capacity, allowMultipleAllocations=True)
    return body


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ApiCluster]:
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_class())
        api.create(node("n1", hostname=True))
        c = ApiCluster(api, tmp_path)
        yield c
        await c.stop()


REFUSED_BY_THE_EXTENDER = [
    # name, the device's capacity (the API server accepts it), words of the extender's reason
    (
        "negative capacity: the device is refused",
        {"memory": {"value": "-80Gi"}},
        "spec.devices[0].capacity.memory.value: -80Gi is negative",
    ),
    (
        "a policy default above the capacity: the slice is refused",
        {"memory": {"value": "80Gi", "requestPolicy": {"default": "100Gi"}}},
        "must not exceed the capacity's value",
    ),
]


@pytest.mark.parametrize(("name", "capacity", "reason"), REFUSED_BY_THE_EXTENDER, ids=[r[0] for r in REFUSED_BY_THE_EXTENDER])
async def test_the_api_server_accepts_a_slice_the_extender_refuses(
    cluster: ApiCluster, caplog: pytest.LogCaptureFixture, name: str, capacity: Any, reason: str
) -> None:
    """End to end: the driver's write succeeds; the extender refuses the device (in /filter's answer) or the slice (a logged problem, an Event in production)."""
    status, out = await send(cluster.api, "POST", SLICES, gpu_slice(**capacity))
    assert status == 201, out
    cluster.api.create(claim("c"))
    pod = cluster.api.create(pod_with_claim("p", "c"))
    with caplog.at_level(logging.WARNING, logger="dra_extender"):
        await cluster.start()
        await cluster.caught_up()
        passed, failed = await cluster.filter(pod, ["n1"])
    assert passed == [] and list(failed) == ["n1"], (passed, failed)
    refusals = [failed["n1"]] + [str(getattr(r, "err", "")) for r in caplog.records if r.getMessage() == "ignoring invalid object"]
    assert any(reason in text for text in refusals), refusals


async def test_a_patch_is_validated_like_a_write(api: FakeApiServer) -> None:
    """A merge patch is applied with the fake's own RFC 7386 code, then the slice rules judge the result."""
    status, _ = await send(api, "POST", SLICES, base())
    assert status == 201
    patch = {"spec": {"devices": [{"name": "gpu-0", "taints": [{"key": "example.com/broken", "effect": "Later"}]}]}}
    async with (
        aiohttp.ClientSession(api.url) as s,
        s.patch(f"{SLICES}/s", json=patch, headers={"Content-Type": MERGE_PATCH}) as r,
    ):
        assert r.status == 422 and "spec.devices[0].taints[0].effect" in (await r.json())["message"]
