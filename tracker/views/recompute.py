"""When device views are computed: in the event's handler as long as it is cheap, then in the background.

One part of the device views (tracker/views/devices.py). Rule, patch and
class selectors may be costly: a slice's handler computes its devices' views
for at most SLICE_HANDLER_SECONDS and leaves the rest provisional; a rule,
patch or class change recomputes for one slice of WARM_SLICE_SECONDS. What
is left continues in a background task on the event loop, in slices of
WARM_SLICE_SECONDS, before the CEL warm-up (tracker/views/warmup.py), and the
events that asked for it reach the listeners once it is done. Without an
event loop (tools, synchronous tests) everything runs in place.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from allocator.device_view import DeviceView
from allocator.types import DeviceClass, DeviceID, ResourceSlice
from tracker import events as ev
from tracker.foreground import Foreground
from tracker.views.builder import Budget, ViewBuilder
from tracker.views.index import SliceIndex
from tracker.views.warmup import WARMUP_SLICE_SECONDS, SelectorWarmup

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

_RECOMPUTING = frozenset({ev.DEVICE_CLASS, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH})
# A slice's handler computes its devices' views (rule and patch selectors included) for at
# most this long; the rest get a provisional view, carrying PENDING_TAINT so that nothing is
# allocated on what is not known yet, and are computed in the background.
SLICE_HANDLER_SECONDS = 0.05

# The background recompute of views gives the event loop back after this much work, so probes,
# verbs and signals are served between its slices however many devices or how costly the
# selectors (the CEL warm-up after it uses its own, shorter WARMUP_SLICE_SECONDS).
WARM_SLICE_SECONDS = 0.02


class Recompute:
    """Schedules view computations and the CEL warm-up, and holds back the events waiting for them."""

    def __init__(
        self,
        cel: SelectorEngine[Any],
        builder: ViewBuilder,
        index: SliceIndex,
        classes: Mapping[str, DeviceClass],
        *,
        release: Callable[[ev.ObjectEvent], None],
        foreground: Foreground | None = None,
    ) -> None:
        """`release` tells the listeners of an event held back (see `hold_back`); the warm-up waits for `foreground`'s quiet."""
        self._builder = builder
        self._index = index
        self._classes = classes
        self._release = release
        self._warmup = SelectorWarmup(cel, builder.devices.get, foreground)
        self._task: asyncio.Task[None] | None = None
        # Devices whose views a rule, patch or class change asked to recompute, by slice (name ->
        # device names), done in slices of time on the loop (their selectors may be costly), and
        # the events held back meanwhile. Kept grouped and in order, so a slice of work costs what
        # it does, not a pass over everything still pending.
        self._pending: OrderedDict[str, set[str]] = OrderedDict()
        self._deferring = False  # the event being applied left work in _pending
        self._held_events: list[ev.ObjectEvent] = []

    @property
    def pending(self) -> bool:
        """Views are left to recompute."""
        return bool(self._pending)

    def hold_back(self, event: ev.ObjectEvent) -> bool:
        """Whether the listeners hear of `event` later, through `release`.

        Listeners (the eviction controller) read the views this event changes: they hear
        of it once those are computed, after the events held before it.
        """
        if self._deferring or (self._held_events and event.kind in _RECOMPUTING):
            self._deferring = False
            self._held_events.append(event)
            return True
        return False

    def rebuild_slice(self, name: str, old: ResourceSlice | None = None) -> None:
        """The slice's device views (see ViewBuilder.rebuild), as many as fit in the handler's time."""
        fresh, later = self._builder.rebuild(name, old, self._handler_deadline())
        self.warm(fresh, self._classes.values())
        if later:
            self._defer(self._grouped(later))

    def devices(self, affected: set[DeviceID]) -> None:
        """Recompute the views of devices a rule, patch or class change touches.

        Their selectors may be costly: on an event loop, what does not fit in one
        slice of WARM_SLICE_SECONDS continues in the background task, in slices, and
        the event reaches the listeners once it is done (and the store is not ready
        before the initial views are); without a loop, all in place.
        """
        if not affected:
            return
        grouped = self._grouped(affected)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._run(grouped, None)
            return
        if not self._pending:
            self._run(grouped, time.monotonic() + WARM_SLICE_SECONDS)  # most are done here
            if not grouped:
                return
        self._defer(grouped, loop)

    def warm(self, devices: Iterable[DeviceView], classes: Iterable[DeviceClass]) -> None:
        """Evaluate class selectors when devices or classes change (tracker/views/warmup.py).

        On an event loop the work runs in the background task, in slices of
        WARM_SLICE_SECONDS, so it never holds the loop; without one (tools,
        synchronous tests) it runs in place.
        """
        classes = tuple(c for c in classes if c.selectors)
        if not classes:
            return
        devices = tuple(devices)
        if not devices:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._warmup.now(devices, classes)
            return
        self._warmup.enqueue(devices, classes)
        self._start(loop)

    def _handler_deadline(self) -> float | None:
        """Until when a slice's handler computes views itself: None without an event loop (all of them)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return time.monotonic() + SLICE_HANDLER_SECONDS

    def _defer(self, grouped: OrderedDict[str, set[str]], loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Recompute these views in the background task; the event being applied waits for it."""
        for name, names in grouped.items():
            self._pending.setdefault(name, set()).update(names)
        self._deferring = True
        self._start(loop or asyncio.get_running_loop())

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._background(), name="warm-selectors")

    async def _background(self) -> None:
        """Recompute pending views, then drain the warm-up queue, yielding to the loop after every slice of work."""
        try:
            while self._pending or self._warmup.pending:
                if self._pending:
                    self._run(self._pending, time.monotonic() + WARM_SLICE_SECONDS)
                    if not self._pending:
                        held, self._held_events = self._held_events, []
                        for event in held:
                            self._release(event)
                    await asyncio.sleep(0)
                    continue
                await self._warmup.drain_one(WARMUP_SLICE_SECONDS, lambda: bool(self._pending))
        finally:
            self._task = None

    def _grouped(self, affected: Iterable[DeviceID]) -> OrderedDict[str, set[str]]:
        """Device names by the slice that holds them (devices no slice holds any more are dropped)."""
        grouped: OrderedDict[str, set[str]] = OrderedDict()
        for did in affected:
            name = self._index.slice_name(did)
            if name is not None:
                grouped.setdefault(name, set()).add(did.device)
        return grouped

    def _run(self, grouped: OrderedDict[str, set[str]], until: float | None) -> None:
        """Recompute `grouped` (slice name -> device names) until `until` (monotonic; None: all).

        Done slices leave `grouped`; what is left of a slice stays first in line.
        """
        ctx = self._builder.context()
        budget = Budget(until)  # at least one device per call
        while grouped and not budget.over():
            name, names = grouped.popitem(last=False)
            if name not in self._builder.slice_views:
                continue  # the slice is gone: nothing of it to recompute
            rest, changed = self._builder.recompute(name, names, ctx, budget)
            if rest:
                grouped[name] = {d.device for d in rest}
                grouped.move_to_end(name, last=False)
            if changed:
                self.warm(self._builder.slice_views[name].devices, self._classes.values())
