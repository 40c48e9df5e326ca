"""The nodes a /filter or /prioritize names, as Node values with a version token for the verdict cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from allocator.parse import ValidationError, parse_node
from allocator.types import Node
from tracker.state import ClusterState


class RequestNodes:
    """The scheduler's copies of the nodes when it sent them (the NodeList form), else the state's.

    The request's node JSON is indexed once here, at the edge; readers get
    (Node, token) pairs: the token is the sent node's resourceVersion (or its
    metadata), None for a node taken from the state.
    """

    __slots__ = ("_sent", "_state")

    def __init__(self, state: ClusterState, sent: Sequence[dict[str, Any]] | None) -> None:
        self._state = state
        self._sent: dict[Any, dict[str, Any]] = {((n.get("metadata") or {}).get("name")): n for n in sent or []}

    def resolve(self, names: list[str]) -> list[tuple[Node, Any]]:
        """(node, token) per name: the cached Node, or the one the scheduler sent (its version as token)."""
        known = self._state.nodes
        if not self._sent:  # nodeCacheCapable: names only
            get = known.get
            return [(get(name) or Node(name), None) for name in names]
        nodes: list[tuple[Node, Any]] = []
        for name in names:
            raw = self._sent.get(name)
            if raw is None:
                nodes.append((known.get(name) or Node(name), None))
            else:
                token = (raw.get("metadata") or {}).get("resourceVersion") or orjson.dumps(raw.get("metadata"))
                nodes.append((self._parse(name, raw), token))
        return nodes

    def _parse(self, name: str, raw: dict[str, Any]) -> Node:
        try:
            return parse_node(raw)
        except ValidationError:
            pass
        node = self._state.node(name)
        return node if node is not None else Node(name)
