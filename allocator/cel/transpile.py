"""The compiled runner: celpy's transpiler, emitting calls into our runtime.

celpy's transpiler turns the expression into Python once, and each
evaluation is one call of that code. We drive the transpiler ourselves
rather than through `celpy.CompiledRunner`, whose `evaluate` clones an
activation per call, executes in `celpy.evaluation`'s module globals (shared,
so not thread-safe) and logs every runtime error at ERROR. Each program gets
its own globals; identifiers, field selection, `has()`, macros and `cel.bind`
are transpiled to our runtime (allocator.cel.lib), literals to constants, and
every library function is bound into the globals from `lib.FUNCTIONS` under a
short name (`_f0`, `_f1`...), so a call is one global lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Template
from types import SimpleNamespace
from typing import Any

from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Phase1Transpiler, Phase2Transpiler

from allocator.cel import lib
from allocator.cel.check import CheckError, literal_value


class Act:
    """The compiled runner's activation: the device, plus macro/bind variables."""

    __slots__ = ("device", "vars")

    def __init__(self, device: Any, vars: dict[str, Any]) -> None:
        self.device = device
        self.vars = vars


def _binder(act: Act, name: str) -> Callable[[Any], Act]:
    def bind(value: Any) -> Act:
        return Act(act.device, {**act.vars, name: value})

    return bind


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


def _bind_eval(act: Act, name: str, init: Any, body: Callable[[Any], Any]) -> Any:
    return body(Act(act.device, {**act.vars, name: init}))


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
    """celpy's transpiler, emitting calls into our runtime (allocator.cel.lib)."""

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


def transpile(tree: Any) -> Callable[[Any], Any]:
    """Python code for a checked tree, executed in a namespace of its own."""
    constants: dict[str, Any] = {}
    facade = SimpleNamespace(base_activation=Activation())
    _Phase1(facade, constants).visit(tree)
    phase2 = Phase2Transpiler(facade)  # type: ignore[arg-type]  # a stand-in Transpiler: Phase 2 reads only facade.base_activation
    phase2.visit(tree)
    source = "\n".join(
        [*phase2._statements, f"def _cel(activation):\n    return {tree.transpiled}"]  # failures: caught by the caller
    )
    namespace = {**_BASE_GLOBALS, **constants, "_result": _result}
    exec(compile(source, "<cel>", "exec"), namespace)
    run: Callable[[Any], Any] = namespace["_cel"]
    return run
