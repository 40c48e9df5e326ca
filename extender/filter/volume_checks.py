"""/filter's volume taint check (tracker/volumes.py) and /debug/volumes."""

from __future__ import annotations

from typing import Any

from allocator.failures import REASON_VOLUME_TAINTED, Failure, plain
from allocator.types import Pod
from serving.metrics import Metrics
from tracker import events as ev
from tracker.state import ClusterState, Problem
from tracker.volumes import debug_volumes, pod_volume_verdict


class VolumeChecks:
    def __init__(self, state: ClusterState, metrics: Metrics) -> None:
        self.state = state
        self.metrics = metrics

    def any_tainted(self) -> bool:
        """Whether some PVC or PV is tainted: until one is, no pod needs parsing for its volumes."""
        return self.state.volumes.has_taints()

    def problem(self, pod: Pod) -> Failure | None:
        """Why the pod the scheduler sent may start on no node because of a volume taint, or None.

        A malformed tolerations annotation counts as none (parse_pod read it once) and is reported on the pod.
        """
        volumes = self.state.volumes
        if not volumes.has_taints():
            return None
        malformed = pod.volume_tolerations_problem
        if malformed is not None:
            message = f"malformed volume tolerations, counted as none: {malformed}"
            self.state.report(Problem(ev.POD, ev.GROUP_CORE, pod.key, message, pod.meta.uid))
        verdict = pod_volume_verdict(volumes, pod)
        if verdict is None:
            return None
        self.metrics.volume_rejections.labels(verdict.taint.effect if verdict.taint is not None else "Malformed").inc()
        return plain(REASON_VOLUME_TAINTED, verdict.message)

    def debug(self) -> list[dict[str, Any]]:
        """/debug/volumes: each tainted PVC/PV, its taints and its pods."""
        return debug_volumes(self.state.volumes)
