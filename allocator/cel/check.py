"""Compile-time checks of a parsed selector, so mistakes fail at compile, not per device.

cel-python has no type checker; cel-go (upstream) rejects at compile time an
expression that uses an unknown variable, field or function, calls a function
with arguments of the wrong type, or cannot evaluate to bool. This module
infers static types where they are known (`device.driver` is a string,
capacities are quantities, literals have their type) and treats everything
else (attribute values, macro variables) as `dyn`, so it rejects only what
upstream would certainly reject.

It also annotates the tree for the runners: how each identifier resolves
(`cel_ident`), the field selection inside `has()` (`cel_has`), and
`cel.bind` calls (`cel_bind`).
"""

from __future__ import annotations

from typing import Any

import lark
from celpy.evaluation import celbytes, celstr

from allocator.cel.lib.budget import COST_LIMIT
from allocator.cel.lib.regex import compile_regex
from allocator.cel.lib.values import FALSE, INT64_MAX, INT64_MIN, TRUE, TYPE_NAMES, UINT64_MAX, mk_double, mk_int, mk_uint

DYN = "dyn"
DEVICE = "#device"
ATTRS = "#attributes"  # device.attributes: domain -> attribute map
ATTR_MAP = "#attribute_map"  # device.attributes["d"]: name -> dyn
CAPS = "#capacity"
CAP_MAP = "#capacity_map"  # device.capacity["d"]: name -> Quantity

MACROS = {"all": (2,), "exists": (2,), "exists_one": (2,), "filter": (2,), "map": (2, 3)}
NUMERIC = frozenset(("int", "uint", "double"))
ORDERED = frozenset(("int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"))

_S, _I, _B, _L, _Q, _V = "string", "int", "bool", "list", "Quantity", "Semver"


def _sig(recv: str | None, params: tuple[str, ...], result: str) -> tuple[str | None, tuple[str, ...], str]:
    return (recv, params, result)


# name -> overloads (receiver type or None for a global call, parameter types, result type)
SIGNATURES: dict[str, list[tuple[str | None, tuple[str, ...], str]]] = {
    "size": [_sig(None, (t,), _I) for t in (_S, "bytes", _L, "map")] + [_sig(t, (), _I) for t in (_S, "bytes", _L, "map")],
    "contains": [_sig(_S, (_S,), _B)],
    "startsWith": [_sig(_S, (_S,), _B)],
    "endsWith": [_sig(_S, (_S,), _B)],
    "matches": [_sig(_S, (_S,), _B), _sig(None, (_S, _S), _B)],
    "int": [_sig(None, (t,), _I) for t in (_I, "uint", "double", _S, "timestamp")],
    "uint": [_sig(None, (t,), "uint") for t in (_I, "uint", "double", _S)],
    "double": [_sig(None, (t,), "double") for t in (_I, "uint", "double", _S)],
    "string": [_sig(None, (t,), _S) for t in (_I, "uint", "double", _B, "bytes", _S, "timestamp", "duration")],
    "bool": [_sig(None, (t,), _B) for t in (_B, _S)],
    "bytes": [_sig(None, (t,), "bytes") for t in ("bytes", _S)],
    "dyn": [_sig(None, (DYN,), DYN)],
    "type": [_sig(None, (DYN,), "type")],
    "quantity": [_sig(None, (_S,), _Q)],
    "isQuantity": [_sig(None, (_S,), _B)],
    "add": [_sig(_Q, (_Q,), _Q), _sig(_Q, (_I,), _Q)],
    "sub": [_sig(_Q, (_Q,), _Q), _sig(_Q, (_I,), _Q)],
    "asInteger": [_sig(_Q, (), _I)],
    "isInteger": [_sig(_Q, (), _B)],
    "asApproximateFloat": [_sig(_Q, (), "double")],
    "sign": [_sig(_Q, (), _I), _sig(None, (_Q,), _I)],
    "semver": [_sig(None, (_S,), _V), _sig(None, (_S, _B), _V)],
    "isSemver": [_sig(None, (_S,), _B), _sig(None, (_S, _B), _B)],
    "major": [_sig(_V, (), _I)],
    "minor": [_sig(_V, (), _I)],
    "patch": [_sig(_V, (), _I)],
    "compareTo": [_sig(_Q, (_Q,), _I), _sig(_V, (_V,), _I)],
    "isGreaterThan": [_sig(_Q, (_Q,), _B), _sig(_V, (_V,), _B)],
    "isLessThan": [_sig(_Q, (_Q,), _B), _sig(_V, (_V,), _B)],
    "lowerAscii": [_sig(_S, (), _S)],
    "upperAscii": [_sig(_S, (), _S)],
    "trim": [_sig(_S, (), _S)],
    "split": [_sig(_S, (_S,), _L), _sig(_S, (_S, _I), _L)],
    "join": [_sig(_L, (), _S), _sig(_L, (_S,), _S)],
    "replace": [_sig(_S, (_S, _S), _S), _sig(_S, (_S, _S, _I), _S)],
    "substring": [_sig(_S, (_I,), _S), _sig(_S, (_I, _I), _S)],
    "charAt": [_sig(_S, (_I,), _S)],
    "indexOf": [_sig(_S, (_S,), _I), _sig(_S, (_S, _I), _I), _sig(_L, (DYN,), _I)],
    "lastIndexOf": [_sig(_S, (_S,), _I), _sig(_S, (_S, _I), _I), _sig(_L, (DYN,), _I)],
    "find": [_sig(_S, (_S,), _S)],
    "findAll": [_sig(_S, (_S,), _L), _sig(_S, (_S, _I), _L)],
    "isSorted": [_sig(_L, (), _B)],
    "sum": [_sig(_L, (), DYN)],
    "min": [_sig(_L, (), DYN)],
    "max": [_sig(_L, (), DYN)],
    "includes": [_sig(DYN, (DYN,), _B)],
}

# Functions whose string-literal pattern argument is validated at compile time (upstream ValidateRegexLiterals).
_REGEX_ARG = {"matches": -1, "find": 0, "findAll": 0}

_CHAIN = frozenset(("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member", "primary"))


# Upstream bounds every device map (ResourceSliceMaxAttributesAndCapacitiesPerDevice); other
# ranges of unknown size get the same estimate.
ASSUMED_RANGE_SIZE = 32


def estimate_cost(node: Any) -> int:
    """Worst-case evaluation cost, as upstream estimates it before accepting an expression:
    one unit per operation, a comprehension costs its range size times its body."""
    if not isinstance(node, lark.Tree):
        return 0
    macro = getattr(node, "cel_macro", None)
    if macro is not None:
        target = node.children[0]
        inner = unwrap(target)
        if isinstance(inner, lark.Tree) and inner.data == "list_lit":
            size = len(inner.children[0].children) if inner.children else 0
        else:
            size = ASSUMED_RANGE_SIZE
        step_cost: int = macro[2]
        return estimate_cost(target) + size * step_cost
    children = [c for c in node.children if isinstance(c, lark.Tree)]
    own = 0 if len(children) == 1 and len(node.children) == 1 else 1  # wrappers are free
    return own + sum(estimate_cost(c) for c in children)


def step_cost(node: Any) -> int:
    """The runtime charge of one comprehension step: the body's own operations, with a
    nested comprehension counted once (it charges its own steps when it runs)."""
    if not isinstance(node, lark.Tree):
        return 0
    if getattr(node, "cel_macro", None) is not None:
        return 1 + step_cost(node.children[0])
    children = [c for c in node.children if isinstance(c, lark.Tree)]
    own = 0 if len(children) == 1 and len(node.children) == 1 else 1
    return own + sum(step_cost(c) for c in children)


class CheckError(Exception):
    """A compile-time error; str() is the reason."""


def _base(t: str) -> str:
    return "map" if t in (ATTRS, ATTR_MAP, CAPS, CAP_MAP) else t


def _compatible(actual: str, expected: str | None) -> bool:
    if expected is None:
        return actual is None
    return actual == DYN or expected == DYN or _base(actual) == expected


def _shown(t: str) -> str:
    return {DEVICE: "kubernetes.DRADevice", ATTRS: "map", ATTR_MAP: "map", CAPS: "map", CAP_MAP: "map"}.get(t, t)


def literal_int(text: str) -> int:
    """An INT_LIT's value: decimal (leading zeros allowed, as cel-go) or 0x hex, optional minus."""
    neg = text.startswith("-")
    body = text[1:] if neg else text
    v = int(body[2:], 16) if body[:2].lower() == "0x" else int(body, 10)
    return -v if neg else v


def literal_value(tok: lark.Token) -> Any:
    """A literal token's CEL value (checked by `Checker`, so it decodes)."""
    kind, text = tok.type, str(tok)
    if kind == "INT_LIT":
        return mk_int(literal_int(text))
    if kind == "UINT_LIT":
        return mk_uint(literal_int(text[:-1]))
    if kind == "FLOAT_LIT":
        return mk_double(float(text))
    if kind in ("STRING_LIT", "MLSTRING_LIT"):
        return str(celstr(tok))
    if kind == "BYTES_LIT":
        return celbytes(tok)
    if kind == "BOOL_LIT":
        return TRUE if text == "true" else FALSE
    return None  # NULL_LIT


def unwrap(node: Any) -> Any:
    """The innermost node of a chain of single-child expression wrappers."""
    while isinstance(node, lark.Tree) and node.data in _CHAIN and len(node.children) == 1:
        node = node.children[0]
    return node


def depth(tree: lark.Tree[lark.Token]) -> int:
    """Tree depth, computed without recursion (a deep tree must not crash the checker)."""
    best = 0
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if d > best:
            best = d
        if isinstance(node, lark.Tree):
            stack.extend((c, d + 1) for c in node.children)
    return best


class Checker:
    """Infers static types bottom-up; raises CheckError for what cannot work."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, str]] = []

    def check(self, tree: lark.Tree[lark.Token]) -> str:
        t = self.visit(tree)
        if t not in (DYN, "bool"):
            raise CheckError(f"must evaluate to bool or the unknown type, not {_shown(t)}")
        cost = estimate_cost(tree)
        if cost > COST_LIMIT:
            raise CheckError(f"estimated cost {cost} exceeds the cost limit {COST_LIMIT}")
        return t

    # ------------------------------------------------------------ helpers

    def _lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def _bind_var(self, node: Any, what: str) -> str:
        inner = unwrap(node)
        if isinstance(inner, lark.Tree) and inner.data == "ident":
            return str(inner.children[0])
        raise CheckError(f"{what}: argument is not an identifier")

    def visit(self, node: Any) -> str:
        method = getattr(self, "t_" + node.data, None)
        if method is None:
            raise CheckError(f"unsupported syntax: {node.data}")
        t: str = method(node)
        return t

    def _call(self, name: str, recv: str | None, args: list[str], node: Any) -> str:
        sigs = SIGNATURES.get(name)
        if sigs is None:
            raise CheckError(f"undeclared reference to '{name}'")
        shown = ", ".join(_shown(a) for a in args)
        applied = f"{_shown(recv)}.({shown})" if recv is not None else f"({shown})"
        candidates = [s for s in sigs if (s[0] is None) == (recv is None) and len(s[1]) == len(args)]
        matching = [
            s
            for s in candidates
            if (recv is None or _compatible(recv, s[0])) and all(_compatible(a, p) for a, p in zip(args, s[1], strict=True))
        ]
        if not matching:
            raise CheckError(f"found no matching overload for '{name}' applied to '{applied}'")
        results = {s[2] for s in matching}
        return results.pop() if len(results) == 1 else DYN

    def _check_regex_literal(self, name: str, exprs: list[Any]) -> None:
        pos = _REGEX_ARG.get(name)
        if pos is None or not exprs:
            return
        lit = unwrap(exprs[pos])
        tok = lit.children[0] if isinstance(lit, lark.Tree) and lit.data == "literal" else None
        if isinstance(tok, lark.Token) and tok.type in ("STRING_LIT", "MLSTRING_LIT"):
            try:
                compile_regex(str(celstr(tok)))
            except ValueError as e:
                raise CheckError(str(e)) from None

    # ------------------------------------------------------------ grammar rules

    def t_expr(self, node: Any) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        cond, a, b = (self.visit(c) for c in node.children)
        if cond not in (DYN, "bool"):
            raise CheckError(f"found no matching overload for '_?_:_' applied to '({_shown(cond)}, {_shown(a)}, {_shown(b)})'")
        return a if a == b else DYN

    def _logic(self, node: Any, op: str) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        a, b = (self.visit(c) for c in node.children)
        for t in (a, b):
            if t not in (DYN, "bool"):
                raise CheckError(f"found no matching overload for '{op}' applied to '({_shown(a)}, {_shown(b)})'")
        return "bool"

    def t_conditionalor(self, node: Any) -> str:
        return self._logic(node, "_||_")

    def t_conditionaland(self, node: Any) -> str:
        return self._logic(node, "_&&_")

    def t_relation(self, node: Any) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op_node, right = node.children
        a = self.visit(op_node.children[0])
        b = self.visit(right)
        op = op_node.data
        ba, bb = _base(a), _base(b)
        concrete = a != DYN and b != DYN
        name = {
            "relation_lt": "_<_",
            "relation_le": "_<=_",
            "relation_gt": "_>_",
            "relation_ge": "_>=_",
            "relation_eq": "_==_",
            "relation_ne": "_!=_",
            "relation_in": "@in",
        }[op]
        fail = CheckError(f"found no matching overload for '{name}' applied to '({_shown(a)}, {_shown(b)})'")
        if op in ("relation_eq", "relation_ne"):
            if concrete and ba != bb and not (ba in NUMERIC and bb in NUMERIC) and "null_type" not in (ba, bb):
                raise fail
        elif op == "relation_in":
            if b != DYN and bb not in ("list", "map"):
                raise fail
        elif concrete and not ((ba == bb and ba in ORDERED) or (ba in NUMERIC and bb in NUMERIC)):
            raise fail
        return "bool"

    def t_addition(self, node: Any) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op_node, right = node.children
        a, b = self.visit(op_node.children[0]), self.visit(right)
        add = op_node.data == "addition_add"
        allowed = (
            ("int", "uint", "double", "string", "bytes", "list", "duration") if add else ("int", "uint", "double", "duration", "timestamp")
        )
        return self._arith("_+_" if add else "_-_", a, b, allowed)

    def t_multiplication(self, node: Any) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op_node, right = node.children
        a, b = self.visit(op_node.children[0]), self.visit(right)
        if op_node.data == "multiplication_mod":
            return self._arith("_%_", a, b, ("int", "uint"))
        return self._arith("_*_" if op_node.data == "multiplication_mul" else "_/_", a, b, ("int", "uint", "double"))

    def _arith(self, op: str, a: str, b: str, allowed: tuple[str, ...]) -> str:
        for t in (a, b):
            if t != DYN and t not in allowed:
                raise CheckError(f"found no matching overload for '{op}' applied to '({_shown(a)}, {_shown(b)})'")
        if a != DYN and b != DYN:
            if a == b:
                return a
            if {a, b} == {"timestamp", "duration"} and op in ("_+_", "_-_"):
                return "timestamp"
            if a == "timestamp" and b == "timestamp" and op == "_-_":
                return "duration"
            raise CheckError(f"found no matching overload for '{op}' applied to '({_shown(a)}, {_shown(b)})'")
        return a if b == DYN and a != DYN else b if a == DYN else DYN

    def t_unary(self, node: Any) -> str:
        if len(node.children) == 1:
            return self.visit(node.children[0])
        op_node, operand = node.children
        t = self.visit(operand)
        if op_node.data == "unary_not":
            if t not in (DYN, "bool"):
                raise CheckError(f"found no matching overload for '!_' applied to '({_shown(t)})'")
            return "bool"
        if t not in (DYN, "int", "double", "duration"):
            raise CheckError(f"found no matching overload for '-_' applied to '({_shown(t)})'")
        return t

    def t_member(self, node: Any) -> str:
        return self.visit(node.children[0])

    def t_primary(self, node: Any) -> str:
        return self.visit(node.children[0])

    def t_paren_expr(self, node: Any) -> str:
        return self.visit(node.children[0])

    def _select_type(self, recv: str, field: str) -> str:
        if recv == DEVICE:
            fields = {"driver": "string", "allowMultipleAllocations": "bool", "attributes": ATTRS, "capacity": CAPS}
            if field not in fields:
                raise CheckError(f"undefined field '{field}'")
            return fields[field]
        if recv == ATTRS:
            return ATTR_MAP
        if recv == CAPS:
            return CAP_MAP
        if recv == CAP_MAP:
            return "Quantity"
        if recv in (DYN, "map", ATTR_MAP):
            return DYN
        raise CheckError(f"type '{_shown(recv)}' does not support field selection")

    def t_member_dot(self, node: Any) -> str:
        recv = self.visit(node.children[0])
        return self._select_type(recv, str(node.children[1]))

    def t_member_index(self, node: Any) -> str:
        recv = self.visit(node.children[0])
        key = self.visit(node.children[1])
        fail = CheckError(f"found no matching overload for '_[_]' applied to '({_shown(recv)}, {_shown(key)})'")
        if recv in (ATTRS, CAPS, ATTR_MAP, CAP_MAP):
            if key not in (DYN, "string"):
                raise fail
            return {ATTRS: ATTR_MAP, CAPS: CAP_MAP, ATTR_MAP: DYN, CAP_MAP: "Quantity"}[recv]
        if recv == "list":
            if key not in (DYN, "int", "uint"):
                raise fail
            return DYN
        if recv == "map":
            if key not in (DYN, "int", "uint", "bool", "string"):
                raise fail
            return DYN
        if recv == DYN:
            return DYN
        raise fail

    def t_member_object(self, node: Any) -> str:
        raise CheckError("message construction is not supported in device selectors")

    def t_member_dot_arg(self, node: Any) -> str:
        recv_node, name_tok = node.children[0], node.children[1]
        name = str(name_tok)
        exprs = list(node.children[2].children) if len(node.children) == 3 else []
        recv_inner = unwrap(recv_node)
        if (
            name == "bind"
            and isinstance(recv_inner, lark.Tree)
            and recv_inner.data == "ident"
            and str(recv_inner.children[0]) == "cel"
            and self._lookup("cel") is None
        ):
            if len(exprs) != 3:
                raise CheckError("cel.bind() takes a variable name, an initializer and an expression")
            var = self._bind_var(exprs[0], "cel.bind()")
            init = self.visit(exprs[1])
            self.scopes.append({var: init})
            try:
                result = self.visit(exprs[2])
            finally:
                self.scopes.pop()
            node.cel_bind = var
            return result
        if name in MACROS:
            if len(exprs) not in MACROS[name]:
                raise CheckError(f"{name}() macro takes {' or '.join(str(n) for n in MACROS[name])} arguments")
            recv = self.visit(recv_node)
            if recv not in (DYN, "list") and _base(recv) != "map":
                raise CheckError(f"found no matching overload for '{name}' applied to '{_shown(recv)}'")
            var = self._bind_var(exprs[0], f"{name}()")
            self.scopes.append({var: DYN})
            try:
                for e in exprs[1:]:
                    t = self.visit(e)
                    if (name != "map" or (len(exprs) == 3 and e is exprs[1])) and t not in (DYN, "bool"):
                        raise CheckError(f"{name}() predicate must be bool, not {_shown(t)}")
            finally:
                self.scopes.pop()
            node.cel_macro = (name, var, 1 + sum(estimate_cost(e) for e in exprs[1:]))
            node.cel_step_cost = 1 + sum(step_cost(e) for e in exprs[1:])  # runtime, per step
            return "list" if name in ("map", "filter") else "bool"
        recv = self.visit(recv_node)
        args = [self.visit(e) for e in exprs]
        self._check_regex_literal(name, exprs)
        return self._call(name, recv, args, node)

    def t_ident(self, node: Any) -> str:
        name = str(node.children[0])
        t = self._lookup(name)
        if t is not None:
            node.cel_ident = "var"
            return t
        if name == "device":
            node.cel_ident = "device"
            return DEVICE
        if name in TYPE_NAMES:
            node.cel_ident = "type"
            return "type"
        raise CheckError(f"undeclared reference to '{name}'")

    def t_dot_ident(self, node: Any) -> str:
        name = str(node.children[0])
        if name == "device":
            return DEVICE
        raise CheckError(f"undeclared reference to '.{name}'")

    def t_dot_ident_arg(self, node: Any) -> str:
        raise CheckError(f"undeclared reference to '.{node.children[0]}'")

    def t_ident_arg(self, node: Any) -> str:
        name = str(node.children[0])
        exprs = list(node.children[1].children) if len(node.children) == 2 else []
        if name == "has":
            target = unwrap(exprs[0]) if len(exprs) == 1 else None
            if not (isinstance(target, lark.Tree) and target.data == "member_dot"):
                raise CheckError("invalid argument to has() macro")
            recv = self.visit(target.children[0])
            self._select_type(recv, str(target.children[1]))
            node.cel_has = target
            return "bool"
        args = [self.visit(e) for e in exprs]
        self._check_regex_literal(name, exprs)
        return self._call(name, None, args, node)

    def _aggregate(self, types: list[str], what: str) -> None:
        concrete = {_base(t) for t in types if t != DYN}
        if len(concrete) > 1:
            first, *rest = (_base(t) for t in types if t != DYN)
            other = next(t for t in rest if t != first)
            raise CheckError(f"{what}: expected type '{first}' but found '{other}'")

    def t_list_lit(self, node: Any) -> str:
        if node.children:
            self._aggregate([self.visit(e) for e in node.children[0].children], "list literal")
        return "list"

    def t_map_lit(self, node: Any) -> str:
        if node.children:
            items = node.children[0].children
            keys = [self.visit(k) for k in items[0::2]]
            values = [self.visit(v) for v in items[1::2]]
            for k in keys:
                if k not in (DYN, "int", "uint", "bool", "string"):
                    raise CheckError(f"unsupported map key type: {_shown(k)}")
            self._aggregate(keys, "map literal keys")
            self._aggregate(values, "map literal values")
        return "map"

    def t_literal(self, node: Any) -> str:
        tok = node.children[0]
        kind = tok.type
        text = str(tok)
        try:
            if kind == "INT_LIT":
                v = literal_int(text)
                if not INT64_MIN <= v <= INT64_MAX:
                    raise CheckError(f"invalid int literal: {text}")
                return "int"
            if kind == "UINT_LIT":
                v = literal_int(text[:-1])
                if not 0 <= v <= UINT64_MAX:
                    raise CheckError(f"invalid uint literal: {text}")
                return "uint"
            if kind == "FLOAT_LIT":
                float(text)
                return "double"
            if kind in ("STRING_LIT", "MLSTRING_LIT"):
                celstr(tok)
                return "string"
            if kind == "BYTES_LIT":
                celbytes(tok)
                return "bytes"
        except CheckError:
            raise
        except Exception as e:
            raise CheckError(f"invalid literal {text[:40]!r}: {e}") from None
        if kind == "BOOL_LIT":
            return "bool"
        if kind == "NULL_LIT":
            return "null_type"
        raise CheckError(f"unsupported literal {text[:40]!r}")
