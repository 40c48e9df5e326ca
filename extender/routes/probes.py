"""/livez (/healthz), /readyz and /metrics of the extender's listeners (serving/probes.py), ready once the service is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from extender.service import Service
from serving import probes
from serving.http_thread import LoopBridge


def add_probe_routes(
    app: FastAPI,
    service: Service,
    bridge: LoopBridge,
    *,
    source_status: Callable[[], dict[str, Any]] | None,
    lease_problem: Callable[[], str | None] | None,
) -> None:
    """Ready means able to answer verbs: the initial state of every kind is held."""
    metrics = service.metrics

    def refresh_gauges() -> None:
        """On the main loop: gauges that read the tracker's state (through the service) and the source."""
        service.refresh_gauges()
        if source_status is not None:
            metrics.set_source_status(source_status())

    probes.add_probe_routes(app, metrics, bridge, not_ready=service.not_ready, refresh_gauges=refresh_gauges, lease_problem=lease_problem)
