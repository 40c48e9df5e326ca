"""NodeNames is checked item by item in C (extender/wire.py `_all_strings`): the same answers as a per-item type check."""

from __future__ import annotations

import orjson
import pytest

from extender import wire

POD = {"metadata": {"name": "p", "namespace": "default"}}

# (name, NodeNames as sent, error expected)
ROWS = [
    ("strings", ["node-a", "node-b"], False),
    ("empty list", [], False),
    ("empty string among names", ["node-a", ""], False),
    ("non-ASCII names", ["nöde-a", "节点"], False),
    ("a number among strings", ["node-a", 1], True),
    ("a null among strings", ["node-a", None], True),
    ("a nested list", [["node-a"]], True),
    ("an object", [{"name": "node-a"}], True),
    ("only a boolean", [True], True),
    ("not a list", "node-a", True),
]


@pytest.mark.parametrize(("names", "bad"), [pytest.param(n, b, id=i) for i, n, b in ROWS])
def test_node_names_are_strings(names: object, bad: bool) -> None:
    raw = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": names})
    if bad:
        with pytest.raises(wire.BadRequest) as e:
            wire.parse_extender_args(raw)
        assert e.value.field == "NodeNames"
        assert str(e.value) == "NodeNames: must be a list of strings"
    else:
        assert wire.parse_extender_args(raw).names == names
