"""How much a property test draws in each tier.

`make test-fast` sets DRA_TEST_TIER=fast: property tests draw an eighth of
their examples there (at least 25), which with two workers and the `slow` tests left out keeps the
fast tier under a minute on 2 idle cores; `make test` (and CI) draw them all.
"""

from __future__ import annotations

import os


def examples(full: int) -> int:
    """`full` in the whole suite; an eighth of it (at least 25) in the fast tier."""
    return max(25, full // 8) if os.environ.get("DRA_TEST_TIER") == "fast" else full
