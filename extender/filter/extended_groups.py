"""Extended resources DRA serves (allocator.extended_resources): which claims a pod needs on which nodes."""

from __future__ import annotations

from collections.abc import Mapping

from allocator.extended_resources import claims_per_node
from allocator.features import Features
from allocator.types import Pod, ResourceClaim
from extender.filter.request_nodes import RequestNodes
from tracker.state import ClusterState

MAX_MEMORY_CLAIMS = 1024  # in-memory claims kept for placed pods (as many as the scores kept for /prioritize)


class ExtendedGroups:
    def __init__(self, state: ClusterState, features: Features) -> None:
        self.state = state
        self.features = features
        # Claims for extended resources not created yet, by key, for pods placed but not bound:
        # /filter judges a later pod jointly with them as with any placed pod's claims.
        self._memory_claims: dict[str, ResourceClaim] = {}

    @property
    def memory_claims(self) -> Mapping[str, ResourceClaim]:
        return self._memory_claims

    def groups(
        self, pod: Pod, claims: list[ResourceClaim], names: list[str], nodes: RequestNodes
    ) -> list[tuple[list[ResourceClaim], list[str]]]:
        """(claims, nodes) per group of nodes on which DRA serves the same extended resources."""
        if not self.features.extended_resources or not pod.containers_if_extended:
            return [(claims, list(names))]
        groups = claims_per_node(pod, claims, self.state.classes, [node for node, _token in nodes.resolve(names)])
        for group_claims, _names in groups:
            for claim in group_claims:
                if claim.key not in self.state.claims:  # in memory: judged jointly while its pod is being bound
                    if len(self._memory_claims) >= MAX_MEMORY_CLAIMS:
                        del self._memory_claims[next(iter(self._memory_claims))]
                    self._memory_claims[claim.key] = claim
        return groups
