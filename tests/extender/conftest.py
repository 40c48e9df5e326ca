"""An in-process Service over a copy of the demo cluster (ManifestSource, no HTTP)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.service import build_service
from kubesim.lease import FakeLease
from serving.metrics import Metrics
from tests.e2e.harness import DEMO
from tests.extender.manifest_cluster import load
from tracker.leadership_gate import LeadershipGate
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState, Problem


class DemoService:
    """The service, the problems it reported, and the Lease it leads with (held; a test drops or hands it over)."""

    def __init__(self, directory: Path) -> None:
        self.problems: list[Problem] = []
        self.lease = FakeLease()
        cel = CelEnvironment()
        self.state = ClusterState(cel, on_problem=self.problems.append)
        self.source = ManifestSource(directory, watch=False)
        self.service = build_service(self.state, self.source, Allocator(cel), Metrics(), leadership=LeadershipGate(self.lease))


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
