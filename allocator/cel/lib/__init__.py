"""CEL runtime semantics for DRA selectors, on top of cel-python's value types.

cel-python predates parts of the CEL spec that Kubernetes (cel-go) follows and
ships none of Kubernetes' libraries, so everything a selector can call lives
here, written against cel-go's behaviour, one module per library as upstream's
`k8s.io/apiserver/pkg/cel/library/`:

- `values`: value constructors, the quantity/semver/type values, kinds, errors;
- `budget`: the runtime cost budget and the caller's deadline;
- `operators`: heterogeneous equality (`1 == "a"` is false, not an error),
  cross-type numeric ordering, commutative `&&`/`||` that absorb errors, map
  lookups that fail with "no such key", arithmetic;
- `conversions`: the standard type conversions;
- Kubernetes libraries: `quantity`, `semver` (with `compare`, the
  `compareTo` family both share), `lists`, `regex` (`find`), and cel-go's
  strings extension, version 2 (`strings`);
- `macros`: the comprehensions, shared by both runners.

Every function *raises* on failure (ValueError for a CEL error, TypeError for
a missing overload, KeyError for a missing key) with a message meant for
users; the engine (allocator.cel.engine) turns that into a CEL error value.
cel-python dispatches `x.f(y)` as `f(x, y)`, so a method shared by several
receiver types (`compareTo`, `indexOf`) dispatches on its first argument.

`FUNCTIONS` below is the one table both runners call through: the compiled
runner binds each entry into every program's globals, the interpreter wraps
each entry for celpy's `Activation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from allocator.cel.lib import compare, conversions, lists, operators, quantity, regex, semver, strings
from allocator.cel.lib.budget import (
    COST_LIMIT,
    INTERPRETED_BUDGET_DIVISOR,
    CostLimitExceeded,
    DeadlineExceeded,
    charge,
    reset_budget,
    set_deadline,
)
from allocator.cel.lib.macros import MACROS
from allocator.cel.lib.operators import has_field, op_and, op_or, select
from allocator.cel.lib.regex import compile_regex
from allocator.cel.lib.values import (
    FALSE,
    INT64_MAX,
    INT64_MIN,
    TRUE,
    TYPE_NAMES,
    TYPE_VALUES,
    UINT64_MAX,
    CelQuantity,
    CelSemver,
    CelTypeValue,
    DomainMap,
    error_value,
    kind,
    mk_double,
    mk_int,
    mk_uint,
    reason,
)

__all__ = [
    "COST_LIMIT",
    "ERROR_AWARE",
    "FALSE",
    "FUNCTIONS",
    "INT64_MAX",
    "INT64_MIN",
    "INTERPRETED_BUDGET_DIVISOR",
    "MACROS",
    "TRUE",
    "TYPE_NAMES",
    "TYPE_VALUES",
    "UINT64_MAX",
    "CelQuantity",
    "CelSemver",
    "CelTypeValue",
    "CostLimitExceeded",
    "DeadlineExceeded",
    "DomainMap",
    "charge",
    "compile_regex",
    "error_value",
    "has_field",
    "kind",
    "mk_double",
    "mk_int",
    "mk_uint",
    "op_and",
    "op_or",
    "reason",
    "reset_budget",
    "select",
    "set_deadline",
]

# Functions whose arguments may be CEL error values (they decide what an error means).
ERROR_AWARE = frozenset(("_&&_", "_||_", "_?_:_", "!_"))

FUNCTIONS: dict[str, Callable[..., Any]] = {
    # operators
    "_==_": operators.op_eq,
    "_!=_": operators.op_ne,
    "_<_": operators.op_lt,
    "_<=_": operators.op_le,
    "_>_": operators.op_gt,
    "_>=_": operators.op_ge,
    "_in_": operators.op_in,
    "_&&_": operators.op_and,
    "_||_": operators.op_or,
    "!_": operators.op_not,
    "_?_:_": operators.op_cond,
    "_[_]": operators.index,
    "_+_": operators.op_add,
    "_-_": operators.op_sub,
    "_*_": operators.op_mul,
    "_/_": operators.op_div,
    "_%_": operators.op_mod,
    "-_": operators.op_neg,
    # standard functions
    "size": operators.size,
    "contains": strings.s_contains,
    "startsWith": strings.s_starts_with,
    "endsWith": strings.s_ends_with,
    "matches": regex.s_matches,
    "int": conversions.to_int,
    "uint": conversions.to_uint,
    "double": conversions.to_double,
    "string": conversions.to_string,
    "bool": conversions.to_bool,
    "bytes": conversions.to_bytes,
    "dyn": conversions.to_dyn,
    "type": conversions.type_of,
    # Kubernetes quantity
    "quantity": quantity.quantity,
    "isQuantity": quantity.is_quantity,
    "add": quantity.q_add,
    "sub": quantity.q_sub,
    "asInteger": quantity.q_as_integer,
    "isInteger": quantity.q_is_integer,
    "asApproximateFloat": quantity.q_as_approximate_float,
    "sign": quantity.q_sign,
    # Kubernetes semver
    "semver": semver.semver,
    "isSemver": semver.is_semver,
    "major": semver.semver_major,
    "minor": semver.semver_minor,
    "patch": semver.semver_patch,
    # quantity and semver
    "compareTo": compare.compare_to,
    "isGreaterThan": compare.is_greater_than,
    "isLessThan": compare.is_less_than,
    # cel-go strings extension
    "lowerAscii": strings.s_lower_ascii,
    "upperAscii": strings.s_upper_ascii,
    "trim": strings.s_trim,
    "split": strings.s_split,
    "join": strings.l_join,
    "replace": strings.s_replace,
    "substring": strings.s_substring,
    "charAt": strings.s_char_at,
    "indexOf": lists.index_of,
    "lastIndexOf": lists.last_index_of,
    # Kubernetes regex
    "find": regex.s_find,
    "findAll": regex.s_find_all,
    # Kubernetes lists
    "isSorted": lists.l_is_sorted,
    "sum": lists.l_sum,
    "min": lists.l_min,
    "max": lists.l_max,
    "includes": lists.l_includes,
}
