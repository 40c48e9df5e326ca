"""Every test under tests/e2e is marked `e2e`: it starts dra-extender or the fake API server as a
subprocess, runs the kube-scheduler model, or measures a rate on the real clock, so `make test-fast`
(`-m "not e2e and not slow"`) leaves it out. The rule is where a test lives, not a mark in each file."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)
