"""Readiness of binding conditions (upstream isClaimReadyForBinding / isClaimTimeout), as named rows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from allocator.parse import parse_resource_claim
from extender.bind.conditions import FAILED, PENDING, READY, TIMED_OUT, readiness, worst
from tracker.claim_status import parse_claim_status

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def raw_claim(name: str, results: list[dict[str, Any]], devices: list[dict[str, Any]] | None, stamp: str = "2026-01-01T00:09:00Z") -> dict:
    status: dict[str, Any] = {
        "allocation": {"devices": {"results": results}, "allocationTimestamp": stamp},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
    }
    if devices is not None:
        status["devices"] = devices
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": []}}, "status": status}


def result(device: str, conditions: list[str], failures: list[str] = ()) -> dict:
    r: dict[str, Any] = {"request": "r", "driver": "d", "pool": "p", "device": device, "bindingConditions": conditions}
    if failures:
        r["bindingFailureConditions"] = list(failures)
    return r


def dev_status(device: str, **conds: str) -> dict:
    return {
        "driver": "d",
        "pool": "p",
        "device": device,
        "conditions": [
            {"type": t, "status": s, "reason": "R", "message": "M", "lastTransitionTime": "2026-01-01T00:09:30Z"} for t, s in conds.items()
        ],
    }


ROWS = [
    ("no-device-status-is-pending", [result("a", ["ready"])], None, PENDING, ""),
    ("all-conditions-true-is-ready", [result("a", ["ready", "attached"])], [dev_status("a", ready="True", attached="True")], READY, ""),
    (
        "one-condition-false-is-pending",
        [result("a", ["ready", "attached"])],
        [dev_status("a", ready="True", attached="False")],
        PENDING,
        "",
    ),
    (
        "bound-claim-with-failed-binding",
        [result("a", ["ready"], ["failed"])],
        [dev_status("a", ready="False", failed="True")],
        FAILED,
        "device binding failed: claim=c, reason=R, message=M",
    ),
    ("status-of-another-device-does-not-count", [result("a", ["ready"])], [dev_status("b", ready="True")], PENDING, ""),
    ("device-without-conditions-is-ready", [{"request": "r", "driver": "d", "pool": "p", "device": "a"}], None, READY, ""),
]


@pytest.mark.parametrize(("name", "results", "devices", "state", "message"), ROWS, ids=[r[0] for r in ROWS])
def test_readiness(name: str, results: list[dict], devices: list[dict] | None, state: str, message: str) -> None:
    raw = raw_claim("c", results, devices)
    got = readiness(parse_resource_claim(raw), parse_claim_status(raw), timeout=600, now=NOW)
    assert (got.state, got.message) == (state, message)


def test_bound_claim_with_timed_out_binding() -> None:
    """Upstream `bound-claim-with-timed-out-binding`: allocationTimestamp + timeout in the past."""
    raw = raw_claim("c", [result("a", ["ready"])], None, stamp="2026-01-01T00:00:00Z")
    got = readiness(parse_resource_claim(raw), parse_claim_status(raw), timeout=60, now=NOW)
    assert (got.state, got.message) == (TIMED_OUT, "device binding timeout")
    assert readiness(parse_resource_claim(raw), parse_claim_status(raw), timeout=3600, now=NOW).state == PENDING


def test_multi_claims_binding_conditions_one_fail() -> None:
    """Upstream `multi-claims-binding-conditions-one-fail`: one failed claim fails the pod, whatever the others say."""
    ok = raw_claim("ok", [result("a", ["ready"])], [dev_status("a", ready="True")])
    bad = raw_claim("bad", [result("b", ["ready"], ["failed"])], [dev_status("b", failed="True")])
    waiting = raw_claim("wait", [result("c", ["ready"])], None)
    states = [readiness(parse_resource_claim(r), parse_claim_status(r), timeout=600, now=NOW) for r in (ok, waiting, bad)]
    bad_state = worst(states)
    assert bad_state is not None and bad_state.state == FAILED and bad_state.claim == "default/bad"
    assert worst(states[:1]) is None
