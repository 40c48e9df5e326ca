"""The shipped CRDs against the API server's rules: CEL cost budget, schema validation, status semantics.

A real kube-apiserver prices every `x-kubernetes-validations` rule before it
accepts a CRD (cel-go's estimate sized from the schema, times how often the
rule can run) and validates every custom resource against the schema. These
tests hold the shipped CRDs to the same rules, through the fake API server
over real HTTP as `kubectl` would use it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from allocator.cel.cost import (
    MAX_REQUEST_SIZE_BYTES,
    STATIC_ESTIMATED_COST_LIMIT,
    STATIC_ESTIMATED_CRD_COST_LIMIT,
    cost_error_message,
    estimate_rule_cost,
    schema_decl_type,
    schema_rule_costs,
)
from allocator.cel.engine import parse
from kubesim import objects
from kubesim.fakeapi import FakeApiServer
from kubesim.fakeapi.crd import crd_errors
from kubesim.fakeapi.server import SHIPPED_CRDS

ROOT = Path(__file__).resolve().parents[2]
GROUP = "resource.dra-extender.io"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def shipped() -> dict[str, dict[str, Any]]:
    return {p.name.split(".")[0]: yaml.safe_load(p.read_text()) for p in sorted(SHIPPED_CRDS.glob("*.yaml"))}


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def unbounded_patch_crd() -> dict[str, Any]:
    """The ResourceSlicePatch CRD as first shipped, before its maps were bounded: a real 1.36.2 server refused it."""
    crd = copy.deepcopy(shipped()["resourceslicepatches"])
    devices = schema_of(crd)["properties"]["spec"]["properties"]["devices"]["properties"]
    for name in ("attributes", "capacity"):
        del devices[name]["maxProperties"]
    return crd


# ----------------------------------------------------------------------------- the cost estimate


def test_estimate_reproduces_what_a_real_server_refused() -> None:
    """Calibration: the factors a real kube-apiserver 1.36.2 printed for the unbounded schema, to the digit."""
    errors = [str(e) for e in crd_errors(unbounded_patch_crd())]
    base = "spec.validation.openAPIV3Schema.properties[spec].properties[devices].properties[attributes]"
    hint = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    assert errors == [
        f"{base}.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.258288x {hint}",
        f"{base}.additionalProperties.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.048576x {hint}",
    ]


def _rules() -> list[tuple[str, Any]]:
    out = []
    for name, crd in shipped().items():
        for rc in schema_rule_costs(schema_of(crd), parse):
            out.append(pytest.param(rc, id=f"{name}:{rc.path}"))
    return out


@pytest.mark.parametrize("rc", _rules())
def test_every_shipped_rule_is_within_the_budget(rc: Any) -> None:
    """Each rule's estimated cost (raw cost x cardinality) under StaticEstimatedCostLimit, from bounds the schema declares."""
    assert rc.cost <= STATIC_ESTIMATED_COST_LIMIT, cost_error_message("estimated rule cost", rc.cost, STATIC_ESTIMATED_COST_LIMIT)
    assert rc.bounded, f"{rc.path}: an enclosing list or map has no maxItems/maxProperties (the server assumes {rc.cardinality} runs)"


@pytest.mark.parametrize("name", sorted(shipped()))
def test_every_shipped_crd_is_within_the_total_budget(name: str) -> None:
    total = sum(rc.cost for rc in schema_rule_costs(schema_of(shipped()[name]), parse))
    assert total <= STATIC_ESTIMATED_CRD_COST_LIMIT, cost_error_message(
        "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema", total, STATIC_ESTIMATED_CRD_COST_LIMIT
    )
    assert crd_errors(shipped()[name]) == []


STRING_MAP = {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string"}}
NAMED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "free": {"type": "string"},
        "items": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 2}},
        "a": {"type": "integer"},
    },
}
UNBOUNDED_STRING = MAX_REQUEST_SIZE_BYTES - 2

# cel-go's arithmetic worked by hand: identifiers and field selections 1, literals 0, presence tests 0,
# && || ?: add their operands, other calls 1 + operands, string work sized by the schema x 0.1
# (regex length x 0.25), macros range x (loop condition + step) plus their fixed parts.
COSTS = [
    pytest.param(STRING_MAP, "self.size() <= 3", 1 + 1 + 1, id="size-and-compare"),
    pytest.param(STRING_MAP, "self.all(k, k.matches('^a$'))", 1 + 1 + 10 * (2 + 1 + (1 * 1 + 1)), id="all-over-bounded-map"),
    pytest.param(STRING_MAP, "self.exists(k, k == 'x')", 1 + 1 + 10 * (3 + 1 + (1 + 0 + 0)), id="exists-keys-are-unsized"),
    pytest.param(NAMED, "self.name == 'abc'", 2 + 1, id="equality-of-short-strings"),
    pytest.param(NAMED, "self.name.startsWith('ab')", 2 + 1, id="startsWith"),
    pytest.param(NAMED, "has(self.a) ? self.a > 1 : true", 1 + (2 + 0 + 1), id="has-and-ternary"),
    pytest.param(NAMED, "self.items.exists(i, i == 'x')", 2 + 1 + 5 * (3 + 1 + (1 + 0 + 1)), id="exists-over-bounded-list"),
    pytest.param(NAMED, "self.free.matches('^x+$')", 2 + -(-(UNBOUNDED_STRING + 1) // 10) * 1, id="regex-on-unbounded-string"),
    pytest.param(NAMED, "self.name.matches('^x+$')", 2 + -(-(40 + 1) // 10) * 1, id="regex-on-bounded-string"),
    pytest.param(NAMED, "self.name + 'x' == 'yx'", (2 + 0 + 5) + 1, id="concatenation-sized"),
    pytest.param(NAMED, "self.items.filter(i, i == 'x').size() == 0", 2 + 11 + 5 * (2 + 13) + 1 + 0 + 1, id="filter-then-size"),
]


@pytest.mark.parametrize(("schema", "rule", "cost"), COSTS)
def test_rule_costs_follow_cel_go(schema: dict[str, Any], rule: str, cost: int) -> None:
    decl = schema_decl_type(schema)
    assert decl is not None
    assert estimate_rule_cost(parse(rule), decl) == cost


def test_unbounded_cardinality_comes_from_the_request_size() -> None:
    """A rule under an unbounded list runs as often as the smallest item fits in 3 MiB (comma included)."""
    schema = {
        "type": "object",
        "properties": {
            "xs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["n"],
                    "properties": {"n": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.n > 0"}],
                },
            }
        },
    }
    (rc,) = schema_rule_costs(schema, parse)
    assert (rc.raw_cost, rc.bounded) == (3, False)
    assert rc.cardinality == MAX_REQUEST_SIZE_BYTES // (2 + len("n") + 1 + 4 + 1)  # {"n":0} plus a comma
    schema["properties"]["xs"]["maxItems"] = 7
    (rc,) = schema_rule_costs(schema, parse)
    assert (rc.cardinality, rc.cost, rc.bounded) == (7, 21, True)


# ----------------------------------------------------------------------------- applying CRDs over HTTP


@pytest.fixture
async def bare():
    """A fake API server without the project's CRDs: tests install them as an admin would."""
    async with FakeApiServer(crds=False) as server:
        yield server


async def call(api: FakeApiServer, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else yaml.safe_dump(body) if "yaml" in content_type else None
    async with aiohttp.ClientSession() as s:
        kw: dict[str, Any] = {"data": data, "headers": {"Content-Type": content_type}} if data is not None else {"json": body}
        async with s.request(method, api.url + path, **kw) as r:
            return r.status, await r.json()


async def install_shipped(api: FakeApiServer) -> None:
    for p in sorted(SHIPPED_CRDS.glob("*.yaml")):  # kubectl apply -f charts/dra-extender/crds/ (YAML sent as JSON)
        status, body = await call(api, "POST", CRD_PATH, yaml.safe_load(p.read_text()))
        assert status == 201, body


async def test_an_over_budget_crd_is_refused_with_the_servers_words(bare) -> None:
    status, body = await call(bare, "POST", CRD_PATH, unbounded_patch_crd())
    assert status == 422 and body["kind"] == "Status" and body["reason"] == "Invalid"
    assert body["message"].startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "resourceslicepatches.resource.dra-extender.io" is invalid: ['
    )
    assert "factor of 1.048576x" in body["message"] and "factor of 1.258288x" in body["message"]
    assert [c["reason"] for c in body["details"]["causes"]] == ["FieldValueForbidden"] * 2
    status, _ = await call(bare, "GET", f"/apis/{GROUP}/v1alpha1/resourceslicepatches")
    assert status == 404, "a refused CRD serves nothing"


async def test_a_crd_whose_rule_does_not_compile_is_refused(bare) -> None:
    crd = copy.deepcopy(shipped()["resourceslicepatches"])
    schema_of(crd)["properties"]["spec"]["x-kubernetes-validations"] = [{"rule": "self.devices.nosuchfunction()", "message": "m"}]
    status, body = await call(bare, "POST", CRD_PATH, crd)
    assert status == 422
    (cause,) = body["details"]["causes"]
    assert cause["field"] == "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    assert "compilation failed" in cause["message"]


def rule(spec: dict[str, Any], name: str = "r") -> dict[str, Any]:
    """The project's rule with `spec` as given, valid or not (kubesim/objects.py)."""
    return objects.rule(name, group=GROUP, spec=spec)


def patch(devices: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "ResourceSlicePatch", "metadata": {"name": name}, "spec": {"devices": devices}}


TAINT = {"key": "example.com/maintenance", "effect": "NoSchedule"}
# (object, the field a real server names, the start of its message after the field); None: accepted.
OBJECTS = [
    pytest.param(
        rule(
            {
                "deviceSelector": {"driver": "gpu.example.com", "selectors": [{"cel": {"expression": "true"}}]},
                "taint": {**TAINT, "evictionsPerSecond": 2},
            }
        ),
        None,
        None,
        id="rule-valid",
    ),
    pytest.param(
        rule({"taint": {**TAINT, "key": "not a key!"}}),
        "spec.taint.key",
        'Invalid value: "not a key!": spec.taint.key in body should match',
        id="rule-bad-key",
    ),
    pytest.param(rule({"taint": {"key": "k"}}), "spec.taint.effect", "Required value", id="rule-missing-effect"),
    pytest.param(
        rule({"taint": {**TAINT, "effect": "NoExecuted"}}),
        "spec.taint.effect",
        'Unsupported value: "NoExecuted": supported values: "None", "NoSchedule", "NoExecute"',
        id="rule-unknown-effect",
    ),
    pytest.param(
        rule({"taint": {**TAINT, "value": "v" * 64}}), "spec.taint.value", "Too long: may not be more than 63 bytes", id="rule-long-value"
    ),
    pytest.param(
        rule({"taint": {**TAINT, "evictionsPerSecond": 0}}),
        "spec.taint.evictionsPerSecond",
        "Invalid value: 0: spec.taint.evictionsPerSecond in body should be greater than 0",
        id="rule-zero-rate",
    ),
    pytest.param(
        rule({"deviceSelector": {"selectors": [{"cel": {"expression": "true"}}] * 11}, "taint": TAINT}),
        "spec.deviceSelector.selectors",
        "Too many: 11: must have at most 10 items",
        id="rule-too-many-selectors",
    ),
    pytest.param(
        rule({"taint": {**TAINT, "timeAdded": "yesterday"}}),
        "spec.taint.timeAdded",
        'Invalid value: "yesterday": spec.taint.timeAdded in body must be of type date-time',
        id="rule-bad-time",
    ),
    pytest.param(
        patch(
            {
                "filter": {"pool": "node-b"},
                "priority": 3,
                "attributes": {"gpu.example.com/model": {"string": "h100"}, "gpu.example.com/old": {"null": {}}},
                "capacity": {"gpu.example.com/memory": {"value": "80Gi"}},
            }
        ),
        None,
        None,
        id="patch-valid",
    ),
    pytest.param(
        patch({"attributes": {"gpu.example.com/model": {"string": "h100", "int": 1}}}),
        "spec.devices.attributes[gpu.example.com/model]",
        'Invalid value: "object": exactly one of int, bool, string, version, null must be set',
        id="patch-two-values",
    ),
    pytest.param(
        patch({"attributes": {"model": {"string": "h100"}}}),
        "spec.devices.attributes",
        'Invalid value: "object": names must be fully qualified',
        id="patch-unqualified-name",
    ),
    pytest.param(
        patch({"attributes": {f"d.example.com/a{i}": {"int": i} for i in range(33)}}),
        "spec.devices.attributes",
        "Too many: 33: must have at most 32 items",
        id="patch-33-attributes",
    ),
    pytest.param(
        patch(
            {
                "attributes": {f"d.example.com/a{i}": {"int": i} for i in range(20)},
                "capacity": {f"d.example.com/c{i}": {"value": 1} for i in range(13)},
            }
        ),
        "spec.devices",
        'Invalid value: "object": at most 32 attributes and capacities combined',
        id="patch-33-entries",
    ),
    pytest.param(
        patch({"capacity": {"d.example.com/mem": {"value": "lots"}}}),
        "spec.devices.capacity[d.example.com/mem].value",
        'Invalid value: "lots": spec.devices.capacity[d.example.com/mem].value in body should match',
        id="patch-bad-quantity",
    ),
    pytest.param(
        patch({"attributes": {"d.example.com/s": {"string": "s" * 65}}}),
        "spec.devices.attributes[d.example.com/s].string",
        "Too long: may not be more than 64 bytes",
        id="patch-long-string",
    ),
    pytest.param(
        patch({"capacity": {f"d.example.com/c{i}": {"value": 1} for i in range(33)}}),
        "spec.devices.capacity",
        "Too many: 33: must have at most 32 items",
        id="patch-33-capacities",
    ),
    pytest.param(
        patch({"filter": {"driver": "d" * 64}}),
        "spec.devices.filter.driver",
        "Too long: may not be more than 63 bytes",
        id="patch-long-driver",
    ),
    pytest.param(
        patch({"filter": {"selectors": [{"cel": {"expression": "true"}}] * 33}}),
        "spec.devices.filter.selectors",
        "Too many: 33: must have at most 32 items",
        id="patch-33-selectors",
    ),
    pytest.param(
        patch({"filter": {"selectors": [{"cel": {"expression": " " * 10237 + "true"}}]}}),
        "spec.devices.filter.selectors[0].cel.expression",
        "Too long: may not be more than 10240 bytes",
        id="patch-long-selector",
    ),
    pytest.param(
        rule({"deviceSelector": {"driver": "d" * 64}, "taint": TAINT}),
        "spec.deviceSelector.driver",
        "Too long: may not be more than 63 bytes",
        id="rule-long-driver",
    ),
    pytest.param(
        patch({"priority": "high"}),
        "spec.devices.priority",
        'Invalid value: "high": spec.devices.priority in body must be of type integer: "high"',
        id="patch-priority-type",
    ),
]


@pytest.mark.parametrize(("obj", "field", "message"), OBJECTS)
async def test_custom_resources_are_validated_like_the_server(bare, obj: dict[str, Any], field: str | None, message: str | None) -> None:
    await install_shipped(bare)
    plural = {"DeviceTaintRule": "devicetaintrules", "ResourceSlicePatch": "resourceslicepatches"}[obj["kind"]]
    status, body = await call(bare, "POST", f"/apis/{GROUP}/v1alpha1/{plural}", obj)
    if field is None:
        assert status == 201, body
        assert body["spec"] == obj["spec"]
        return
    assert status == 422, body
    assert body["message"].startswith(f'{obj["kind"]}.{GROUP} "{obj["metadata"]["name"]}" is invalid: ')
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert field in causes, causes
    assert causes[field].startswith(message), causes[field]
    assert bare.get(plural, None, obj["metadata"]["name"], group=GROUP) is None


async def test_unknown_fields_and_nulls_are_pruned(bare) -> None:
    await install_shipped(bare)
    obj = patch({"attributes": {"d.example.com/a": {"int": 1, "bool": None}}, "colour": "blue"})
    status, body = await call(bare, "POST", f"/apis/{GROUP}/v1alpha1/resourceslicepatches", obj)
    assert status == 201, body
    assert body["spec"] == {"devices": {"attributes": {"d.example.com/a": {"int": 1}}}}


async def test_the_documented_example_is_accepted_as_yaml(bare) -> None:
    """`kubectl create -f examples/resourceslicepatches/...` (sent as YAML here, as the body kubectl may send)."""
    await install_shipped(bare)
    text = (ROOT / "examples" / "resourceslicepatches" / "node-b-gpu-0-h100.yaml").read_text()
    status, body = await call(bare, "POST", f"/apis/{GROUP}/v1alpha1/resourceslicepatches", text, "application/yaml")
    assert status == 201, body
    assert body["spec"]["devices"]["attributes"] == {"gpu.example.com/model": {"string": "h100"}}


async def test_status_subresource_and_generation(bare) -> None:
    """Spec changes bump generation; status goes only through /status, is validated, and does not."""
    await install_shipped(bare)
    base = f"/apis/{GROUP}/v1alpha1/devicetaintrules"
    obj = rule({"taint": TAINT})
    cond = {
        "type": "EvictionInProgress",
        "status": "False",
        "reason": "NotStarted",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status, created = await call(bare, "POST", base, {**obj, "status": {"conditions": [cond]}})
    assert status == 201 and "status" not in created and created["metadata"]["generation"] == 1

    status, out = await call(bare, "PUT", f"{base}/r/status", {**created, "status": {"conditions": [cond]}})
    assert status == 200 and out["status"] == {"conditions": [cond]} and out["metadata"]["generation"] == 1

    bad = {**out, "status": {"conditions": [{**cond, "status": "Maybe"}]}}
    status, body = await call(bare, "PUT", f"{base}/r/status", bad)
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.conditions[0].status"
    assert body["details"]["causes"][0]["message"] == 'Unsupported value: "Maybe": supported values: "True", "False", "Unknown"'

    changed = {**out, "spec": {"taint": {**TAINT, "value": "now"}}, "status": {"conditions": []}}
    status, after = await call(bare, "PUT", f"{base}/r", changed)
    assert status == 200 and after["metadata"]["generation"] == 2
    assert after["status"] == {"conditions": [cond]}, "the main resource ignores status"

    status, relabelled = await call(bare, "PUT", f"{base}/r", {**after, "metadata": {**after["metadata"], "labels": {"a": "b"}}})
    assert status == 200 and relabelled["metadata"]["generation"] == 2, "metadata is not spec"


async def test_an_effect_stored_before_the_enum_ratchets(bare) -> None:
    """A rule written under a CRD without the effect enum keeps its status writable after the upgrade
    (CRDValidationRatcheting, GA in 1.33); changing the effect to another unknown one is refused."""
    old_crd = copy.deepcopy(shipped()["devicetaintrules"])
    effect = schema_of(old_crd)["properties"]["spec"]["properties"]["taint"]["properties"]["effect"]
    effect.pop("enum")
    status, _ = await call(bare, "POST", CRD_PATH, old_crd)
    assert status == 201
    base = f"/apis/{GROUP}/v1alpha1/devicetaintrules"
    status, created = await call(bare, "POST", base, rule({"taint": {**TAINT, "effect": "NoExecuted"}}))
    assert status == 201, created
    new_crd = shipped()["devicetaintrules"]
    status, current = await call(bare, "GET", f"{CRD_PATH}/{new_crd['metadata']['name']}")
    status, _ = await call(bare, "PUT", f"{CRD_PATH}/{new_crd['metadata']['name']}", {**new_crd, "metadata": current["metadata"]})
    assert status == 200
    cond = {
        "type": "EvictionInProgress",
        "status": "False",
        "reason": "OtherEffect",
        "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status, body = await call(bare, "PUT", f"{base}/r/status", {**created, "status": {"conditions": [cond]}})
    assert status == 200, body
    status, body = await call(bare, "PUT", f"{base}/r", {**body, "spec": {"taint": {**TAINT, "effect": "Evict"}}})
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.taint.effect", body


async def test_deleting_a_crd_stops_serving_its_kind(bare) -> None:
    await install_shipped(bare)
    status, _ = await call(bare, "POST", f"/apis/{GROUP}/v1alpha1/resourceslicepatches", patch({}))
    assert status == 201
    status, _ = await call(bare, "DELETE", f"{CRD_PATH}/resourceslicepatches.{GROUP}")
    assert status == 200
    status, _ = await call(bare, "GET", f"/apis/{GROUP}/v1alpha1/resourceslicepatches")
    assert status == 404
    status, _ = await call(bare, "GET", f"/apis/{GROUP}/v1alpha1/devicetaintrules")
    assert status == 200


def test_the_docs_show_the_example_as_shipped() -> None:
    """docs/resourceslicepatches.md quotes examples/ verbatim, so the documented patch is the tested one."""
    doc = (ROOT / "docs" / "resourceslicepatches.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in doc.split("```yaml")[1:]]
    shown = [b[: b.index("```")] for b in blocks if "kind: ResourceSlicePatch" in b]
    assert shown == [(ROOT / "examples" / "resourceslicepatches" / "node-b-gpu-0-h100.yaml").read_text()]
