"""core/v1 NodeSelector matching (upstream `nodeaffinity.NodeSelector.Match`).

Used for ResourceSlice / device node reach and for an allocated claim's
`status.allocation.nodeSelector`.
"""

from __future__ import annotations

from allocator.types import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm


def _requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    # An empty term matches no node (upstream: "nil or empty term matches no objects").
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not _requirement_matches(req, node.labels.get(req.key)):
            return False
    for req in term.match_fields:
        # metadata.name is the only supported field.
        if req.key != "metadata.name":
            return False
        if req.operator not in ("In", "NotIn"):
            return False
        if not _requirement_matches(req, node.name):
            return False
    return True


def node_selector_matches(selector: NodeSelector, node: Node) -> bool:
    return any(_term_matches(term, node) for term in selector.terms)


def reaches(node: Node, node_name: str | None, all_nodes: bool, node_selector: NodeSelector | None, *, otherwise: bool = False) -> bool:
    """Whether a slice's or device's node fields (nodeName, allNodes, nodeSelector: one is set) take in `node`;
    `otherwise` when none is set."""
    if node_name is not None:
        return node_name == node.name
    if all_nodes:
        return True
    if node_selector is not None:
        return node_selector_matches(node_selector, node)
    return otherwise


def node_name_selector(node_name: str) -> NodeSelector:
    """The selector upstream writes for an allocation that uses a node-local device."""
    return NodeSelector((NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", (node_name,)),)),))
