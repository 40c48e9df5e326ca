"""Every source and test fake satisfies the narrow protocols it is passed as (tracker/source.py).

The assignments below are checked by mypy, which the test runs on this file:
a method renamed or re-typed in one implementation fails here, not at run time.
Tests are not otherwise type-checked (`make lint` checks the packages).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import MemorySource
from kubesim.null_source import NullSource
from tests.tracker.test_leadership import LeaseSource
from tracker.apiserver.discovery import Transport
from tracker.apiserver.source import ApiSource
from tracker.k8s_events import EventRecorder
from tracker.manifest.source import ManifestSource
from tracker.source import (
    BindingSource,
    ClaimWriter,
    EventWriter,
    EvictionSource,
    HealthSource,
    ObjectFeed,
    ObjectReader,
    PodBindWriter,
    PodEvictionWriter,
    PodLabelWriter,
    RuleStatusWriter,
    Source,
    VolumeTaintWriter,
)

ROOT = Path(__file__).resolve().parents[2]


def _every_protocol(source: Source) -> None:
    """What `serve` hands out: each narrow protocol, and the consumers' combinations."""
    feed: ObjectFeed = source
    reader: ObjectReader = source
    claims: ClaimWriter = source
    binds: PodBindWriter = source
    evictions: PodEvictionWriter = source
    rules: RuleStatusWriter = source
    volumes: VolumeTaintWriter = source
    events: EventWriter = source
    binding: BindingSource = source
    eviction: EvictionSource = source
    del feed, reader, claims, binds, evictions, rules, volumes, events, binding, eviction


def _implementations(api: ApiSource, manifest: ManifestSource, null: NullSource, memory: MemorySource, lease: LeaseSource) -> None:
    _every_protocol(api)
    _every_protocol(manifest)
    transport: Transport = api  # leadership, discovery and the reflectors: the API server only
    health: HealthSource = api  # the device-health controller's writes: the API server only
    label: PodLabelWriter = api
    leases: Transport = lease
    binding: BindingSource = null
    bench: BindingSource = memory
    EventRecorder(api)
    EventRecorder(manifest)
    del transport, health, label, leases, binding, bench


@pytest.mark.slow  # mypy over this file: ten seconds
def test_sources_and_fakes_satisfy_the_source_protocols() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary", str(Path(__file__).relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
