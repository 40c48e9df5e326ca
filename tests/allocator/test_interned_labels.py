"""Labels of objects decoded apart share one string per distinct key and short value (allocator/parse/reader.py)."""

from __future__ import annotations

import orjson
import pytest

from allocator.parse.nodes import parse_node
from allocator.parse.pods import parse_pod
from allocator.parse.reader import INTERN_MAX

LONG = "x" * (INTERN_MAX + 1)


def _node(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _pod(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": {"containers": []}}


ROWS = [
    pytest.param(
        _node, {"kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "z-1"}, True, id="node: keys and short values shared"
    ),
    pytest.param(_pod, {"app": "perf", "pod-template-hash": "5d8f7"}, True, id="pod: the same"),
    pytest.param(_node, {"note": LONG}, False, id="a value over INTERN_MAX stays the object's own"),
]


@pytest.mark.parametrize(("make", "labels", "shared"), ROWS)
def test_labels_share_strings_across_objects(make, labels: dict[str, str], shared: bool) -> None:
    parse = parse_node if make is _node else parse_pod
    # Two objects decoded from separate bytes, as two list pages or watch events are: equal strings, distinct objects.
    a, b = (parse(orjson.loads(orjson.dumps(make(name, labels)))) for name in ("a", "b"))
    la, lb = (x.labels if make is _node else x.meta.labels for x in (a, b))
    assert la == lb == labels
    for (ka, va), (kb, vb) in zip(la.items(), lb.items(), strict=True):
        assert ka is kb
        assert (va is vb) is shared
