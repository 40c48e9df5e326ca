"""A run's counters and latency samples."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Stats:
    cycles: int = 0
    filter_ms: list[float] = field(default_factory=list)
    prioritize_ms: list[float] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)
    filter_errors: int = 0
    prioritize_errors: int = 0
    binds: int = 0
    binds_ok: int = 0
    failed_binds: int = 0
    bind_timeouts: int = 0
    bind_errors: Counter[str] = field(default_factory=Counter)
    scheduling_errors: Counter[str] = field(default_factory=Counter)
    rejections: int = 0
    rejections_of_pods_that_fit: int = 0
    rejection_reasons: Counter[str] = field(default_factory=Counter)
    fit_rejection_reasons: Counter[str] = field(default_factory=Counter)
    single_node_cycles: int = 0
    status_patches: int = 0
    requeue_events: Counter[str] = field(default_factory=Counter)
    ignored_events: Counter[str] = field(default_factory=Counter)
