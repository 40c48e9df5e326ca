"""The webhook body is decoded an alert at a time: the same answers as one strict decode, for good and bad bodies."""

from __future__ import annotations

import json

import pytest

from controllers.health.alerts import BadPayload, parse_delivery

ALERT = {"status": "firing", "labels": {"alertname": "GpuXid"}, "startsAt": "2026-12-01T00:00:00Z", "fingerprint": "abc"}


@pytest.mark.parametrize(
    ("body", "alerts"),
    [
        pytest.param(json.dumps({"version": "4", "alerts": [ALERT, ALERT]}), 2, id="compact"),
        pytest.param(json.dumps({"alerts": [ALERT], "version": "4", "receiver": "dra"}, indent=2), 1, id="indented, alerts first"),
        pytest.param(' {"version" : "4" ,\n "alerts" : [ ] } \n', 0, id="spaces everywhere"),
        pytest.param(json.dumps({"version": "4", "alerts": [], "groupLabels": {"a": [1, {"b": None}]}}), 0, id="nested members"),
    ],
)
def test_good_bodies_decode_as_one_decode_would(body: str, alerts: int) -> None:
    assert len(parse_delivery(body.encode()).alerts) == alerts


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{", id="unterminated object"),
        pytest.param(b'{"version":"4","alerts":[', id="unterminated alerts"),
        pytest.param(b'{"version":"4","alerts":[]', id="alerts without the closing brace"),
        pytest.param(b'{"version":"4","alerts":[],}', id="trailing comma in the object"),
        pytest.param(b'{"version":"4","alerts":[{},]}', id="trailing comma in the alerts"),
        pytest.param(b'{"version":"4" "alerts":[]}', id="missing comma"),
        pytest.param(b'{"version":"4","alerts":[]} x', id="trailing data"),
        pytest.param(b'{"version":"4","alerts":[NaN]}', id="NaN"),
        pytest.param(b'{1:"4"}', id="a member name that is not a string"),
        pytest.param(b"\xff", id="not UTF-8"),
    ],
)
def test_bad_bodies_are_not_json(body: bytes) -> None:
    with pytest.raises(BadPayload, match="is not JSON"):
        parse_delivery(body)
