"""CEL for device selectors, behind one small interface: the environment.

The engine is cel-python (`celpy`): its parser and value types, and one of
its two runners per expression:

- the *compiled* runner (allocator.cel.transpile): celpy's transpiler turns
  the expression into Python once, and each evaluation is one call of that
  code: 1-3 us, 50-150x faster than the interpreter (bench/results/cel.md);
- the *interpreted* runner (allocator.cel.interpret: celpy's tree-walking
  Evaluator with the same overrides) serves any expression the transpiler
  cannot handle, and is kept as the reference the compiled runner is tested
  against.

Both runners use the semantics of allocator.cel.lib, which follow upstream
Kubernetes (cel-go) rather than cel-python where they differ; compile-time
checks are allocator.cel.check's.

Costs are paid once: programs are cached per expression, device activations
per device version (`cel_key`; building one costs as much as ten compiled
evaluations), and results per (expression, device version), so a selector
is evaluated once per device version however many pods and nodes ask.
Activations are the bulk of the cache (~500 bytes a device: nested celpy
maps) and are needed only for an expression a device has not seen, so they
have a bound of their own, far below the results': an evicted one is
rebuilt, giving the same results, when a new expression asks.
Like upstream, an evaluation has a cost budget, and an expression whose
estimated cost is over it does not compile.

Swapping in a faster engine means re-implementing this package against the
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
from typing import Any, Literal, Protocol

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParser
from celpy.evaluation import Activation, CELEvalError, TranspilerTree

from allocator.cel import lib
from allocator.cel.check import Checker, CheckError, depth
from allocator.cel.interpret import INTERP_FUNCTIONS, interpreter
from allocator.cel.transpile import Act, transpile
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
# Activations kept (results are kept for up to `max_cached_devices` device versions): at ~500 bytes each,
# 40,000 devices' were 20 MB of a 5,000-node extender (bench/results/issue-31-memory.md); a rebuild costs ~10 evaluations.
MAX_CACHED_ACTIVATIONS = 10_000

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

    @property
    def cel_key(self) -> Hashable:
        """Identifies this device *version*: equal keys => identical content."""

    @property
    def driver(self) -> str: ...

    @property
    def attributes(self) -> Mapping[str, int | bool | str | Semver]:
        """Fully qualified names."""

    @property
    def capacity(self) -> Mapping[str, Quantity]:
        """Fully qualified names."""

    @property
    def allow_multiple_allocations(self) -> bool:
        """`device.allowMultipleAllocations` (DRAConsumableCapacity): shared by several claims."""


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled expression; obtain from CelEnvironment.compile (other fields are engine-private)."""

    expression: str
    backend: Backend = field(default="compiled", compare=False)
    run: Callable[[Any], Any] = field(default=lambda act: None, compare=False, repr=False)


# ---------------------------------------------------------------- parsing

_parser: lark.Lark | None = None
_parser_lock = threading.Lock()


def parse(text: str) -> lark.Tree[lark.Token]:
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
        if isinstance(e, lark.exceptions.UnexpectedCharacters) and e.pos_in_stream is not None:
            return f"syntax error at {where}: unexpected character {text[e.pos_in_stream : e.pos_in_stream + 1]!r}"
        if isinstance(e, lark.exceptions.UnexpectedEOF):
            return "syntax error: unexpected end of expression"
        token = getattr(e, "token", None)
        shown = f" {str(token)[:40]!r}" if token is not None and str(token) else ""
        if getattr(token, "type", "") == "$END":
            return "syntax error: unexpected end of expression"
        return f"syntax error at {where}: unexpected token{shown}"
    return f"syntax error: {lib.reason(e)}"


# ---------------------------------------------------------------- activations


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


def _map(items: Mapping[Any, Any]) -> celtypes.MapType:
    m = celtypes.MapType()
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
    grouped = lib.DomainMap()
    dict.update(grouped, {d: _map(m) for d, m in domains.items()})
    return grouped


def device_value(device: SelectorDevice) -> celtypes.MapType:
    """The `device` variable: {driver, allowMultipleAllocations, attributes[domain][id], capacity[domain][id]}."""
    driver = device.driver
    if not isinstance(driver, str):
        raise ValueError(f"driver {driver!r} is not a string")
    return _map(
        {
            "driver": str(driver),
            "allowMultipleAllocations": bool(device.allow_multiple_allocations),
            "attributes": _grouped(device.attributes, driver),
            "capacity": _grouped(device.capacity, driver),
        }
    )


def _build(device: SelectorDevice) -> tuple[Act | None, str | None]:
    """A device version's activation, or why it cannot have one."""
    try:
        return Act(device_value(device), {}), None
    except Exception as e:
        return None, f"device cannot be evaluated: {lib.reason(e)}"


class _DeviceEntry:
    """Everything cached per device version: its activations (or why it has none) and results.

    `act` and `error` both None: the activations were evicted (`max_cached_activations`)
    and are rebuilt from the device at the next expression it has no result for.

    Results live here, keyed by expression, rather than in one map keyed by
    (expression, device): a dict of str -> bool is invisible to the garbage
    collector, and with hundreds of thousands of cached results the collector's
    passes over tracked keys cost as much as the evaluations themselves.
    """

    __slots__ = ("act", "error", "interp", "results")

    def __init__(self, act: Act | None, error: str | None) -> None:
        self.act = act
        self.error = error
        self.interp: Activation | None = None
        self.results: dict[str, bool | CelRuntimeError] = {}


# ---------------------------------------------------------------- the environment

_MISS = object()


class CelEnvironment:
    """Compiles selectors and evaluates them per device, caching programs, activations and results.

    Caches are bounded: over `max_cached_devices` device versions or
    `max_cached_results` results, the least recently used device version is
    evicted with its activation and results; over `max_cached_activations`,
    the least recently built or used activation is dropped and its results
    kept. Thread-safe: cache bookkeeping is under a lock, evaluation runs
    outside it on the activation it took.
    """

    def __init__(
        self,
        *,
        max_cached_devices: int = 200_000,
        max_cached_results: int = 2_000_000,
        max_cached_activations: int = MAX_CACHED_ACTIVATIONS,
        backend: Backend = "compiled",
    ) -> None:
        if backend not in ("compiled", "interpreted"):
            raise ValueError(f"unknown CEL backend {backend!r}")
        self._backend: Backend = backend
        self._max_devices = max(1, max_cached_devices)
        self._max_results = max(1, max_cached_results)
        self._max_acts = max(1, max_cached_activations)
        self._lock = threading.Lock()
        self._programs: OrderedDict[str, CompiledSelector | CelCompileError] = OrderedDict()
        self._devices: OrderedDict[Hashable, _DeviceEntry] = OrderedDict()  # least recently used first
        self._acts: OrderedDict[Hashable, None] = OrderedDict()  # device versions holding an activation, the same order
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
            out["cached_activations"] = len(self._acts)
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
                tree = parse(expression)
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
                    return CompiledSelector(expression, "compiled", transpile(tree))
                except Exception:
                    logging.getLogger(__name__).debug("CEL expression %r falls back to the interpreter", expression, exc_info=True)
            return CompiledSelector(expression, "interpreted", interpreter(tree))
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
            cached = self._run(selector, entry, self._activation(entry, device, cel_key))
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
        entry = _DeviceEntry(*_build(device))
        with self._lock:
            existing = self._devices.get(cel_key)
            if existing is not None:  # another thread was first
                return existing
            self._devices[cel_key] = entry
            if entry.act is not None:
                self._acts[cel_key] = None
            self._trim()
        return entry

    def _activation(self, entry: _DeviceEntry, device: SelectorDevice, cel_key: Hashable) -> Act | None:
        """The entry's activation (None: the device cannot be evaluated, `entry.error` says why), rebuilt if it was evicted."""
        with self._lock:
            act = entry.act
            if act is not None or entry.error is not None:
                if act is not None and cel_key in self._acts:
                    self._acts.move_to_end(cel_key)
                return act
        act, error = _build(device)
        with self._lock:
            if entry.act is None and entry.error is None:
                entry.act, entry.error = act, error
                if act is not None and self._devices.get(cel_key) is entry:
                    self._acts[cel_key] = None
                    self._trim()
        return act

    def _trim(self) -> None:
        """Evict least recently used device versions (activation and results) over either bound, then activations over theirs."""
        devices = self._devices
        while len(devices) > self._max_devices or (self._n_results > self._max_results and len(devices) > 1):
            key, old = devices.popitem(last=False)
            self._acts.pop(key, None)
            self._n_results -= len(old.results)
        if self._n_results > self._max_results and devices:  # one device holds more than the bound
            results = next(reversed(devices.values())).results
            while self._n_results > self._max_results and results:
                del results[next(iter(results))]
                self._n_results -= 1
        acts = self._acts
        while len(acts) > self._max_acts:
            key, _ = acts.popitem(last=False)
            held = devices.get(key)
            if held is not None:  # its results stay; an evaluation holding the activation finishes with it
                held.act = held.interp = None

    @staticmethod
    def _run(selector: CompiledSelector, entry: _DeviceEntry, act: Act | None) -> bool | CelRuntimeError:
        if act is None:
            return CelRuntimeError(selector.expression, entry.error or "device cannot be evaluated")
        try:
            lib.reset_budget(1 if selector.backend == "compiled" else lib.INTERPRETED_BUDGET_DIVISOR)
            if selector.backend == "compiled":
                value = selector.run(act)
            else:
                interp = entry.interp
                if interp is None:
                    interp = entry.interp = Activation(functions=INTERP_FUNCTIONS, vars={"device": act.device})
                value = selector.run(interp)
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
                self._acts.pop(cel_key, None)
                if entry is not None:
                    self._n_results -= len(entry.results)
        except TypeError:  # an unhashable key was never cached
            return
