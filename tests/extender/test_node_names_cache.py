"""A NodeNames array seen before is not parsed again (extender/wire.py NodeNamesCache), and nothing else changes.

The cache is warmed with two bodies in a row ending with the same array, as
kube-scheduler sends them; then every row is parsed with it and without it:
the same ExtenderArgs, or the same 400, either way. `cached` says whether the
row must have taken the cached names (its head parsed alone).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from extender import wire

NAMES = [f"node-{i}" for i in range(50)]
POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}}
ARRAY = orjson.dumps(NAMES)


def go_body(pod: Any = POD, names: bytes = ARRAY, tail: bytes = b"") -> bytes:
    """ExtenderArgs as kube-scheduler's encoding/json writes it: Pod, Nodes, NodeNames, in that order."""
    return b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + names + b"}" + tail


# name, body, whether the cached names must be used
ROWS: list[tuple[str, bytes, bool]] = [
    ("the same names again", go_body(), True),
    ("another pod, the same names", go_body({"metadata": {"name": "q"}, "spec": {}}), True),
    ("other names", go_body(names=orjson.dumps(NAMES[:-1])), False),
    ("the same names, a trailing newline", go_body(tail=b"\n"), False),
    ("nothing before the names: not JSON", b'{,"NodeNames":' + ARRAY + b"}", False),
    ("only a comma before the names: not JSON", b'{"Pod":{},' + b',"Nodes":null,"NodeNames":' + ARRAY + b"}", False),
    ("a head that is not an object", b'["Pod",1,"Nodes":null,"NodeNames":' + ARRAY + b"}", False),
    (
        "a second key nodeNames in the head",
        b'{"nodeNames":["x"],"Pod":' + orjson.dumps(POD) + b',"Nodes":null,"NodeNames":' + ARRAY + b"}",
        False,
    ),
    ("no pod", b'{"Nodes":null,"NodeNames":' + ARRAY + b"}", True),
    ("a pod without a name", go_body({"metadata": {}}), True),
    ("a pod whose spec is not an object", go_body({"metadata": {"name": "p"}, "spec": 3}), True),
    (
        "the names nested inside the pod, not at the top",
        b'{"Pod":{"metadata":{"name":"p"},"x":{"Nodes":null,"NodeNames":' + ARRAY + b"}}}",
        False,
    ),
    (
        "the names closing a nested object: not JSON",
        b'{"Pod":{"metadata":{"name":"p"},"x":{"a":1,"Nodes":null,"NodeNames":' + ARRAY + b"}",
        False,
    ),
    ("Nodes given too", go_body(tail=b"")[:-1].replace(b'"Nodes":null', b'"Nodes":{"items":[]}') + b"}", True),
]


def parsed(raw: bytes, cache: wire.NodeNamesCache | None) -> Any:
    try:
        return wire.parse_extender_args(raw, cache)
    except wire.BadRequest as e:
        return ("400", e.field, str(e))


def warm() -> wire.NodeNamesCache:
    cache = wire.NodeNamesCache()
    for _ in range(2):
        wire.parse_extender_args(go_body(), cache)
    return cache


@pytest.mark.parametrize(("name", "raw", "cached"), ROWS, ids=[r[0] for r in ROWS])
def test_cached_names_parse_as_the_whole_body_does(name: str, raw: bytes, cached: bool) -> None:
    cache = warm()
    assert (cache.body(raw, "ExtenderArgs") is not None) == cached, name
    assert parsed(raw, cache) == parsed(raw, None), name


def test_the_names_become_cached_only_when_two_bodies_in_a_row_end_with_them() -> None:
    cache = wire.NodeNamesCache()
    wire.parse_extender_args(go_body(), cache)
    assert cache.body(go_body(), "ExtenderArgs") is None  # seen once: a candidate only
    wire.parse_extender_args(go_body(names=orjson.dumps(NAMES[:3])), cache)
    wire.parse_extender_args(go_body(), cache)
    assert cache.body(go_body(), "ExtenderArgs") is None  # not twice in a row
    wire.parse_extender_args(go_body(), cache)
    assert cache.body(go_body(), "ExtenderArgs") is not None


def test_each_answer_gets_its_own_list() -> None:
    cache = warm()
    first = wire.parse_extender_args(go_body(), cache)
    assert first.node_names is not None
    first.node_names.append("changed by a reader")
    assert wire.parse_extender_args(go_body(), cache).node_names == NAMES
