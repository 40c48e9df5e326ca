"""RFC 3339 timestamps in UTC, as the API server writes them: metav1.Time and metav1.MicroTime.

The one formatter of the project, with the one parser (`allocator/rfc3339.py`,
strict as the API server) beside it; the layers above import both from here
(allocator/ never formats a time).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from allocator.rfc3339 import parse_rfc3339

__all__ = ["parse_rfc3339", "rfc3339"]

_TIME = "%Y-%m-%dT%H:%M:%SZ"  # metav1.Time: second resolution
_MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime (Lease renewTime, events.k8s.io)


def rfc3339(t: datetime | float | None = None, *, micro: bool = False) -> str:
    """`t` (a datetime, epoch seconds, or now when None) in UTC; seconds, or microseconds with `micro`.

    Epoch seconds are truncated to the second (as `time.gmtime` does); an aware
    datetime is converted to UTC, a naive one is taken as UTC.
    """
    if t is None:
        t = datetime.now(UTC)
    elif not isinstance(t, datetime):
        t = datetime.fromtimestamp(t if micro else math.floor(t), UTC)
    elif t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime(_MICRO_TIME if micro else _TIME)
