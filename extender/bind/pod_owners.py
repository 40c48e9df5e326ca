"""Who acts on one pod's claims right now: its /bind, or the undo of what a bind or a binding wait allocated; never both.

A /bind that finds the pod's claims allocated and ready binds the pod; a
binding timeout, a failure condition or a failed bind takes the allocation
back. Both decide from the cluster state and then write, with awaits in
between, so without one owner per pod a bind could create the Binding while
the claim it relies on is being deallocated (docs/design.md, "Binding
conditions"). Taking and releasing are synchronous, so on the event loop a
take is atomic: whoever takes first decides, the other backs off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

BINDING: Final = "its /bind is in progress"
UNDOING: Final = "its claims are being deallocated"


class PodOwners:
    def __init__(self) -> None:
        self._owner: dict[str, str] = {}  # pod UID -> BINDING | UNDOING

    def take(self, uid: str, what: str) -> str | None:
        """Own the pod's claims for `what`; None when taken, else what holds them now."""
        held = self._owner.get(uid)
        if held is not None:
            return held
        self._owner[uid] = what
        return None

    def holder(self, uid: str) -> str | None:
        return self._owner.get(uid)

    def release(self, uid: str, what: str) -> None:
        if self._owner.get(uid) == what:
            del self._owner[uid]

    def release_after(self, uid: str, what: str, tails: Iterable[asyncio.Future[Any]]) -> None:
        """Release once the undo tasks a bind left running are done (they still act on the pod's claims)."""
        running = [t for t in tails if not t.done()]
        if not running:
            self.release(uid, what)
            return
        left = [len(running)]

        def one_done(_task: asyncio.Future[Any]) -> None:
            left[0] -= 1
            if left[0] == 0:
                self.release(uid, what)

        for task in running:
            task.add_done_callback(one_done)
