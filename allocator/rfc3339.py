"""RFC 3339 date-times read as the API server reads them: the one parser of the project.

`metav1.Time` and `metav1.MicroTime` accept `YYYY-MM-DDTHH:MM:SS`, an
optional fraction of any length, and a zone (`Z` or `±HH:MM`); the CRD
`date-time` format also takes a lower-case `t` and `z`, as RFC 3339 allows.
A text without a zone, a date alone or any other ISO 8601 shape is no
time at all (Python's `fromisoformat` would take them, a zone-less one as
local time), so whatever reads a taint's `timeAdded`, a Lease's
`renewTime` or an alert's `startsAt` gets the same answer. The formatter
is `tracker/timestamps.py` (the allocator never asks for the time).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

RFC3339: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$")


def parse_rfc3339(text: object) -> datetime | None:
    """An aware datetime in UTC; None for anything else (empty, not a string, no zone, out of range)."""
    if not isinstance(text, str) or not RFC3339.fullmatch(text):
        return None
    try:
        parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:  # 2026-02-30, 24:00, 23:59:60, an offset of ±24:00 or more
        return None
    return parsed.astimezone(UTC)
