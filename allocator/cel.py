"""CEL for device selectors, behind one small interface.

The engine is cel-python (`celpy`): its parser and value types, and one of
its two runners per expression:

- the *compiled* runner: celpy's transpiler turns the expression into Python
  once, and each evaluation is one call of that code: 1-3 us, 50-150x
  faster than the interpreter (bench/results/cel.md). We drive the
  transpiler ourselves rather than through `celpy.CompiledRunner`, whose
  `evaluate` clones an activation per call, executes in `celpy.evaluation`'s
  module globals (shared, so not thread-safe) and logs every runtime error
  at ERROR. Each program gets its own globals; identifiers, field
  selection, `has()`, macros and `cel.bind` are transpiled to our runtime
  (allocator.cel_library), literals to constants;
- the *interpreted* runner (celpy's tree-walking Evaluator with the same
  overrides) serves any expression the transpiler cannot handle, and is
  kept as the reference the compiled runner is tested against.

Both runners use the semantics of allocator.cel_library, which follow
upstream Kubernetes (cel-go) rather than cel-python where they differ.

Costs are paid once: programs are cached per expression, device activations
per device version (`cel_key`; building one costs as much as ten compiled
evaluations), and results per (expression, device version), so a selector
is evaluated once per device version however many pods and nodes ask.
Like upstream, an evaluation has a cost budget, and an expression whose
estimated cost is over it does not compile.

Swapping in a faster engine means re-implementing this module against the
same conformance table (tests/allocator/test_cel.py).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from types import SimpleNamespace
from typing import Any, Literal, Protocol

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParser
from celpy.evaluation import (
    Activation,
    CELEvalError,
    Evaluator,
    Phase1Transpiler,
    Phase2Transpiler,
    TranspilerTree,
    celbytes,
    celstr,
)

from allocator import cel_library as lib
from allocator.cel_check import Checker, CheckError, depth, literal_int, unwrap
from allocator.quantity import Quantity
from allocator.semver import Semver

__all__ = [
    "CelCompileError",
    "CelEnvironment",
    "CelRuntimeError",
    "CompiledSelector",
    "SelectorDevice",
]

# cel-python logs every evaluation problem (some at ERROR); reporting them is our job.
_celpy_logger = logging.getLogger("celpy")
if _celpy_logger.level == logging.NOTSET:
    _celpy_logger.setLevel(logging.CRITICAL)

MAX_EXPRESSION_LENGTH = 10 * 1024  # upstream CELSelectorExpressionMaxLength
# Deepest parse tree accepted. Each level of CEL nesting adds ~10 tree levels; the
# runners recurse per tree level, and this keeps them far from Python's recursion limit.
MAX_TREE_DEPTH = 220
MAX_CACHED_PROGRAMS = 10_000

Backend = Literal["compiled", "interpreted"]


class CelCompileError(ValueError):
    """An expression that does not compile; str() names the expression and the reason."""

    def __init__(self, expression: str, reason: str) -> None:
        self.expression = expression
        self.reason = reason
        super().__init__(f"CEL expression {_shorten(expression)!r} does not compile: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expression, self.reason))


class CelRuntimeError(ValueError):
    """An expression that failed for a device; str() names the expression and the reason."""

    def __init__(self, expression: str, reason: str) -> None:
        self.expression = expression
        self.reason = reason
        super().__init__(f"CEL expression {_shorten(expression)!r} failed: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expression, self.reason))


def _shorten(expression: str) -> str:
    return expression if len(expression) <= 300 else expression[:300] + "..."


class SelectorDevice(Protocol):
    """What a selector sees of a device."""

    cel_key: Hashable  # identifies this device *version*; equal keys => identical content
    driver: str
    attributes: Mapping[str, int | bool | str | Semver]  # fully qualified names
    capacity: Mapping[str, Quantity]  # fully qualified names


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled expression; obtain from CelEnvironment.compile (other fields are engine-private)."""

    expression: str
    backend: Backend = field(default="compiled", compare=False)
    run: Callable[[Any], Any] = field(default=lambda act: None, compare=False, repr=False)


# ---------------------------------------------------------------- parsing

_parser: lark.Lark | None = None
_parser_lock = threading.Lock()


def _parse(text: str) -> lark.Tree:
    """Our own lark parser for celpy's grammar: celpy's CELParser is a process-wide
    singleton fixed to whichever tree class was asked for first."""
    global _parser
    if _parser is None:
        with _parser_lock:
            if _parser is None:
                grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
                _parser = lark.Lark(
                    grammar,
                    parser="lalr",
                    start="expr",
                    g_regex_flags=re.M,
                    lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
                    propagate_positions=True,
                    maybe_placeholders=False,
                    priority="invert",
                    tree_class=TranspilerTree,
                )
    return _parser.parse(text)


def _syntax_reason(text: str, e: Exception) -> str:
    if isinstance(e, lark.exceptions.UnexpectedInput):
        where = f"line {e.line}, column {e.column}" if getattr(e, "line", -1) not in (None, -1) else "end of input"
        if isinstance(e, lark.exceptions.UnexpectedCharacters):
            return f"syntax error at {where}: unexpected character {text[e.pos_in_stream : e.pos_in_stream + 1]!r}"
        if isinstance(e, lark.exceptions.UnexpectedEOF):
            return "syntax error: unexpected end of expression"
        token = getattr(e, "token", None)
        shown = f" {str(token)[:40]!r}" if token is not None and str(token) else ""
        if getattr(token, "type", "") == "$END":
            return "syntax error: unexpected end of expression"
        return f"syntax error at {where}: unexpected token{shown}"
    return f"syntax error: {lib.reason(e)}"


def literal_value(tok: lark.Token) -> Any:
    """A literal token's CEL value (checked by cel_check, so it decodes)."""
    kind, text = tok.type, str(tok)
    if kind == "INT_LIT":
        return lib.mk_int(literal_int(text))
    if kind == "UINT_LIT":
        return lib.mk_uint(literal_int(text[:-1]))
    if kind == "FLOAT_LIT":
        return lib.mk_double(float(text))
    if kind in ("STRING_LIT", "MLSTRING_LIT"):
        return str(celstr(tok))
    if kind == "BYTES_LIT":
        return celbytes(tok)
    if kind == "BOOL_LIT":
        return lib.TRUE if text == "true" else lib.FALSE
    return None  # NULL_LIT


# ---------------------------------------------------------------- activations


class _Act:
    """The compiled runner's activation: the device, plus macro/bind variables."""

    __slots__ = ("device", "vars")

    def __init__(self, device: Any, vars: dict[str, Any]) -> None:
        self.device = device
        self.vars = vars


def _binder(act: _Act, name: str) -> Callable[[Any], _Act]:
    def bind(value: Any) -> _Act:
        return _Act(act.device, {**act.vars, name: value})

    return bind


def _cel_value(name: str, v: Any) -> Any:
    if isinstance(v, bool):
        return lib.TRUE if v else lib.FALSE
    if isinstance(v, int):
        if not lib.INT64_MIN <= v <= lib.INT64_MAX:
            raise ValueError(f"attribute {name}: int value out of range")
        return lib.mk_int(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, Semver):
        return lib.CelSemver(v)
    if isinstance(v, Quantity):
        return lib.CelQuantity(v)
    raise ValueError(f"attribute {name}: unsupported value of type {type(v).__name__}")


def _map(items: Mapping[Any, Any], cls: type[celtypes.MapType] = celtypes.MapType) -> celtypes.MapType:
    m = cls()
    dict.update(m, items)  # MapType() copies item by item in Python
    return m


def _grouped(values: Mapping[str, Any], driver: str) -> lib.DomainMap:
    domains: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
        if not isinstance(name, str):
            raise ValueError(f"attribute name {name!r} is not a string")
        domain, sep, ident = name.partition("/")
        if not sep:  # upstream: a name without a domain belongs to the driver
            domain, ident = driver, name
        domains.setdefault(domain, {})[ident] = _cel_value(name, v)
    return _map({d: _map(m) for d, m in domains.items()}, lib.DomainMap)  # type: ignore[return-value]


def device_value(device: SelectorDevice) -> celtypes.MapType:
    """The `device` variable: {driver, attributes[domain][id], capacity[domain][id]}."""
    driver = device.driver
    if not isinstance(driver, str):
        raise ValueError(f"driver {driver!r} is not a string")
    return _map(
        {
            "driver": str(driver),
            "attributes": _grouped(device.attributes, driver),
            "capacity": _grouped(device.capacity, driver),
        }
    )


class _DeviceEntry:
    """Everything cached per device version: its activations (or why it has none) and results.

    Results live here, keyed by expression, rather than in one map keyed by
    (expression, device): a dict of str -> bool is invisible to the garbage
    collector, and with hundreds of thousands of cached results the collector's
    passes over tracked keys cost as much as the evaluations themselves.
    """

    __slots__ = ("act", "error", "interp", "results")

    def __init__(self, act: _Act | None, error: str | None) -> None:
        self.act = act
        self.error = error
        self.interp: Activation | None = None
        self.results: dict[str, bool | CelRuntimeError] = {}


# ---------------------------------------------------------------- the compiled runner


def _result(activation: Any, fn: Callable[[Any], Any]) -> Any:
    """celpy's `result()` boundary (&&, ||, ?:, has, macros): a failure becomes an error value."""
    try:
        return fn(activation)
    except Exception as e:
        return lib.error_value(e)


def _has(receiver: Any, name: str) -> Any:
    if isinstance(receiver, BaseException):
        raise receiver
    return lib.has_field(receiver, name)


def _body(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda act: _result(act, fn)


def _bind_eval(act: _Act, name: str, init: Any, body: Callable[[Any], Any]) -> Any:
    return body(_Act(act.device, {**act.vars, name: init}))


def _and(act: Any, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> Any:
    """`&&` left to right, skipping the right side after false (as cel-go): an
    error on the left still yields to false on the right."""
    a = _result(act, left)
    if a is lib.FALSE or (type(a) is celtypes.BoolType and not a):
        return lib.FALSE
    return lib.op_and(a, _result(act, right))


def _or(act: Any, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> Any:
    a = _result(act, left)
    if a is lib.TRUE or (type(a) is celtypes.BoolType and a):
        return lib.TRUE
    return lib.op_or(a, _result(act, right))


def _cond(act: Any, cond: Callable[[Any], Any], then: Callable[[Any], Any], other: Callable[[Any], Any]) -> Any:
    c = cond(act)
    if type(c) is not celtypes.BoolType:
        raise TypeError(f"found no matching overload for '_?_:_' applied to '({lib.kind(c)}, ...)'")
    return then(act) if c else other(act)


_FUNCTION_NAMES = {label: f"_f{i}" for i, label in enumerate(lib.FUNCTIONS)}
_BASE_GLOBALS: dict[str, Any] = {
    "__builtins__": {},
    "celpy": SimpleNamespace(celtypes=celtypes, evaluation=SimpleNamespace(result=_result)),
    "CELEvalError": CELEvalError,
    "_select": lib.select,
    "_has": _has,
    "_binder": _binder,
    "_body": _body,
    "_bind_eval": _bind_eval,
    "_and": _and,
    "_or": _or,
    "_cond": _cond,
    **{f"_m_{name}": fn for name, fn in lib.MACROS.items()},
    **{py: lib.FUNCTIONS[label] for label, py in _FUNCTION_NAMES.items()},
}


def _statement(text: str) -> tuple[Template, dict[str, Callable[[Any], str]]]:
    """A Phase 2 statement celpy's Phase2Transpiler emits verbatim."""
    return (Template("${text}"), {"text": lambda tree: text})


class _Phase1(Phase1Transpiler):
    """celpy's transpiler, emitting calls into our runtime (allocator.cel_library)."""

    def __init__(self, facade: Any, constants: dict[str, Any]) -> None:
        super().__init__(facade)
        self.constants = constants

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def func_name(self, label: str) -> str:
        name = _FUNCTION_NAMES.get(label)
        if name is None:
            raise CheckError(f"undeclared reference to '{label}'")
        return name

    def literal(self, tree: Any) -> None:
        tree.transpiled = self.constant(literal_value(tree.children[0]))

    def _lazy(self, tree: Any, runtime: str) -> None:
        """Children as lambdas, so the runtime evaluates only what it needs."""
        n = tree.expr_number
        names = [f"ex_{n}_{i}" for i in range(len(tree.children))]
        lines = [f"{name} = lambda activation: {child.transpiled}" for name, child in zip(names, tree.children, strict=True)]
        lines.append(f"ex_{n} = lambda activation: {runtime}(activation, {', '.join(names)})")
        tree.checked_exception = _statement("\n".join(lines))
        tree.transpiled = f"ex_{n}(activation)"

    def expr(self, tree: Any) -> None:
        if len(tree.children) == 1:
            tree.transpiled = tree.children[0].transpiled
        else:
            self._lazy(tree, "_cond")

    def conditionalor(self, tree: Any) -> None:
        if len(tree.children) == 1:
            tree.transpiled = tree.children[0].transpiled
        else:
            self._lazy(tree, "_or")

    def conditionaland(self, tree: Any) -> None:
        if len(tree.children) == 1:
            tree.transpiled = tree.children[0].transpiled
        else:
            self._lazy(tree, "_and")

    def ident(self, tree: Any) -> None:
        name = str(tree.children[0])
        how = getattr(tree, "cel_ident", None)
        if how == "device":
            tree.transpiled = "activation.device"
        elif how == "type":
            tree.transpiled = self.constant(lib.TYPE_VALUES[name])
        else:
            tree.transpiled = f"activation.vars[{name!r}]"

    def dot_ident(self, tree: Any) -> None:
        tree.transpiled = "activation.device"

    def member_dot(self, tree: Any) -> None:
        member, name = tree.children
        tree.transpiled = f"_select({member.transpiled}, {str(name)!r})"

    def member_dot_arg(self, tree: Any) -> None:
        n = tree.expr_number
        exprs = list(tree.children[2].children) if len(tree.children) == 3 else []
        bind = getattr(tree, "cel_bind", None)
        macro = getattr(tree, "cel_macro", None)
        if bind is not None:
            tree.checked_exception = _statement(
                f"ex_{n}_i = lambda activation: {exprs[1].transpiled}\n"
                f"ex_{n}_b = lambda activation: {exprs[2].transpiled}\n"
                f"ex_{n} = lambda activation: _bind_eval(activation, {bind!r}, ex_{n}_i(activation), ex_{n}_b)"
            )
            tree.transpiled = f"ex_{n}(activation)"
        elif macro is not None:
            name, var, _ = macro
            cost = getattr(tree, "cel_step_cost", 1)
            target = tree.children[0].transpiled
            lines = [f"ex_{n}_l = lambda activation: {target}", f"ex_{n}_x = lambda activation: {exprs[-1].transpiled}"]
            extra = f"cost={int(cost)}"
            if name == "map" and len(exprs) == 3:
                lines.append(f"ex_{n}_p = lambda activation: {exprs[1].transpiled}")
                extra = f"predicate=_body(ex_{n}_p), {extra}"
            lines.append(
                f"ex_{n} = lambda activation: _m_{name}(_binder(activation, {var!r}), _body(ex_{n}_x), ex_{n}_l(activation), {extra})"
            )
            tree.checked_exception = _statement("\n".join(lines))
            tree.transpiled = f"ex_{n}(activation)"
        else:
            args = ", ".join([tree.children[0].transpiled, *(e.transpiled for e in exprs)])
            tree.transpiled = f"{self.func_name(str(tree.children[1]))}({args})"

    def ident_arg(self, tree: Any) -> None:
        name = str(tree.children[0])
        exprs = list(tree.children[1].children) if len(tree.children) == 2 else []
        if name == "has":
            target = tree.cel_has
            n = tree.expr_number
            tree.checked_exception = _statement(
                f"ex_{n}_h = lambda activation: {target.children[0].transpiled}\n"
                f"ex_{n} = lambda activation: _has(celpy.evaluation.result(activation, ex_{n}_h), {str(target.children[1])!r})"
            )
            tree.transpiled = f"ex_{n}(activation)"
        else:
            tree.transpiled = f"{self.func_name(name)}({', '.join(e.transpiled for e in exprs)})"


def _transpile(tree: Any) -> Callable[[Any], Any]:
    """Python code for a checked tree, executed in a namespace of its own."""
    constants: dict[str, Any] = {}
    facade = SimpleNamespace(base_activation=Activation())
    _Phase1(facade, constants).visit(tree)
    phase2 = Phase2Transpiler(facade)  # type: ignore[arg-type]
    phase2.visit(tree)
    source = "\n".join(
        [*phase2._statements, f"def _cel(activation):\n    return {tree.transpiled}"]  # failures: caught by the caller
    )
    namespace = {**_BASE_GLOBALS, **constants, "_result": _result}
    exec(compile(source, "<cel>", "exec"), namespace)
    return namespace["_cel"]


# ---------------------------------------------------------------- the interpreted runner


def _interp_function(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapts a raising library function to the Evaluator, where errors are values."""
    aware = label in lib.ERROR_AWARE

    def call(*args: Any) -> Any:
        if not aware:
            for a in args:
                if isinstance(a, CELEvalError):
                    return a
        try:
            return fn(*args)
        except Exception as e:
            return lib.error_value(e)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", label)
    return call


_INTERP_FUNCTIONS = {label: _interp_function(label, fn) for label, fn in lib.FUNCTIONS.items()}


class _Evaluator(Evaluator):
    """celpy's interpreter with our identifiers, field selection, has(), macros and cel.bind."""

    def _sub(self, tree: Any, activation: Activation) -> Any:
        return type(self)(tree, activation=activation).visit(tree)

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        try:
            return self.activation.identifiers.resolve_name(self.activation.package, name).value
        except KeyError:
            if name in lib.TYPE_VALUES:
                return lib.TYPE_VALUES[name]
            raise

    def literal(self, tree: Any) -> Any:
        # Decoding a string literal walks it in Python: once per tree, not once per visit
        # (a 9,000-character literal inside a comprehension cost ~10 ms per step).
        value = getattr(tree, "cel_literal", _MISS)
        if value is _MISS:
            value = tree.cel_literal = literal_value(tree.children[0])
        return value

    def conditionaland(self, tree: Any) -> Any:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if type(left) is celtypes.BoolType and not left:
            return lib.FALSE  # as cel-go: the right side is not evaluated
        return _INTERP_FUNCTIONS["_&&_"](left, self.visit(tree.children[1]))

    def conditionalor(self, tree: Any) -> Any:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if type(left) is celtypes.BoolType and left:
            return lib.TRUE
        return _INTERP_FUNCTIONS["_||_"](left, self.visit(tree.children[1]))

    def mapinits(self, tree: Any) -> Any:
        values = self.visit_children(tree)
        for v in values:
            if isinstance(v, CELEvalError):
                return v
        try:
            return celtypes.MapType(list(zip(values[0::2], values[1::2], strict=True)))
        except Exception as e:
            return lib.error_value(e)

    def member_dot(self, tree: Any) -> Any:
        member = self.visit(tree.children[0])
        if isinstance(member, CELEvalError):
            return member
        try:
            return lib.select(member, str(tree.children[1]))
        except Exception as e:
            return lib.error_value(e)

    def macro_has_eval(self, exprlist: Any) -> Any:
        target = unwrap(exprlist.children[0])
        receiver = self.visit(target.children[0])
        if isinstance(receiver, CELEvalError):
            return receiver
        try:
            return lib.has_field(receiver, str(target.children[1]))
        except Exception as e:
            return lib.error_value(e)

    def member_dot_arg(self, tree: Any) -> Any:
        exprs = list(tree.children[2].children) if len(tree.children) == 3 else []
        bind = getattr(tree, "cel_bind", None)
        macro = getattr(tree, "cel_macro", None)
        try:
            if bind is not None:
                init = self.visit(exprs[1])
                if isinstance(init, CELEvalError):
                    return init
                return self._sub(exprs[2], self.activation.nested_activation(vars={bind: init}))
            if macro is not None:
                name, var, _ = macro
                cost = getattr(tree, "cel_step_cost", 1)
                target = self.visit(tree.children[0])
                act = self.activation

                def binder(value: Any) -> Activation:
                    return act.nested_activation(vars={var: value})

                def body_of(node: Any) -> Callable[[Activation], Any]:
                    return lambda a: self._sub(node, a)

                extra = {"predicate": body_of(exprs[1])} if name == "map" and len(exprs) == 3 else {}
                return lib.MACROS[name](binder, body_of(exprs[-1]), target, cost=cost, **extra)
            receiver = self.visit(tree.children[0])
            args = [self.visit(e) for e in exprs]
            return self.activation.resolve_function(str(tree.children[1]))(receiver, *args)
        except Exception as e:
            return lib.error_value(e)


def _interpreter(tree: Any) -> Callable[[Activation], Any]:
    def run(activation: Activation) -> Any:
        try:
            return _Evaluator(tree, activation=activation).visit(tree)
        except Exception as e:
            return lib.error_value(e)

    return run


# ---------------------------------------------------------------- the environment

_MISS = object()


class CelEnvironment:
    """Compiles selectors and evaluates them per device, caching programs, activations and results.

    Caches are bounded: over `max_cached_devices` device versions or
    `max_cached_results` results, the least recently used device version is
    evicted with its activation and results. Thread-safe: cache bookkeeping is
    under a lock, evaluation runs outside it.
    """

    def __init__(
        self,
        *,
        max_cached_devices: int = 200_000,
        max_cached_results: int = 2_000_000,
        backend: Backend = "compiled",
    ) -> None:
        if backend not in ("compiled", "interpreted"):
            raise ValueError(f"unknown CEL backend {backend!r}")
        self._backend: Backend = backend
        self._max_devices = max(1, max_cached_devices)
        self._max_results = max(1, max_cached_results)
        self._lock = threading.Lock()
        self._programs: OrderedDict[str, CompiledSelector | CelCompileError] = OrderedDict()
        self._devices: OrderedDict[Hashable, _DeviceEntry] = OrderedDict()  # least recently used first
        self._n_results = 0
        self._stats = {
            "hits": 0,
            "misses": 0,
            "evaluations": 0,
            "errors": 0,
            "programs": 0,
            "compile_errors": 0,
            "interpreted_fallbacks": 0,
        }

    @property
    def stats(self) -> dict[str, int]:
        """Counters for metrics: hits, misses, evaluations, errors, compiles; cache sizes."""
        with self._lock:
            out = dict(self._stats)
            out["cached_devices"] = len(self._devices)
            out["cached_results"] = self._n_results
        return out

    # ------------------------------------------------------------ compile

    def compile(self, expression: str) -> CompiledSelector:
        """The program for an expression (cached); raises CelCompileError."""
        if not isinstance(expression, str):
            raise CelCompileError(repr(expression), f"expression must be a string, not {type(expression).__name__}")
        with self._lock:
            cached = self._programs.get(expression)
            if cached is not None:
                self._programs.move_to_end(expression)
        if cached is None:
            cached = self._compile(expression)
            with self._lock:
                self._programs[expression] = cached
                if isinstance(cached, CelCompileError):
                    self._stats["compile_errors"] += 1
                else:
                    self._stats["programs"] += 1
                    if cached.backend == "interpreted" and self._backend == "compiled":
                        self._stats["interpreted_fallbacks"] += 1
                while len(self._programs) > MAX_CACHED_PROGRAMS:
                    self._programs.popitem(last=False)
        if isinstance(cached, CelCompileError):
            raise cached
        return cached

    def _compile(self, expression: str) -> CompiledSelector | CelCompileError:
        try:
            if len(expression) > MAX_EXPRESSION_LENGTH:
                return CelCompileError(expression, f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
            try:
                tree = _parse(expression)
            except Exception as e:
                return CelCompileError(expression, _syntax_reason(expression, e))
            if depth(tree) > MAX_TREE_DEPTH:
                return CelCompileError(expression, "expression is nested too deeply")
            try:
                Checker().check(tree)
            except CheckError as e:
                return CelCompileError(expression, str(e))
            if self._backend == "compiled":
                try:
                    return CompiledSelector(expression, "compiled", _transpile(tree))
                except Exception:
                    logging.getLogger(__name__).debug("CEL expression %r falls back to the interpreter", expression, exc_info=True)
            return CompiledSelector(expression, "interpreted", _interpreter(tree))
        except RecursionError:
            return CelCompileError(expression, "expression is nested too deeply")
        except Exception as e:
            return CelCompileError(expression, f"internal error: {lib.reason(e)}")

    # ------------------------------------------------------------ evaluate

    def evaluate(self, selector: CompiledSelector, device: SelectorDevice) -> bool:
        """Whether the selector matches the device (cached); raises CelRuntimeError."""
        try:
            expression = selector.expression
            cel_key = device.cel_key
            with self._lock:
                entry = self._devices.get(cel_key)
                if entry is None:
                    cached: Any = _MISS
                else:
                    self._devices.move_to_end(cel_key)
                    cached = entry.results.get(expression, _MISS)
                if cached is _MISS:
                    self._stats["misses"] += 1
                else:
                    self._stats["hits"] += 1
        except Exception as e:
            raise CelRuntimeError(str(getattr(selector, "expression", selector)), f"cannot evaluate: {lib.reason(e)}") from None
        if cached is _MISS:
            if entry is None:
                entry = self._new_entry(device, cel_key)
            cached = self._run(selector, entry)
            with self._lock:
                self._stats["evaluations"] += 1
                if cached is not True and cached is not False:
                    self._stats["errors"] += 1
                if self._devices.get(cel_key) is entry and expression not in entry.results:
                    entry.results[expression] = cached
                    self._n_results += 1
                    self._trim()
        if cached is True or cached is False:
            return cached
        raise cached.with_traceback(None)

    def _new_entry(self, device: SelectorDevice, cel_key: Hashable) -> _DeviceEntry:
        """Build (outside the lock) and cache the activation of a device version."""
        try:
            entry = _DeviceEntry(_Act(device_value(device), {}), None)
        except Exception as e:
            entry = _DeviceEntry(None, f"device cannot be evaluated: {lib.reason(e)}")
        with self._lock:
            existing = self._devices.get(cel_key)
            if existing is not None:  # another thread was first
                return existing
            self._devices[cel_key] = entry
            self._trim()
        return entry

    def _trim(self) -> None:
        """Evict least recently used device versions (activation and results) over either bound."""
        devices = self._devices
        while len(devices) > self._max_devices or (self._n_results > self._max_results and len(devices) > 1):
            _, old = devices.popitem(last=False)
            self._n_results -= len(old.results)
        if self._n_results > self._max_results and devices:  # one device holds more than the bound
            results = next(reversed(devices.values())).results
            while self._n_results > self._max_results and results:
                del results[next(iter(results))]
                self._n_results -= 1

    @staticmethod
    def _run(selector: CompiledSelector, entry: _DeviceEntry) -> bool | CelRuntimeError:
        if entry.act is None:
            return CelRuntimeError(selector.expression, entry.error or "device cannot be evaluated")
        try:
            lib.reset_budget(1 if selector.backend == "compiled" else lib.INTERPRETED_BUDGET_DIVISOR)
            if selector.backend == "compiled":
                value = selector.run(entry.act)
            else:
                if entry.interp is None:
                    entry.interp = Activation(functions=_INTERP_FUNCTIONS, vars={"device": entry.act.device})
                value = selector.run(entry.interp)
        except lib.CostLimitExceeded as e:
            return CelRuntimeError(selector.expression, str(e))
        except lib.DeadlineExceeded as e:
            e.expression = selector.expression  # the caller names it; never cached
            raise
        except Exception as e:
            value = lib.error_value(e)
        if value is True or value is False or isinstance(value, celtypes.BoolType):
            return bool(value)
        if isinstance(value, CELEvalError):
            return CelRuntimeError(selector.expression, lib.reason(value))
        return CelRuntimeError(selector.expression, f"expression must evaluate to bool, got {lib.kind(value)}")

    # ------------------------------------------------------------ forget

    def forget(self, cel_key: Hashable) -> None:
        """Drop the cached activation and results of a device version that is gone."""
        try:
            with self._lock:
                entry = self._devices.pop(cel_key, None)
                if entry is not None:
                    self._n_results -= len(entry.results)
        except TypeError:  # an unhashable key was never cached
            return
