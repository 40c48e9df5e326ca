"""A reader's place in the tracker's change log: which nodes changed since it last looked.

Per-node caches on the verbs' side (node shapes, packing units) drop what
they keep of a node once the log names it, and everything when a change
concerns every node (or the log no longer reaches back that far).
"""

from __future__ import annotations

from tracker.state import ClusterState

NOTHING: tuple[str, ...] = ()


class NodeChangesCursor:
    __slots__ = ("_seq", "_state")

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._seq = state.change_seq

    def advance(self) -> tuple[str, ...] | None:
        """The nodes changed since the last call (none: empty), or None when every node may have."""
        state = self._state
        if self._seq == state.change_seq:
            return NOTHING
        changed = state.changed_nodes_since(self._seq)
        self._seq = state.change_seq
        if changed is None:
            return None
        return tuple(name for name in changed if name is not None)
