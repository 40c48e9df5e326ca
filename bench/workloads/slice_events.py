"""SliceEvents: the in-process cost of ResourceSlice events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.workloads.runs import Config, target


def slice_events(cfg: Config, _tmp: Path) -> dict[str, Any]:
    from bench.bench_reflector import slice_update_rates

    r = slice_update_rates(5000, 8, cfg.n(3000, 1000), 3 if not cfg.quick else 2)
    worst = min(r["taint"]["events_per_s"], r["generation"]["events_per_s"])
    r["targets"] = [
        target(
            "slice events applied in-process >= 3 x 853/s (8 devices, attributes unchanged: taint / generation)",
            worst,
            2559,
            worst >= 2559,
            "events/s",
            "in-process",
        ),
        target(
            "slice events, full change (every device's attributes), for reference",
            r["full"]["events_per_s"],
            None,
            None,
            "events/s",
            "in-process",
        ),
    ]
    print(
        f"  slice events in-process: taint {r['taint']['events_per_s']}/s, generation {r['generation']['events_per_s']}/s, full change {r['full']['events_per_s']}/s",
        flush=True,
    )
    return r
