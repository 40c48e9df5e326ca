"""CEL for device selectors, behind one small interface.

The engine is cel-python. Compiled programs are cached per expression,
activations per device version (`cel_key`; building one costs as much as
evaluating), and results per (expression, device version), so a selector is
evaluated once per device version however many pods and nodes ask.
Swapping in a faster engine means re-implementing this module against the
same conformance table (tests/allocator/test_cel.py).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import celpy
from celpy import celtypes

from allocator.cel_library import FUNCTIONS, CelQuantity, CelSemver
from allocator.quantity import Quantity
from allocator.semver import Semver

# cel-python logs every evaluation error; errors are ours to report.
for _name in ("celpy", "celpy.evaluation", "Evaluator", "NameContainer", "Activation", "Environment"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


class CelCompileError(ValueError):
    """An expression that does not compile; names the expression and the reason."""


class CelRuntimeError(ValueError):
    """An expression that failed for a device; names the expression and the reason."""


class SelectorDevice(Protocol):
    cel_key: Hashable
    driver: str
    attributes: Mapping[str, int | bool | str | Semver]
    capacity: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    expression: str
    program: Any = field(compare=False, repr=False)


class _DomainMap(celtypes.MapType):
    """`device.attributes[domain]`: an unknown domain is an empty map (as upstream)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def _value(v: Any) -> Any:
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, int):
        return celtypes.IntType(v)
    if isinstance(v, str):
        return celtypes.StringType(v)
    if isinstance(v, Semver):
        return CelSemver(v)
    if isinstance(v, Quantity):
        return CelQuantity(v)
    raise TypeError(f"unsupported attribute value {v!r}")


def _grouped(values: Mapping[str, Any]) -> _DomainMap:
    domains: dict[str, dict[Any, Any]] = {}
    for name, v in values.items():
        domain, _, ident = name.rpartition("/")
        domains.setdefault(domain, {})[celtypes.StringType(ident)] = _value(v)
    return _DomainMap({celtypes.StringType(d): celtypes.MapType(m) for d, m in domains.items()})


def activation(device: SelectorDevice) -> dict[str, Any]:
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): _grouped(device.attributes),
                celtypes.StringType("capacity"): _grouped(device.capacity),
            }
        )
    }


def _reason(e: BaseException) -> str:
    # cel-python's messages carry the whole activation; keep the first line of the cause.
    if e.args and isinstance(e.args[0], str):
        text = e.args[0]
    else:
        text = str(e)
    text = text.split(" (in activation", 1)[0]
    return text[:300]


class CelEnvironment:
    def __init__(self, *, max_cached_devices: int = 200_000, max_cached_results: int = 2_000_000) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, CompiledSelector | CelCompileError] = {}
        self._activations: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()
        self._results: OrderedDict[tuple[str, Hashable], bool | CelRuntimeError] = OrderedDict()
        self._max_devices = max_cached_devices
        self._max_results = max_cached_results
        self._stats = {"hits": 0, "misses": 0, "evaluations": 0, "errors": 0, "compiled": 0}

    @property
    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def compile(self, expression: str) -> CompiledSelector:
        cached = self._programs.get(expression)
        if cached is None:
            try:
                ast = self._env.compile(expression)
                cached = CompiledSelector(expression, self._env.program(ast, functions=FUNCTIONS))
                self._stats["compiled"] += 1
            except Exception as e:  # noqa: BLE001 - any parser failure is a compile error
                cached = CelCompileError(f"CEL expression {expression!r} does not compile: {_reason(e)}")
            self._programs[expression] = cached
        if isinstance(cached, CelCompileError):
            raise cached
        return cached

    def _activation(self, device: SelectorDevice) -> dict[str, Any]:
        act = self._activations.get(device.cel_key)
        if act is None:
            act = activation(device)
            self._activations[device.cel_key] = act
            if len(self._activations) > self._max_devices:
                self._activations.popitem(last=False)
        return act

    def evaluate(self, selector: CompiledSelector, device: SelectorDevice) -> bool:
        key = (selector.expression, device.cel_key)
        cached = self._results.get(key)
        if cached is not None:
            self._stats["hits"] += 1
            if isinstance(cached, CelRuntimeError):
                raise cached
            return cached
        self._stats["misses"] += 1
        result = self._run(selector, device)
        self._results[key] = result
        if len(self._results) > self._max_results:
            self._results.popitem(last=False)
        if isinstance(result, CelRuntimeError):
            raise result
        return result

    def _run(self, selector: CompiledSelector, device: SelectorDevice) -> bool | CelRuntimeError:
        self._stats["evaluations"] += 1
        try:
            value = selector.program.evaluate(self._activation(device))
        except Exception as e:  # noqa: BLE001 - every evaluation failure is a CEL runtime error
            self._stats["errors"] += 1
            return CelRuntimeError(f"CEL expression {selector.expression!r} failed: {_reason(e)}")
        if isinstance(value, celtypes.BoolType | bool):
            return bool(value)
        self._stats["errors"] += 1
        return CelRuntimeError(
            f"CEL expression {selector.expression!r} must evaluate to bool, got {type(value).__name__}"
        )

    def forget(self, cel_key: Hashable) -> None:
        self._activations.pop(cel_key, None)
        for key in [k for k in self._results if k[1] == cel_key]:
            del self._results[key]
