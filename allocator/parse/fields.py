"""Field shapes several kinds share: node selectors, taints and tolerations, attributes,
quantities, CEL selectors and opaque config."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from allocator.parse.reader import INTERN_MAX, _Reader
from allocator.quantity import Quantity, QuantityError, parse_quantity
from allocator.semver import SemverError, parse_semver
from allocator.types import (
    AttributeValue,
    DeviceConfig,
    DeviceTaint,
    DeviceToleration,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueConfig,
)

_NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def parse_node_selector(r: _Reader, raw: Any, path: str) -> NodeSelector:
    sel = r.mapping(raw, path)
    terms = []
    for i, t in enumerate(r.seq(sel.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")):
        tp = f"{path}.nodeSelectorTerms[{i}]"
        term = r.mapping(t, tp)

        def reqs(kind: str, term: Mapping[str, Any] = term, tp: str = tp) -> tuple[NodeSelectorRequirement, ...]:
            out = []
            for j, q in enumerate(r.seq(term.get(kind), f"{tp}.{kind}")):
                qp = f"{tp}.{kind}[{j}]"
                q = r.mapping(q, qp)
                op = r.string(q.get("operator"), f"{qp}.operator", required=True)
                if op not in _NODE_SELECTOR_OPERATORS:
                    raise r.fail(f"{qp}.operator", f"unsupported operator {op!r}")
                values = tuple(r.string(v, f"{qp}.values[{k}]") for k, v in enumerate(r.seq(q.get("values"), f"{qp}.values")))
                out.append(NodeSelectorRequirement(r.string(q.get("key"), f"{qp}.key", required=True), op, values))
            return tuple(out)

        terms.append(NodeSelectorTerm(reqs("matchExpressions"), reqs("matchFields")))
    return NodeSelector(tuple(terms))


def parse_taint(r: _Reader, raw: Any, path: str, *, default_time: str = "") -> DeviceTaint:
    t = r.mapping(raw, path, required=True)
    return DeviceTaint(
        key=r.string(t.get("key"), f"{path}.key", required=True),
        # Unknown effects load (newer API versions may add some) and act like None.
        effect=r.string(t.get("effect"), f"{path}.effect", required=True),
        value=r.string(t.get("value"), f"{path}.value"),
        time_added=r.string(t.get("timeAdded"), f"{path}.timeAdded") or default_time,
    )


def parse_toleration(r: _Reader, raw: Any, path: str) -> DeviceToleration:
    t = r.mapping(raw, path, required=True)
    return DeviceToleration(
        key=r.string(t.get("key"), f"{path}.key"),
        # The API server defaults an empty operator to Equal.
        operator=r.string(t.get("operator"), f"{path}.operator") or "Equal",
        value=r.string(t.get("value"), f"{path}.value"),
        effect=r.string(t.get("effect"), f"{path}.effect"),
        toleration_seconds=r.integer(t.get("tolerationSeconds"), f"{path}.tolerationSeconds"),
    )


def parse_tolerations(r: _Reader, raw: Any, path: str) -> tuple[DeviceToleration, ...]:
    return tuple(parse_toleration(r, t, f"{path}[{i}]") for i, t in enumerate(r.seq(raw, path)))


def _parse_attribute(r: _Reader, raw: Any, path: str) -> AttributeValue:
    a = r.mapping(raw, path, required=True)
    kinds = [k for k in ("int", "bool", "string", "version") if a.get(k) is not None]
    if len(kinds) != 1:
        raise r.fail(path, "exactly one of int, bool, string, version must be set")
    kind = kinds[0]
    value = a[kind]
    if kind == "int":
        return r.integer(value, f"{path}.int", default=0)  # value is set: the default is never used
    if kind == "bool":
        return r.boolean(value, f"{path}.bool")
    if kind == "string":
        text = r.string(value, f"{path}.string")
        # Devices repeat their string values (a model, a firmware revision) across the cluster: one copy each.
        return sys.intern(text) if len(text) <= INTERN_MAX else text
    try:
        return parse_semver(r.string(value, f"{path}.version"))
    except SemverError as e:
        raise r.fail(f"{path}.version", str(e)) from None


@functools.lru_cache(maxsize=4096)
def _cached_quantity(raw: str) -> Quantity:
    return parse_quantity(raw)


def _parse_quantity(r: _Reader, raw: Any, path: str) -> Quantity:
    try:
        # Slices repeat the same few quantities thousands of times ("10Gi"): parse each string once.
        return _cached_quantity(raw) if type(raw) is str else parse_quantity(raw)
    except QuantityError as e:
        raise r.fail(path, str(e)) from None


def _strings(r: _Reader, raw: Any, path: str) -> tuple[str, ...]:
    return tuple(r.string(x, f"{path}[{i}]", required=True) for i, x in enumerate(r.seq(raw, path)))


def _parse_selectors(r: _Reader, raw: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(r.seq(raw, path)):
        s = r.mapping(s, f"{path}[{i}]")
        cel = r.mapping(s.get("cel"), f"{path}[{i}].cel", required=True)
        out.append(r.string(cel.get("expression"), f"{path}[{i}].cel.expression", required=True))
    return tuple(out)


def _parse_config(r: _Reader, raw: Any, path: str, *, with_requests: bool) -> tuple[DeviceConfig, ...]:
    out = []
    for i, c in enumerate(r.seq(raw, path)):
        cp = f"{path}[{i}]"
        c = r.mapping(c, cp)
        opaque = None
        if c.get("opaque") is not None:
            o = r.mapping(c.get("opaque"), f"{cp}.opaque")
            opaque = OpaqueConfig(r.string(o.get("driver"), f"{cp}.opaque.driver", required=True), o.get("parameters"))
        requests: tuple[str, ...] = ()
        if with_requests:
            requests = tuple(r.string(x, f"{cp}.requests[{j}]") for j, x in enumerate(r.seq(c.get("requests"), f"{cp}.requests")))
        out.append(DeviceConfig(opaque, requests))
    return tuple(out)
