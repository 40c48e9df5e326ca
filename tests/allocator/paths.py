"""The allocator's three paths, run against one table as upstream runs its allocator table
against its stable, incubating and experimental allocators.

- `first-fit`, the default: a pod's lone request is answered by the fast path
  (upstream's allocateOne), anything else by the full search;
- `full-search`: every pod through the depth-first search (`first_fit=False`);
- `spread`: `--device-placement spread`, the full search over reordered candidates.

Which pods fit, and why not, is the same on every path. Which devices a claim
gets is the same on the first two; under spread it differs only where counters
or shares reorder the candidates (allocator/device_order.py), so a row names
its spread picks there.
"""

from __future__ import annotations

from allocator.allocation import DEFAULT_SEARCH_BUDGET, Allocator
from allocator.cel import CelEnvironment
from allocator.device_order import BINPACK, SPREAD
from allocator.features import DEFAULT_FEATURES, Features

FIRST_FIT, FULL_SEARCH, SPREAD_ORDER = "first-fit", "full-search", "spread"
PATHS = (FIRST_FIT, FULL_SEARCH, SPREAD_ORDER)


def allocator_for(
    path: str, cel: CelEnvironment, features: Features = DEFAULT_FEATURES, search_budget: int = DEFAULT_SEARCH_BUDGET
) -> Allocator:
    """The allocator that takes `path`."""
    if path not in PATHS:
        raise ValueError(f"allocator path {path!r}: must be one of {', '.join(PATHS)}")
    return Allocator(
        cel,
        features=features,
        device_placement=SPREAD if path == SPREAD_ORDER else BINPACK,
        first_fit=path == FIRST_FIT,
        search_budget=search_budget,
    )
