"""The interpreted runner: celpy's tree-walking Evaluator with our overrides.

It serves any expression the transpiler cannot handle, and is the reference
the compiled runner is tested against. Identifiers, field selection, `has()`,
macros and `cel.bind` follow allocator.cel.lib, as in the compiled runner;
library functions are those of `lib.FUNCTIONS`, adapted to the Evaluator,
where errors are values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator

from allocator.cel import lib
from allocator.cel.check import literal_value, unwrap

_MISS = object()


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


INTERP_FUNCTIONS = {label: _interp_function(label, fn) for label, fn in lib.FUNCTIONS.items()}


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
        return INTERP_FUNCTIONS["_&&_"](left, self.visit(tree.children[1]))

    def conditionalor(self, tree: Any) -> Any:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if type(left) is celtypes.BoolType and left:
            return lib.TRUE
        return INTERP_FUNCTIONS["_||_"](left, self.visit(tree.children[1]))

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


def interpreter(tree: Any) -> Callable[[Activation], Any]:
    def run(activation: Activation) -> Any:
        try:
            return _Evaluator(tree, activation=activation).visit(tree)
        except Exception as e:
            return lib.error_value(e)

    return run
