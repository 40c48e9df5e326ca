"""The `cluster` fixture of the eviction controller tests: a controller on a fake clock against the fake API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesim.fakeapi import FakeApiServer
from tests.eviction.harness import Cluster


@pytest.fixture
async def cluster(tmp_path: Path):
    async with FakeApiServer(bookmark_interval=0.2) as api:
        c = Cluster(api, tmp_path)
        yield c
        await c.stop()
