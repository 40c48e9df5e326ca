"""/filter's volume taint check (tracker/volumes.py) and /debug/volumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.metrics import Metrics
from tracker import events as ev
from tracker.state import ClusterState, Problem
from tracker.volumes import debug_volumes, pod_tolerations, pod_volume_verdict


class VolumeChecks:
    def __init__(self, state: ClusterState, metrics: Metrics) -> None:
        self.state = state
        self.metrics = metrics

    def problem(self, raw_pod: Mapping[str, Any]) -> str | None:
        """Why the pod the scheduler sent may start on no node because of a volume taint, or None.

        A malformed tolerations annotation counts as none and is reported on the pod.
        """
        volumes = self.state.volumes
        if not volumes.has_taints():
            return None
        _tolerations, malformed = pod_tolerations(raw_pod)
        if malformed is not None:
            found = raw_pod.get("metadata")
            meta: Mapping[str, Any] = found if isinstance(found, dict) else {}
            name = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
            message = f"malformed volume tolerations, counted as none: {malformed}"
            self.state.report(Problem(ev.POD, ev.GROUP_CORE, name, message, str(meta.get("uid") or "")))
        verdict = pod_volume_verdict(volumes, raw_pod)
        if verdict is None:
            return None
        self.metrics.volume_rejections.labels(verdict.taint.effect if verdict.taint is not None else "Malformed").inc()
        return verdict.message

    def debug(self) -> list[dict[str, Any]]:
        """/debug/volumes: each tainted PVC/PV, its taints and its pods."""
        return debug_volumes(self.state.volumes)
