"""Suite-wide settings.

In CI (the `CI` environment variable set, as `.ci/run` runs) Hypothesis draws
the same examples on every run: a property failure there is then reproducible
from the commit alone, and a submission does not fail on an example no earlier
run drew. Locally examples stay random, so the search keeps widening.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
