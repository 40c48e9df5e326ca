"""dra_extender_tracker_events counted through Metrics.tracker_event (a labelled child kept per kind and type) reads as before."""

from __future__ import annotations

import pytest

from serving.metrics import Metrics

# (name, events as (kind, type))
ROWS = [
    ("none", []),
    ("one", [("Pod", "ADDED")]),
    ("one kind, each type", [("Pod", "ADDED"), ("Pod", "MODIFIED"), ("Pod", "MODIFIED"), ("Pod", "DELETED")]),
    ("kinds interleaved", [("ResourceClaim", "MODIFIED"), ("Pod", "MODIFIED"), ("ResourceClaim", "MODIFIED"), ("Node", "ADDED")]),
]


def _series(metrics: Metrics) -> list[str]:
    return [line for line in metrics.render().decode().splitlines() if line.startswith("dra_extender_tracker_events")]


@pytest.mark.parametrize("events", [pytest.param(e, id=n) for n, e in ROWS])
def test_tracker_events_counted_as_with_a_label_lookup_per_event(events: list[tuple[str, str]]) -> None:
    kept, looked_up = Metrics(), Metrics()
    for kind, event_type in events:
        kept.tracker_event(kind, event_type)
        looked_up.tracker_events.labels(kind, event_type).inc()
    assert _series(kept) == _series(looked_up)
    for kind, event_type in set(events):
        assert (
            f'dra_extender_tracker_events_total{{kind="{kind}",type="{event_type}"}} {float(events.count((kind, event_type)))}'
            in _series(kept)
        )
