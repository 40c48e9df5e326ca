"""CEL device selectors (cel-python underneath, Kubernetes semantics on top).

- `engine`: the environment that compiles selectors and evaluates them per
  device, with its caches (the public interface, re-exported here);
- `check`: compile-time checks and annotations of a parsed selector;
- `transpile`, `interpret`: the compiled and the interpreted runner;
- `cost`: the API server's estimated cost of a CRD validation rule;
- `lib`: the runtime semantics, one module per CEL library.
"""

from allocator.cel.engine import CelCompileError, CelEnvironment, CelRuntimeError, CompiledSelector, SelectorDevice

__all__ = [
    "CelCompileError",
    "CelEnvironment",
    "CelRuntimeError",
    "CompiledSelector",
    "SelectorDevice",
]
