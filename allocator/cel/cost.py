"""The API server's *estimated* cost of a CRD validation rule, sized from the schema.

`allocator.cel.check.estimate_cost` bounds device selectors with a flat unit per
operation. A CRD's `x-kubernetes-validations` rules are judged differently:
the API server runs cel-go's cost estimator with the sizes the OpenAPI schema
allows (`maxLength`, `maxItems`, `maxProperties`, or what fits in a 3 MiB
request when they are missing), then multiplies by how often the rule can
run. A CRD that passes our tests but fails that estimate cannot be installed,
so this module reproduces the arithmetic (cel-go `checker/cost.go`,
apiextensions-apiserver `schema/cel/model/schemas.go` and `compilation.go`,
`apis/apiextensions/validation/cel_validation.go`) on the same parse tree our
CEL engine uses.

Scope: the standard CEL operators, macros, `has()`, `cel.bind` and member or
global calls. Functions cel-go costs by size (string comparison and
concatenation, `matches`, `contains`, `startsWith`, `endsWith`, `in` on a
list) follow cel-go; every other call costs 1 plus its arguments, as cel-go's
default. Kubernetes' own library estimator (lists, regex `find`, quantity...)
is not modelled: a rule using those gets cel-go's default, which can be
lower than the server's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

import lark
from celpy.evaluation import celstr

from allocator.cel.check import unwrap

U64_MAX: Final = 2**64 - 1

# k8s.io/apiserver/pkg/apis/cel: DefaultMaxRequestSizeBytes (3 MiB), PerCallLimit.
MAX_REQUEST_SIZE_BYTES: Final = 3 * 1024 * 1024
PER_CALL_LIMIT: Final = 1_000_000
# apiextensions validation: StaticEstimatedCostLimit and StaticEstimatedCRDCostLimit.
STATIC_ESTIMATED_COST_LIMIT: Final = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT: Final = 100_000_000

# cel-go common/cost.go and checker/cost.go constants.
STRING_TRAVERSAL_COST_FACTOR: Final = 0.1
REGEX_STRING_LENGTH_COST_FACTOR: Final = 0.25
CREATE_LIST_BASE_COST: Final = 10
CREATE_MAP_BASE_COST: Final = 30

# k8s.io/apiserver/pkg/cel/types.go minimum JSON sizes.
MIN_STRING_SIZE: Final = 2  # ""
MIN_NUMBER_SIZE: Final = 1
MIN_BOOL_SIZE: Final = 4
JSON_DATE_SIZE: Final = 12  # "YYYY-MM-DD"
MIN_DATETIME_SIZE_JSON: Final = 22  # "YYYY-MM-DDThh:mm:ssZ"
MAX_DATETIME_SIZE_JSON: Final = 37  # with nanoseconds and an offset
MIN_DURATION_SIZE_JSON: Final = 4  # "0s"
MAX_DURATION_SIZE_JSON: Final = 32

CEL_RESERVED: Final = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
_CEL_IDENT: Final = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


def escape_property(name: str) -> str | None:
    """A property name as CEL sees it (`null` -> `__null__`, `a.b` -> `a__dot__b`), or None if unreachable."""
    if not name or name[0].isdigit():
        return None
    if name in CEL_RESERVED:
        return f"__{name}__"
    escaped = re.sub(r"__|[./-]", lambda m: {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}[m.group(0)], name)
    return escaped if _CEL_IDENT.match(escaped) else None


# ---------------------------------------------------------------- arithmetic that saturates like cel-go's


def _add(a: int, b: int) -> int:
    return min(a + b, U64_MAX)


def _mul(a: int, b: int) -> int:
    return min(a * b, U64_MAX)


def _factor(x: int, f: float) -> int:
    """cel-go multiplyByCostFactor: float product rounded up, saturating."""
    xf = float(x)
    if xf > 0 and f > 0 and xf > U64_MAX / f:
        return U64_MAX
    c = math.ceil(xf * f)
    return U64_MAX if c >= 2.0**64 else int(c)


# ---------------------------------------------------------------- schema -> declared types


@dataclass
class DeclType:
    """What the estimator knows of a schema node: its CEL kind, largest size and smallest JSON form."""

    kind: str  # object, map, list, string, bytes, int, double, bool, timestamp, duration, dyn
    max_elements: int = 0
    min_serialized_size: int = 0
    fields: dict[str, DeclType] = field(default_factory=dict)
    elem: DeclType | None = None
    key: DeclType | None = None


def _string_max(schema: dict[str, Any]) -> int:
    """estimateMaxStringLengthPerRequest: format-bounded, else the request size minus the quotes."""
    fmt = schema.get("format", "")
    if schema.get("x-kubernetes-int-or-string"):
        return MAX_REQUEST_SIZE_BYTES - 2
    return {"duration": MAX_DURATION_SIZE_JSON, "date": JSON_DATE_SIZE, "date-time": MAX_DATETIME_SIZE_JSON}.get(
        fmt, MAX_REQUEST_SIZE_BYTES - 2
    )


def _with_type_and_object_meta(schema: dict[str, Any]) -> dict[str, Any]:
    """WithTypeAndObjectMeta: a resource root always has kind, apiVersion, metadata.name/generateName."""
    props = dict(schema.get("properties") or {})
    string = {"type": "string"}
    props.setdefault("kind", string)
    props.setdefault("apiVersion", string)
    props["metadata"] = {"type": "object", "properties": {"name": string, "generateName": string}}
    return {**schema, "properties": props}


def schema_decl_type(schema: dict[str, Any] | None, is_root: bool = False) -> DeclType | None:
    """SchemaDeclType: the CEL declaration of a structural schema node (None if CEL cannot see it)."""
    if schema is None:
        return None
    if schema.get("x-kubernetes-int-or-string"):
        return DeclType("dyn", MAX_REQUEST_SIZE_BYTES - 2, 1)
    if is_root:
        schema = _with_type_and_object_meta(schema)
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        elem = schema_decl_type(items, bool(items and items.get("x-kubernetes-embedded-resource")))
        if elem is None:
            return None
        max_items = schema.get("maxItems")
        n = max(0, int(max_items)) if max_items is not None else (MAX_REQUEST_SIZE_BYTES - 2) // (elem.min_serialized_size + 1)
        return DeclType("list", n, 2, elem=elem)
    if kind == "object":
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            value = schema_decl_type(additional, bool(additional.get("x-kubernetes-embedded-resource")))
            if value is None:
                return None
            max_props = schema.get("maxProperties")
            n = max(0, int(max_props)) if max_props is not None else (MAX_REQUEST_SIZE_BYTES - 2) // (value.min_serialized_size + 6)
            return DeclType("map", n, 2, elem=value, key=DeclType("string", 0, MIN_STRING_SIZE))
        required = set(schema.get("required") or ())
        fields: dict[str, DeclType] = {}
        min_size = 2
        for name, prop in (schema.get("properties") or {}).items():
            t = schema_decl_type(prop, bool(prop.get("x-kubernetes-embedded-resource")))
            if t is None:
                continue
            escaped = escape_property(name)
            if escaped is not None:
                fields[escaped] = t
            if name in required and "default" not in prop:
                min_size += len(name) + t.min_serialized_size + 4
        return DeclType("object", 0, min_size, fields=fields)
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "byte":
            n = max(0, int(schema["maxLength"])) if "maxLength" in schema else _string_max(schema)
            return DeclType("bytes", n, MIN_STRING_SIZE)
        if fmt in ("duration", "date", "date-time"):
            min_size = {"duration": MIN_DURATION_SIZE_JSON, "date": JSON_DATE_SIZE, "date-time": MIN_DATETIME_SIZE_JSON}[fmt]
            return DeclType("duration" if fmt == "duration" else "timestamp", _string_max(schema), min_size)
        # maxLength counts code points; the server sizes in bytes (up to 4 per code point).
        n = max(0, int(schema["maxLength"])) * 4 if "maxLength" in schema else _string_max(schema)
        return DeclType("string", n, MIN_STRING_SIZE)
    if kind == "boolean":
        return DeclType("bool", 0, MIN_BOOL_SIZE)
    if kind == "number":
        return DeclType("double", 0, MIN_NUMBER_SIZE)
    if kind == "integer":
        return DeclType("int", 0, MIN_NUMBER_SIZE)
    return None


def max_cardinality(min_size: int) -> int:
    """How often data of this minimum size fits in one request (one comma between elements)."""
    return MAX_REQUEST_SIZE_BYTES // (min_size + 1)


def extract_max_elements(schema: dict[str, Any]) -> int | None:
    """By how much a schema multiplies the occurrences of its children (None: unbounded)."""
    kind = schema.get("type")
    if kind == "object":
        if isinstance(schema.get("additionalProperties"), dict):
            return max(0, int(schema["maxProperties"])) if "maxProperties" in schema else None
        return 1
    if kind == "array":
        return max(0, int(schema["maxItems"])) if "maxItems" in schema else None
    return 1


# ---------------------------------------------------------------- the estimator


_SCALARS: Final = frozenset(("bool", "double", "duration", "int", "timestamp", "uint"))
_MACROS: Final = frozenset(("all", "exists", "exists_one", "map", "filter"))
_STRING_RESULT: Final = frozenset(
    ("lowerAscii", "upperAscii", "trim", "replace", "substring", "charAt", "join", "string", "format", "quote", "find")
)
_BOOL_RESULT: Final = frozenset(
    (
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "isSorted",
        "isQuantity",
        "isSemver",
        "isInteger",
        "isGreaterThan",
        "isLessThan",
        "bool",
        "isURL",
        "isIP",
        "isCIDR",
    )
)
_INT_RESULT: Final = frozenset(("size", "int", "indexOf", "lastIndexOf", "compareTo", "asInteger", "sign", "major", "minor", "patch"))


@dataclass
class Est:
    """One node's estimate: cost (max), static type, field path from `self`, size and container entry sizes."""

    cost: int
    type: str = "dyn"
    path: tuple[str, ...] = ()
    size: int | None = None  # computed max size (literals, call results)
    decl: DeclType | None = None  # the schema node this value comes from, when known
    entry: tuple[str, int, int] | None = None  # (container, key size, value size) of a literal container


@dataclass
class _Var:
    path: tuple[str, ...]
    type: str
    decl: DeclType | None
    size: int | None


class RuleCostEstimator:
    """cel-go's `checker.Cost` for one rule, with the apiextensions size estimator over `self`'s declared type."""

    def __init__(self, self_type: DeclType) -> None:
        self.root = self_type
        self.scopes: list[dict[str, _Var]] = []

    # ------------------------------------------------------------ sizes

    def _decl_at(self, path: tuple[str, ...]) -> DeclType | None:
        if not path or path[0] not in ("self", "oldSelf"):
            return None
        node: DeclType | None = self.root
        for name in path[1:]:
            if node is None:
                return None
            if name in ("@items", "@values"):
                node = node.elem
            elif name == "@keys":
                node = node.key
            else:
                node = node.fields.get(name)
        return node

    def size_of(self, e: Est) -> int:
        """computeSize, then sizeOrUnknown: literal or computed size, the schema's bound, scalars 1, else unknown."""
        if e.size is not None:
            return e.size
        decl = self._decl_at(e.path)
        if decl is not None:
            return decl.max_elements
        if e.type in _SCALARS:
            return 1
        return U64_MAX

    # ------------------------------------------------------------ entry point

    def estimate(self, tree: lark.Tree[lark.Token]) -> int:
        return self.visit(tree).cost

    def visit(self, node: Any) -> Est:
        node = unwrap(node)
        method = getattr(self, "c_" + node.data, None)
        if method is None:
            raise ValueError(f"cannot estimate the cost of {node.data}")
        est: Est = method(node)
        return est

    def _lookup(self, name: str) -> _Var | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    # ------------------------------------------------------------ operators

    def c_expr(self, node: Any) -> Est:
        cond, a, b = (self.visit(c) for c in node.children)
        sa, sb = self.size_of(a), self.size_of(b)
        return Est(_add(cond.cost, max(a.cost, b.cost)), a.type if a.type == b.type else "dyn", size=max(sa, sb))

    def _logic(self, node: Any) -> Est:
        a, b = (self.visit(c) for c in node.children)
        return Est(_add(a.cost, b.cost), "bool")

    c_conditionalor = _logic
    c_conditionaland = _logic

    def c_relation(self, node: Any) -> Est:
        op_node, right = node.children
        a, b = self.visit(op_node.children[0]), self.visit(right)
        args = _add(a.cost, b.cost)
        op = op_node.data
        if op in ("relation_eq", "relation_ne") or (a.type == b.type and a.type in ("string", "bytes")):
            smallest = min(self.size_of(a), self.size_of(b))
            return Est(_add(_factor(smallest, STRING_TRAVERSAL_COST_FACTOR), args), "bool")
        if op == "relation_in" and b.type in ("list", "dyn"):
            return Est(_add(self.size_of(b), args), "bool")
        return Est(_add(1, args), "bool")

    def c_addition(self, node: Any) -> Est:
        op_node, right = node.children
        a, b = self.visit(op_node.children[0]), self.visit(right)
        args = _add(a.cost, b.cost)
        t = a.type if a.type != "dyn" else b.type
        if op_node.data == "addition_add" and t in ("string", "bytes", "list"):
            size = _add(self.size_of(a), self.size_of(b))
            if t == "list":
                return Est(_add(1, args), t, size=size)
            return Est(_add(_factor(size, STRING_TRAVERSAL_COST_FACTOR), args), t, size=size)
        return Est(_add(1, args), t)

    def c_multiplication(self, node: Any) -> Est:
        op_node, right = node.children
        a, b = self.visit(op_node.children[0]), self.visit(right)
        return Est(_add(1, _add(a.cost, b.cost)), a.type if a.type != "dyn" else b.type)

    def c_unary(self, node: Any) -> Est:
        op_node, operand = node.children
        e = self.visit(operand)
        return Est(_add(1, e.cost), "bool" if op_node.data == "unary_not" else e.type)

    # ------------------------------------------------------------ leaves

    def c_literal(self, node: Any) -> Est:
        tok = node.children[0]
        kind = tok.type
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            return Est(0, "string", size=len(str(celstr(tok))))
        if kind == "BYTES_LIT":
            return Est(0, "bytes", size=max(0, len(str(tok)) - 3))
        t = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "BOOL_LIT": "bool", "NULL_LIT": "null"}[kind]
        return Est(0, t, size=1)

    def c_ident(self, node: Any) -> Est:
        name = str(node.children[0])
        var = self._lookup(name)
        if var is not None:
            return Est(1, var.type, var.path, var.size, var.decl)
        if name in ("self", "oldSelf"):
            return Est(1, self.root.kind, (name,), None, self.root)
        return Est(
            1,
            "type" if name in ("int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type") else "dyn",
            (name,),
        )

    def c_paren_expr(self, node: Any) -> Est:
        return self.visit(node.children[0])

    def c_list_lit(self, node: Any) -> Est:
        items = [self.visit(e) for e in node.children[0].children] if node.children else []
        cost = CREATE_LIST_BASE_COST
        for i in items:
            cost = _add(cost, i.cost)
        val = max((self.size_of(i) for i in items), default=0)
        return Est(cost, "list", size=len(items), entry=("list", 1, val))

    def c_map_lit(self, node: Any) -> Est:
        parts = [self.visit(e) for e in node.children[0].children] if node.children else []
        cost = CREATE_MAP_BASE_COST
        for p in parts:
            cost = _add(cost, p.cost)
        keys, values = parts[0::2], parts[1::2]
        entry = ("map", max((self.size_of(k) for k in keys), default=0), max((self.size_of(v) for v in values), default=0))
        return Est(cost, "map", size=len(keys), entry=entry)

    # ------------------------------------------------------------ selection and indexing

    def _select(self, operand: Est, name: str) -> tuple[str, tuple[str, ...], DeclType | None]:
        decl = operand.decl
        child: DeclType | None = None
        if decl is not None and decl.kind == "object":
            child = decl.fields.get(name)
        elif decl is not None and decl.kind == "map":
            child = decl.elem
        path = (*operand.path, name) if operand.path else ()
        return (child.kind if child is not None else "dyn"), path, child

    def c_member_dot(self, node: Any) -> Est:
        operand = self.visit(node.children[0])
        t, path, decl = self._select(operand, str(node.children[1]))
        extra = 1 if operand.type in ("object", "map") else 0
        return Est(_add(operand.cost, extra), t, path, None, decl)

    def c_member_index(self, node: Any) -> Est:
        container = self.visit(node.children[0])
        key = self.visit(node.children[1])
        decl = container.decl.elem if container.decl is not None and container.decl.kind in ("list", "map") else None
        sub = "@items" if container.type == "list" else "@values"
        path = (*container.path, sub) if container.path else ()
        size = container.entry[2] if container.entry else None
        return Est(_add(1, _add(container.cost, key.cost)), decl.kind if decl is not None else "dyn", path, size, decl)

    def c_member_object(self, node: Any) -> Est:
        raise ValueError("message construction is not supported in validation rules")

    # ------------------------------------------------------------ calls and macros

    def c_ident_arg(self, node: Any) -> Est:
        name = str(node.children[0])
        exprs = list(node.children[1].children) if len(node.children) == 2 else []
        if name == "has" and len(exprs) == 1:
            target = unwrap(exprs[0])
            if isinstance(target, lark.Tree) and target.data == "member_dot":
                return Est(self.visit(target.children[0]).cost, "bool")  # presence tests are free (PresenceTestHasCost(false))
        args = [self.visit(e) for e in exprs]
        if name == "dyn" and len(args) == 1:
            a = args[0]
            return Est(_add(1, a.cost), "dyn", a.path, a.size, a.decl, a.entry)
        return self._call(name, None, args)

    def c_dot_ident_arg(self, node: Any) -> Est:
        exprs = list(node.children[1].children) if len(node.children) == 2 else []
        return self._call(str(node.children[0]), None, [self.visit(e) for e in exprs])

    def c_dot_ident(self, node: Any) -> Est:
        return Est(1, "dyn", (str(node.children[0]),))

    def c_member_dot_arg(self, node: Any) -> Est:
        recv_node, name = node.children[0], str(node.children[1])
        exprs = list(node.children[2].children) if len(node.children) == 3 else []
        recv_inner = unwrap(recv_node)
        if (
            name == "bind"
            and isinstance(recv_inner, lark.Tree)
            and recv_inner.data == "ident"
            and str(recv_inner.children[0]) == "cel"
            and len(exprs) == 3
        ):
            var = str(unwrap(exprs[0]).children[0])
            init = self.visit(exprs[1])
            self.scopes.append({var: _Var(init.path, init.type, init.decl, init.size)})
            try:
                body = self.visit(exprs[2])
            finally:
                self.scopes.pop()
            return Est(_add(CREATE_LIST_BASE_COST, _add(init.cost, body.cost)), body.type, body.path, body.size, body.decl)
        if name in _MACROS and len(exprs) in (2, 3):
            return self._macro(name, recv_node, exprs)
        target = self.visit(recv_node)
        return self._call(name, target, [self.visit(e) for e in exprs])

    def _macro(self, name: str, recv_node: Any, exprs: list[Any]) -> Est:
        rng = self.visit(recv_node)
        var = str(unwrap(exprs[0]).children[0])
        if rng.entry is not None:
            container, key_size, val_size = rng.entry
            var_size: int | None = val_size if container == "list" else key_size
        else:
            container, var_size = ("list" if rng.type == "list" else "map" if rng.type in ("map", "object") else "dyn"), None
        sub = "@items" if container == "list" else "@keys"
        if rng.decl is not None and rng.decl.kind in ("list", "map"):
            var_decl = rng.decl.elem if rng.decl.kind == "list" else rng.decl.key
        else:
            var_decl = None
        var_path = (*rng.path, sub) if rng.path else ()
        self.scopes.append({var: _Var(var_path, var_decl.kind if var_decl else "dyn", var_decl, var_size)})
        try:
            bodies = [self.visit(e).cost for e in exprs[1:]]
        finally:
            self.scopes.pop()
        n = self.size_of(rng)
        # The parser's expansion of each macro: (accumulator init + result, loop condition + step per element).
        if name == "all":
            fixed, per = 1, _add(2, _add(1, bodies[0]))
        elif name == "exists":
            fixed, per = 1, _add(3, _add(1, bodies[0]))
        elif name == "exists_one":
            fixed, per = 2, _add(bodies[0], 2)
        elif name == "filter":
            fixed, per = CREATE_LIST_BASE_COST + 1, _add(bodies[0], 13)
        elif len(bodies) == 1:  # map(x, t)
            fixed, per = CREATE_LIST_BASE_COST + 1, _add(12, bodies[0])
        else:  # map(x, p, t)
            fixed, per = CREATE_LIST_BASE_COST + 1, _add(bodies[0], _add(12, bodies[1]))
        cost = _add(_add(rng.cost, fixed), _mul(n, per))
        if name in ("map", "filter"):
            return Est(cost, "list", size=n)
        return Est(cost, "bool")

    def _call(self, name: str, target: Est | None, args: list[Est]) -> Est:
        arg_cost = 0
        for a in args:
            arg_cost = _add(arg_cost, a.cost)
        base = target.cost if target is not None else 0
        if target is not None and len(args) == 1 and target.type in ("string", "dyn"):
            if name == "matches":
                s = _factor(_add(self.size_of(target), 1), STRING_TRAVERSAL_COST_FACTOR)
                r = _factor(self.size_of(args[0]), REGEX_STRING_LENGTH_COST_FACTOR)
                return Est(_add(base, _add(_mul(s, r), arg_cost)), "bool")
            if name == "contains":
                s = _factor(self.size_of(target), STRING_TRAVERSAL_COST_FACTOR)
                sub = _factor(self.size_of(args[0]), STRING_TRAVERSAL_COST_FACTOR)
                return Est(_add(base, _add(_mul(s, sub), arg_cost)), "bool")
            if name in ("startsWith", "endsWith"):
                return Est(_add(base, _add(_factor(self.size_of(args[0]), STRING_TRAVERSAL_COST_FACTOR), arg_cost)), "bool")
        if name in _BOOL_RESULT:
            t = "bool"
        elif name in _INT_RESULT:
            t = "int"
        elif name in _STRING_RESULT:
            t = "string"
        elif name == "double":
            t = "double"
        else:
            t = "dyn"
        return Est(_add(base, _add(1, arg_cost)), t)


def estimate_rule_cost(tree: lark.Tree[lark.Token], self_type: DeclType) -> int:
    """The rule's estimated cost (cel-go `EstimateCost(...).Max`) with `self` of the given declared type."""
    return RuleCostEstimator(self_type).estimate(tree)


def rule_cost(raw_cost: int, cardinality: int | None, self_type: DeclType) -> int:
    """getExpressionCost: raw cost times the context's cardinality, or the type's own worst case if unbounded."""
    n = cardinality if cardinality is not None else max_cardinality(self_type.min_serialized_size)
    return 0 if raw_cost == 0 else _mul(raw_cost, n)


def cost_error_message(what: str, cost: int, limit: int) -> str:
    """getCostErrorMessage, word for word."""
    factor = cost / limit
    if factor > 100.0:
        shown = "more than 100x"
    elif factor < 1.5:
        shown = f"{factor:f}x"
    else:
        shown = f"{factor:.1f}x"
    return f"{what} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"


# ---------------------------------------------------------------- a CRD schema's rules


@dataclass(frozen=True)
class RuleCost:
    """One `x-kubernetes-validations` rule as the API server prices it."""

    path: str  # under the schema root, as the server names it: properties[spec]...x-kubernetes-validations[0].rule
    rule: str
    raw_cost: int  # one evaluation
    cardinality: int  # how often it can run per object (bounded by the schema, or the server's worst case)
    cost: int  # raw_cost * cardinality, saturating
    bounded: bool  # every enclosing list and map declares maxItems / maxProperties


def schema_rule_costs(schema: dict[str, Any], parse: Any) -> list[RuleCost]:
    """Every rule under a CRD's openAPIV3Schema with its estimated cost, as CRD validation walks it.

    `parse` turns a rule into the parse tree (our CEL engine's parser); it raises on a syntax error.
    """
    out: list[RuleCost] = []

    def walk(node: dict[str, Any], path: str, cardinality: int | None, is_root: bool) -> None:
        rules = node.get("x-kubernetes-validations") or ()
        if rules:
            decl = schema_decl_type(node, is_root or bool(node.get("x-kubernetes-embedded-resource")))
            if decl is None:
                raise ValueError(f"{path}: CEL cannot see this schema node")
            for i, r in enumerate(rules):
                raw = estimate_rule_cost(parse(r["rule"]), decl)
                n = cardinality if cardinality is not None else max_cardinality(decl.min_serialized_size)
                where = f"{path}.x-kubernetes-validations[{i}].rule" if path else f"x-kubernetes-validations[{i}].rule"
                out.append(RuleCost(where, r["rule"], raw, n, rule_cost(raw, cardinality, decl), cardinality is not None))
        factor = extract_max_elements(node)
        child = None if cardinality is None or factor is None else _mul(cardinality, factor)
        prefix = f"{path}." if path else ""
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{prefix}properties[{name}]", child, False)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{prefix}additionalProperties", child, False)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{prefix}items", child, False)

    walk(schema, "", 1, True)
    return out
