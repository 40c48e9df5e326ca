"""An in-process Service over a copy of the demo cluster (ManifestSource, no HTTP)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.service import build_service
from serving.metrics import Metrics
from tests.e2e.harness import DEMO
from tests.extender.manifest_cluster import load
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState, Problem


class DemoService:
    """The service, the problems it reported, and a switch for leadership."""

    def __init__(self, directory: Path) -> None:
        self.problems: list[Problem] = []
        self.leading = True
        self.hand_over_ends: float | None = None  # time.monotonic() at which a hand-over wait ends (leading only after)
        # What a Lease read asked for by a bind finds: (leading, seconds of the fresh Lease's wait); None: nothing new.
        self.on_read: tuple[bool, float] | None = None
        self.reads = 0
        cel = CelEnvironment()
        self.state = ClusterState(cel, on_problem=self.problems.append)
        self.source = ManifestSource(directory, watch=False)
        self.service = build_service(
            self.state,
            self.source,
            Allocator(cel),
            Metrics(),
            is_leader=self._is_leader,
            leading_in=self._leading_in,
            refresh_leadership=self._read_lease,
        )

    async def _read_lease(self) -> None:
        self.reads += 1
        if self.on_read is not None:
            self.leading, wait = self.on_read
            self.hand_over_ends = time.monotonic() + wait

    def _is_leader(self) -> bool:
        return self.leading and (self.hand_over_ends is None or time.monotonic() >= self.hand_over_ends)

    def _leading_in(self) -> float | None:
        if not self.leading or self.hand_over_ends is None:
            return None
        left = self.hand_over_ends - time.monotonic()
        return left if left > 0 else None


async def running_demo(directory: Path) -> AsyncIterator[DemoService]:
    """The service over the manifests in `directory`, loaded and ready, while the iteration lasts (a fixture's body)."""
    demo = DemoService(directory)
    task = await load(demo.source, demo.state)
    yield demo
    task.cancel()


@pytest.fixture
async def demo_service(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[DemoService]]]:
    """`demo = await demo_service({"extra.yaml": text})`: the demo plus extra files, loaded and ready."""
    tasks: list[asyncio.Task] = []

    async def start(extra: dict[str, str] | None = None) -> DemoService:
        directory = tmp_path / f"demo-{len(tasks)}"
        shutil.copytree(DEMO, directory)
        for name, text in (extra or {}).items():
            (directory / name).write_text(text)
        demo = DemoService(directory)
        tasks.append(await load(demo.source, demo.state))
        return demo

    yield start
    for task in tasks:
        task.cancel()
