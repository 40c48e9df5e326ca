"""The `cluster` fixture of the health controller tests: both controllers on a fake clock against the fake API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesim.fakeapi import FakeApiServer
from tests.health.harness import HealthCluster


@pytest.fixture
async def cluster(tmp_path: Path):
    async with FakeApiServer(bookmark_interval=0.2) as api:
        c = HealthCluster(api, tmp_path)
        yield c
        await c.stop()
