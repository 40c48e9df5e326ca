"""Malformed and random bodies at the three verbs: never a 500, never a crash."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.harness import DEMO, Extender, demo_pod_args

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=25,
)
KEYS = ["Pod", "pod", "Nodes", "NodeNames", "nodenames", "PodName", "PodNamespace", "PodUID", "Node"]
top_level = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5)

# Paths inside a valid pod whose values the fuzzer replaces.
POD_PATHS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("spec",),
    ("spec", "resourceClaims"),
    ("spec", "resourceClaims", 0),
    ("spec", "resourceClaims", 0, "name"),
    ("spec", "resourceClaims", 0, "resourceClaimName"),
    ("status",),
    ("status", "resourceClaimStatuses"),
]


@pytest.fixture
def ext() -> Extender:
    """A fresh extender per test (shared by that test's examples): no test depends on another's order or bodies."""
    e = Extender("--source", str(DEMO))
    e.wait_ready()
    try:
        yield e
        assert e.proc.poll() is None, "the extender died during fuzzing"
        still_serving(e)
    finally:
        e.stop()


def still_serving(e: Extender) -> None:
    assert e.http.get("/livez").status_code == 200
    assert "internal error" not in e.logs(), "an exception was turned into an answer during fuzzing"
    result = e.post("filter", demo_pod_args("trainer", ["node-a", "node-c"])).json()
    assert result["NodeNames"] == ["node-a"]


def check(resp) -> None:
    assert resp.status_code in (200, 400), (resp.status_code, resp.text)
    json.loads(resp.content)
    # The edge turns an exception into a 200 answer with an Error: that must never happen.
    assert "internal error" not in resp.text, resp.text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(verb=st.sampled_from(["filter", "prioritize", "bind"]), body=st.one_of(json_values, top_level))
def test_random_bodies(ext: Extender, verb: str, body) -> None:
    check(ext.post(verb, json.dumps(body).encode()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(verb=st.sampled_from(["filter", "prioritize"]), path=st.sampled_from(POD_PATHS), value=json_values)
def test_mutated_valid_bodies(ext: Extender, verb: str, path, value) -> None:
    body = copy.deepcopy(demo_pod_args("trainer", ["node-a", "node-b", "node-c"]))
    target = body["Pod"]
    try:
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass
    check(ext.post(verb, json.dumps(body).encode()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_random_bytes(ext: Extender, raw: bytes) -> None:
    check(ext.post("filter", raw))


def test_serving_before_fuzzing(ext: Extender) -> None:
    still_serving(ext)  # the check each fuzzing test's extender passes afterwards (the fixture), on a fresh one
