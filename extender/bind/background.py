"""Tasks a request starts and does not wait for (undo, deallocation, Events), kept referenced until done."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


class BackgroundTasks:
    """A task set whose members stay referenced until they finish (the loop keeps only weak references)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, work: Awaitable[Any], name: str | None = None) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(work)
        if name is not None and isinstance(task, asyncio.Task):
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self, name: str) -> bool:
        """Whether a task of that name has not finished yet."""
        return any(isinstance(t, asyncio.Task) and t.get_name() == name for t in self._tasks)
