"""RFC 3339 read as the API server reads metav1.Time and MicroTime: one parser for taints, Leases, alerts and claims."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from allocator import rfc3339 as allocator_rfc3339
from allocator.api_limits import is_rfc3339
from tracker import timestamps
from tracker.timestamps import parse_rfc3339, rfc3339

T = datetime(2026, 1, 1, tzinfo=UTC)

# name, text, the time it is (None: not an RFC 3339 date-time)
CASES: list[tuple[str, object, datetime | None]] = [
    ("seconds, Z", "2026-01-01T00:00:00Z", T),
    ("microseconds, Z (MicroTime)", "2026-01-01T00:00:00.250000Z", T.replace(microsecond=250000)),
    ("one fraction digit", "2026-01-01T00:00:00.5Z", T.replace(microsecond=500000)),
    ("nanoseconds are cut to microseconds", "2026-01-01T00:00:00.123456789Z", T.replace(microsecond=123456)),
    ("an offset", "2026-01-01T02:00:00+02:00", T),
    ("a negative offset", "2025-12-31T19:30:00-04:30", T),
    ("a fraction and an offset", "2026-01-01T01:00:00.000001+01:00", T.replace(microsecond=1)),
    ("lower-case t and z (RFC 3339 allows them)", "2026-01-01t00:00:00z", T),
    ("no zone", "2026-01-01T00:00:00", None),
    ("a date alone", "2026-01-01", None),
    ("a space for T", "2026-01-01 00:00:00Z", None),
    ("ISO 8601 week date", "2026-W01-4", None),
    ("ISO 8601 basic format", "20260101T000000Z", None),
    ("an offset without a colon", "2026-01-01T00:00:00+0000", None),
    ("no such day", "2026-02-30T00:00:00Z", None),
    ("a leap second", "2026-12-31T23:59:60Z", None),
    ("an offset of a day", "2026-01-01T00:00:00+24:00", None),
    ("empty", "", None),
    ("words", "yesterday", None),
    ("not a string", 1767225600, None),
    ("null", None, None),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse(text: object, want: datetime | None) -> None:
    got = parse_rfc3339(text)
    assert got == want
    if got is not None:
        assert got.tzinfo is not None and got.utcoffset() == UTC.utcoffset(None)
    if isinstance(text, str):
        assert is_rfc3339(text) is (want is not None)  # what the CRD validation lets in is what every reader reads


def test_one_parser() -> None:
    assert timestamps.parse_rfc3339 is allocator_rfc3339.parse_rfc3339


def test_what_is_written_reads_back() -> None:
    assert parse_rfc3339(rfc3339(T)) == T
    assert parse_rfc3339(rfc3339(T.replace(microsecond=42), micro=True)) == T.replace(microsecond=42)
