"""CustomResourceDefinitions in the fake API server: refused and enforced as a real one does.

A CRD is checked when it is written (names, versions, a structural schema,
every `x-kubernetes-validations` rule compiling, and each rule's *estimated*
cost within the API server's budget, `allocator.cel.cost`); once stored it
serves its kind, and every write of a custom resource is validated against
the schema: null values of non-nullable fields and unknown fields are pruned,
then OpenAPI (type, required, enum, pattern, min/max length, items,
properties, minimum, date-time) and the CEL rules, evaluated with the
project's CEL engine. Errors name the field and use the API server's words,
so a test that passes here fails for the same reason on a real cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import celpy
from celpy import celtypes

from allocator.cel import lib
from allocator.cel.check import DYN, Checker, CheckError
from allocator.cel.cost import (
    STATIC_ESTIMATED_COST_LIMIT,
    STATIC_ESTIMATED_CRD_COST_LIMIT,
    cost_error_message,
    escape_property,
    schema_rule_costs,
)
from allocator.cel.engine import parse  # the engine's own parser
from allocator.cel.interpret import INTERP_FUNCTIONS, interpreter  # and runner
from kubesim.fakeapi.field_errors import FieldError
from kubesim.fakeapi.field_errors import go_value as _go_value
from kubesim.fakeapi.registry import STATUS, ResourceType

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {_go_value(value)}: {detail}")


# ---------------------------------------------------------------- CEL rules on `self`


class _RuleChecker(Checker):
    """The selector checker with `self` and `oldSelf` (of the schema's type, seen as dyn) instead of `device`."""

    def t_ident(self, node: Any) -> str:
        name = str(node.children[0])
        if self._lookup(name) is None and name in ("self", "oldSelf"):
            node.cel_ident = "var"
            return DYN
        return super().t_ident(node)


@dataclass
class CompiledRule:
    rule: str
    message: str
    uses_old_self: bool
    run: Callable[[Any], Any]


def compile_rule(rule: str) -> CompiledRule:
    """Parse and check a rule with the project's CEL engine; raises ValueError with the reason."""
    try:
        tree = parse(rule)
    except Exception as e:
        raise ValueError(f"compilation failed: {e}") from None
    try:
        t = _RuleChecker().visit(tree)
    except CheckError as e:
        raise ValueError(f"compilation failed: {e}") from None
    if t not in (DYN, "bool"):
        raise ValueError("cel expression must evaluate to a bool")
    return CompiledRule(rule, "", "oldSelf" in rule, interpreter(tree))


def _cel_value(schema: dict[str, Any] | None, value: Any) -> Any:
    """JSON as CEL sees it: object properties escaped (`null` -> `__null__`), map keys as they are."""
    if isinstance(value, dict):
        schema = schema or {}
        if isinstance(schema.get("additionalProperties"), dict):
            return {k: _cel_value(schema["additionalProperties"], v) for k, v in value.items()}
        props = schema.get("properties") or {}
        out = {}
        for k, v in value.items():
            escaped = escape_property(k)
            if escaped is not None:
                out[escaped] = _cel_value(props.get(k), v)
        return out
    if isinstance(value, list):
        return [_cel_value((schema or {}).get("items"), v) for v in value]
    return value


def _evaluate(rule: CompiledRule, schema: dict[str, Any], value: Any, old: Any) -> bool | str:
    """True/False, or the runtime error's text."""
    variables = {"self": celpy.json_to_cel(_cel_value(schema, value))}
    if rule.uses_old_self:
        if old is None:
            return True  # transition rules run on updates only
        variables["oldSelf"] = celpy.json_to_cel(_cel_value(schema, old))
    lib.reset_budget()
    try:
        result = rule.run(celpy.Activation(functions=INTERP_FUNCTIONS, vars=variables))
    except lib.CostLimitExceeded as e:
        return str(e)
    if isinstance(result, celtypes.BoolType) or result is True or result is False:
        return bool(result)
    return lib.reason(result) if isinstance(result, BaseException) else f"expected a bool, got {lib.kind(result)}"


# ---------------------------------------------------------------- validating custom resources


class SchemaValidator:
    """One version's openAPIV3Schema: prune, then validate a custom resource as the API server does."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._rules: dict[str, CompiledRule] = {}

    def _rule(self, text: str) -> CompiledRule:
        compiled = self._rules.get(text)
        if compiled is None:
            compiled = self._rules[text] = compile_rule(text)
        return compiled

    def prune(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Unknown fields and nulls of non-nullable fields removed (metadata, apiVersion, kind kept)."""
        props = self.schema.get("properties") or {}
        out = {}
        for k, v in obj.items():
            if k in ("apiVersion", "kind", "metadata"):
                out[k] = v
            elif k in props or self.schema.get("x-kubernetes-preserve-unknown-fields"):
                pruned = _prune(props.get(k, {}), v)
                if pruned is not _DROP:
                    out[k] = pruned
        return out

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
        errors: list[FieldError] = []
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        old_body = {k: v for k, v in old.items() if k not in ("apiVersion", "kind", "metadata")} if old is not None else None
        root = {
            **self.schema,
            "properties": {k: v for k, v in (self.schema.get("properties") or {}).items() if k not in ("apiVersion", "kind", "metadata")},
        }
        rule_errors: list[FieldError] = []
        self._node(root, body, old_body, "", errors, rule_errors)
        return errors + rule_errors  # schema errors first, then the rules', as the server lists them

    def _node(
        self, schema: dict[str, Any], value: Any, old: Any, path: str, errors: list[FieldError], rule_errors: list[FieldError]
    ) -> None:
        before = len(errors)
        self._openapi(schema, value, old, path, errors, rule_errors)
        if len(errors) > before and isinstance(value, str | int | float | bool) and value == old:
            # Validation ratcheting (CRDValidationRatcheting, GA in 1.33): an unchanged value that a
            # newer schema refuses (an enum added later) does not block updates of the rest, e.g. status.
            del errors[before:]
        if len(errors) > before:
            return  # CEL rules see only values that passed the schema
        for _i, r in enumerate(schema.get("x-kubernetes-validations") or ()):
            try:
                rule = self._rule(r["rule"])
            except ValueError as e:
                rule_errors.append(_invalid(path or "<root>", value, str(e)))
                continue
            outcome = _evaluate(rule, schema, value, old)
            where = path or "<nil>"
            if outcome is False:
                message = r.get("message") or f"failed rule: {r['rule'].strip()}"
                target = f"{path}.{r['fieldPath'].lstrip('.')}" if r.get("fieldPath") else where
                rule_errors.append(FieldError("FieldValueInvalid", target, f"Invalid value: {_go_value(value)}: {message}"))
            elif outcome is not True:
                rule_errors.append(_invalid(where, value, f"rule evaluation error: {r['rule'].strip()}: {outcome}"))

    def _openapi(
        self, schema: dict[str, Any], value: Any, old: Any, path: str, errors: list[FieldError], rule_errors: list[FieldError]
    ) -> None:
        name = path or "<root>"
        if schema.get("x-kubernetes-int-or-string"):
            if isinstance(value, bool) or not isinstance(value, int | str):
                errors.append(_invalid(name, value, f"{name} in body must be of type integer,string: {_go_value(value)}"))
                return
            if isinstance(value, str):
                self._string(schema, value, name, errors)
            return
        kind = schema.get("type")
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
        }
        if kind in checks and not checks[kind](value):
            errors.append(_invalid(name, value, f"{name} in body must be of type {kind}: {_go_value(value)}"))
            return
        if "enum" in schema and value not in schema["enum"]:
            supported = ", ".join(_go_value(e) for e in schema["enum"])
            errors.append(
                FieldError("FieldValueNotSupported", name, f"Unsupported value: {_go_value(value)}: supported values: {supported}")
            )
        if kind == "string":
            self._string(schema, value, name, errors)
        elif kind in ("integer", "number"):
            low = schema.get("minimum")
            if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
                relation = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
                errors.append(_invalid(name, value, f"{name} in body should be {relation} {low}"))
            high = schema.get("maximum")
            if high is not None and (value > high or (schema.get("exclusiveMaximum") and value == high)):
                relation = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                errors.append(_invalid(name, value, f"{name} in body should be {relation} {high}"))
        elif kind == "array":
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                errors.append(
                    FieldError("FieldValueTooMany", name, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
                )
            if "minItems" in schema and len(value) < schema["minItems"]:
                errors.append(_invalid(name, value, f"{name} in body should have at least {schema['minItems']} items"))
            items = schema.get("items") or {}
            olds = old if isinstance(old, list) else []
            for i, v in enumerate(value):
                self._node(items, v, olds[i] if i < len(olds) else None, f"{path}[{i}]", errors, rule_errors)
        elif kind == "object":
            for req in schema.get("required") or ():
                if req not in value:
                    errors.append(FieldError("FieldValueRequired", f"{path}.{req}" if path else req, "Required value"))
            if "maxProperties" in schema and len(value) > schema["maxProperties"]:
                errors.append(
                    FieldError("FieldValueTooMany", name, f"Too many: {len(value)}: must have at most {schema['maxProperties']} items")
                )
            if "minProperties" in schema and len(value) < schema["minProperties"]:
                errors.append(_invalid(name, value, f"{name} in body should have at least {schema['minProperties']} properties"))
            props = schema.get("properties") or {}
            additional = schema.get("additionalProperties")
            old_props = old if isinstance(old, dict) else {}
            for k, v in value.items():
                if k in props:
                    self._node(props[k], v, old_props.get(k), f"{path}.{k}" if path else k, errors, rule_errors)
                elif isinstance(additional, dict):
                    self._node(additional, v, old_props.get(k), f"{path}[{k}]", errors, rule_errors)

    @staticmethod
    def _string(schema: dict[str, Any], value: str, name: str, errors: list[FieldError]) -> None:
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(FieldError("FieldValueTooLong", name, f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(_invalid(name, value, f"{name} in body should be at least {schema['minLength']} chars long"))
        if "pattern" in schema and lib.compile_regex(schema["pattern"]).search(value) is None:
            errors.append(_invalid(name, value, f"{name} in body should match '{schema['pattern']}'"))
        if schema.get("format") == "date-time" and not _is_date_time(value):
            errors.append(_invalid(name, value, f"{name} in body must be of type date-time: {_go_value(value)}"))


def _is_date_time(value: str) -> bool:
    if not _DATE_TIME.match(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_DROP = object()


def _prune(schema: dict[str, Any], value: Any) -> Any:
    if value is None and not schema.get("nullable"):
        return _DROP
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        out = {}
        for k, v in value.items():
            sub = props.get(k) if k in props else additional if isinstance(additional, dict) else None
            if sub is None:
                continue  # unknown field: pruned
            pruned = _prune(sub, v)
            if pruned is not _DROP:
                out[k] = pruned
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        items = schema.get("items") or {}
        return [v for v in (_prune(items, v) for v in value) if v is not _DROP]
    return value


# ---------------------------------------------------------------- validating the CRD itself


def schema_path(crd: dict[str, Any], version_index: int) -> str:
    """Where the server reports a version's schema: hoisted to spec.validation when all versions share it."""
    versions = (crd.get("spec") or {}).get("versions") or []
    schemas = [json.dumps((v.get("schema") or {}).get("openAPIV3Schema"), sort_keys=True) for v in versions]
    if len(set(schemas)) == 1:
        return "spec.validation.openAPIV3Schema"
    return f"spec.versions[{version_index}].schema.openAPIV3Schema"


def _structural_errors(node: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(node, dict):
        errors.append(_invalid(path, node, "must be an object"))
        return
    if not node.get("type") and not node.get("x-kubernetes-int-or-string") and not node.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(FieldError("FieldValueRequired", f"{path}.type", "Required value: must not be empty for specified object fields"))
    for name, sub in (node.get("properties") or {}).items():
        _structural_errors(sub, f"{path}.properties[{name}]", errors)
    if isinstance(node.get("additionalProperties"), dict):
        if node.get("properties"):
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    f"{path}.additionalProperties",
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                )
            )
        _structural_errors(node["additionalProperties"], f"{path}.additionalProperties", errors)
    if "items" in node:
        _structural_errors(node["items"], f"{path}.items", errors)
    for i, r in enumerate(node.get("x-kubernetes-validations") or ()):
        where = f"{path}.x-kubernetes-validations[{i}].rule"
        text = r.get("rule") if isinstance(r, dict) else None
        if not isinstance(text, str) or not text.strip():
            errors.append(FieldError("FieldValueRequired", where, "Required value"))
            continue
        try:
            compile_rule(text)
        except ValueError as e:
            errors.append(FieldError("FieldValueInvalid", where, f"Invalid value: {json.dumps(r, separators=(', ', ': '))}: {e}"))
    if "pattern" in node:
        try:
            lib.compile_regex(node["pattern"])
        except ValueError as e:
            errors.append(_invalid(f"{path}.pattern", node["pattern"], str(e)))


def crd_errors(crd: dict[str, Any]) -> list[FieldError]:
    """What CRD validation refuses: names, versions, structural schema, rules that do not compile or cost too much."""
    errors: list[FieldError] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    if not group:
        errors.append(FieldError("FieldValueRequired", "spec.group", "Required value"))
    elif not _DNS1123_SUBDOMAIN.match(group) or "." not in group:
        errors.append(_invalid("spec.group", group, "should be a domain with at least one dot"))
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.scope",
                f'Unsupported value: {_go_value(spec.get("scope"))}: supported values: "Cluster", "Namespaced"',
            )
        )
    for key in ("plural", "singular", "kind", "listKind"):
        if not names.get(key):
            errors.append(FieldError("FieldValueRequired", f"spec.names.{key}", "Required value"))
    name = (crd.get("metadata") or {}).get("name")
    if names.get("plural") and group and name != f"{names['plural']}.{group}":
        errors.append(_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    versions = spec.get("versions") or []
    if not versions or sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(_invalid("spec.versions", versions, "must have exactly one version marked as storage version"))
    total = 0
    expensive: list[tuple[int, str]] = []
    reported: set[str] = set()
    for i, version in enumerate(versions):
        vname = version.get("name") or ""
        if not _DNS1035_LABEL.match(vname):
            errors.append(
                _invalid(f"spec.versions[{i}].name", vname, "a DNS-1035 label must consist of lower case alphanumeric characters or '-'")
            )
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        base = schema_path(crd, i)
        if not isinstance(schema, dict):
            errors.append(
                FieldError("FieldValueRequired", f"spec.versions[{i}].schema.openAPIV3Schema", "Required value: schemas are required")
            )
            continue
        if base in reported:
            continue  # a hoisted schema is validated once
        reported.add(base)
        before = len(errors)
        _structural_errors(schema, base, errors)
        if len(errors) > before:
            continue
        for rc in schema_rule_costs(schema, parse):
            where = f"{base}.{rc.path}"
            if rc.cost > STATIC_ESTIMATED_COST_LIMIT:
                errors.append(
                    FieldError(
                        "FieldValueForbidden",
                        where,
                        "Forbidden: " + cost_error_message("estimated rule cost", rc.cost, STATIC_ESTIMATED_COST_LIMIT),
                    )
                )
            total = min(total + rc.cost, 2**64 - 1)
            if rc.cost >= STATIC_ESTIMATED_CRD_COST_LIMIT // 100:
                expensive.append((rc.cost, where))
        if total > STATIC_ESTIMATED_CRD_COST_LIMIT:
            for _, where in sorted(expensive, reverse=True)[:4]:
                errors.append(
                    FieldError(
                        "FieldValueForbidden",
                        where,
                        "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                    )
                )
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    base,
                    "Forbidden: "
                    + cost_error_message(
                        "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                        total,
                        STATIC_ESTIMATED_CRD_COST_LIMIT,
                    ),
                )
            )
    return errors


# ---------------------------------------------------------------- serving


def _validate_crd(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldError] | None:
    return crd_errors(new) or None


CRD_TYPE = ResourceType(
    "apiextensions.k8s.io",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    False,
    ("v1",),
    "customresourcedefinition",
    ("crd", "crds"),
    {"status": STATUS},
    validate=_validate_crd,
)


def _replace_in_place(obj: dict[str, Any], pruned: dict[str, Any]) -> None:
    for k in list(obj):
        if k not in pruned:
            del obj[k]
    obj.update(pruned)


def resource_type(crd: dict[str, Any]) -> ResourceType:
    """The kind a stored CRD serves, validating every write against its version's schema."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    validators = {
        v["name"]: SchemaValidator((v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}) for v in spec["versions"]
    }
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    group = spec["group"]

    def validate(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldError] | None:
        version = str(new.get("apiVersion") or "").rpartition("/")[2]
        validator = validators.get(version) or validators[storage]
        _replace_in_place(new, validator.prune(new))
        return validator.validate(new, old) or None

    has_status = any("status" in (v.get("subresources") or {}) for v in spec["versions"]) or "status" in (spec.get("subresources") or {})
    versions = tuple([storage] + [v["name"] for v in served if v["name"] != storage])
    return ResourceType(
        group,
        names["plural"],
        names["kind"],
        spec.get("scope") == "Namespaced",
        versions,
        names.get("singular") or names["kind"].lower(),
        tuple(names.get("shortNames") or ()),
        {"status": STATUS} if has_status else {},
        custom=True,
        validate=validate,
    )
