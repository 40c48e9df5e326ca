"""The CEL warm-up: class selectors evaluated when devices or classes change, not on the scheduler's clock.

A cold selector costs hundreds of microseconds per device (a hostile one up
to its cost limit); paid here, a filter over thousands of nodes is answered
from the cache. The device views' scheduler (tracker/views/recompute.py) queues
the work and drains it in its background task, in slices, so it never holds
the event loop; without a loop (tools, synchronous tests) it runs in place.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from allocator.cel.lib.budget import DeadlineExceeded, set_deadline
from allocator.device_view import DeviceView
from allocator.types import DeviceClass, DeviceID
from tracker.foreground import Foreground

if TYPE_CHECKING:
    from allocator.allocation import SelectorEngine

# One warm-up evaluation gives up after this long (the cost limit stops a hostile one within
# ~50 ms; this is the backstop). The device is then evaluated by the first /filter that needs
# it, under that call's own time budget.
WARM_EVALUATION_SECONDS = 0.1

# The CEL activations the warm-up builds live as long as their devices, and every full collection
# scans whatever is not frozen: at 5,000 nodes x 8 GPUs x 7 partitions the start-up warm-up builds
# ~280,000 of them after the reflector's gc.freeze(), and full collections over them took ~1 s on
# /filter's clock. So they are frozen out of the collector's scans (gc.freeze(), as the reflector
# freezes its lists) every GC_FREEZE_EVERY devices of a long warm-up, and when the queue is empty
# after at least GC_FREEZE_DEVICES (a slice update's few devices are not worth it). While the
# scheduler's verbs keep the warm-up waiting (tracker/foreground.py), /filter builds the activations
# itself: they count too (the engine's cached activations since the last freeze), so that they are
# frozen at the same pace by the slices the warm-up still runs.
GC_FREEZE_DEVICES = 1000
GC_FREEZE_EVERY = 10_000

# The warm-up gives the event loop back after this much work: a /filter that arrives meanwhile
# waits for the slice in progress (the views' own recompute keeps its slice, recompute.py).
WARMUP_SLICE_SECONDS = 0.005
# ... and then passes this many turns of the loop, so that work arriving in more than one step
# runs before the next slice: a verb handed over by the HTTP thread (run_coroutine_threadsafe:
# a callback, then its task's first step) or a task woken by a timer is two steps; yielding once
# made each step wait for a slice of its own (~10 ms per /filter in the start-up warm-up).
WARMUP_YIELDS = 3

log = logging.getLogger("tracker.views.devices")  # the name its records have always had


async def pass_turns() -> None:
    """Give the loop WARMUP_YIELDS turns after a slice of background work (also extender/filter/prefetch.py)."""
    for _ in range(WARMUP_YIELDS):
        await asyncio.sleep(0)


class SelectorWarmup:
    """A queue of (devices, classes) to evaluate, drained in slices of work."""

    def __init__(
        self, cel: SelectorEngine[Any], current: Callable[[DeviceID], DeviceView | None], foreground: Foreground | None = None
    ) -> None:
        self._cel = cel
        self._current = current  # the device's view now: a queued one replaced since is skipped
        self._foreground = foreground if foreground is not None else Foreground()  # each slice waits for a quiet moment
        self._queue: deque[tuple[tuple[DeviceView, ...], tuple[DeviceClass, ...]]] = deque()
        self._unfrozen = 0  # devices warmed by the queue since its last gc.freeze()
        self._frozen_at = self._activations()  # the engine's cached activations at the last gc.freeze()

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def now(self, devices: tuple[DeviceView, ...], classes: tuple[DeviceClass, ...]) -> None:
        """Without an event loop: all of it, in place."""
        self._warm_slice(devices, self._compiled(classes), None)

    def enqueue(self, devices: tuple[DeviceView, ...], classes: tuple[DeviceClass, ...]) -> None:
        self._queue.append((devices, classes))

    async def drain_one(self, slice_seconds: float, interrupted: Callable[[], bool]) -> None:
        """Warm the oldest queued work, yielding to the loop after every slice; what `interrupted` stops goes back first.

        Each slice waits for a quiet moment between the scheduler's verbs
        (tracker/foreground.py): the cache it fills is /filter's to fill when
        the scheduler does not pause.
        """
        devices, classes = self._queue.popleft()
        compiled = self._compiled(classes)
        start = 0
        while start < len(devices) and not interrupted():
            await self._foreground.quiet(interrupted)
            if interrupted():
                break
            stop = self._warm_slice(devices, compiled, start, time.monotonic() + slice_seconds)
            self._unfrozen += stop - start
            start = stop
            if self._built() >= GC_FREEZE_EVERY:
                self._freeze()
            await pass_turns()
        if start < len(devices):
            self._queue.appendleft((devices[start:], classes))  # views first
        elif not self._queue and self._built() >= GC_FREEZE_DEVICES:
            self._freeze()

    def _freeze(self) -> None:
        """The activations built so far live as long as their devices: no full collection need scan them."""
        self._unfrozen = 0
        self._frozen_at = self._activations()
        gc.freeze()

    def _activations(self) -> int:
        stats = self._cel.stats
        return stats.get("cached_activations", 0) if isinstance(stats, dict) else 0

    def _built(self) -> int:
        """Activations built since the last freeze: by this queue, or by /filter's own evaluations meanwhile."""
        now = self._activations()
        self._frozen_at = min(self._frozen_at, now)  # some were evicted: count from the smaller cache
        return max(self._unfrozen, now - self._frozen_at)

    def _compiled(self, classes: Iterable[DeviceClass]) -> list[Any]:
        compiled = []
        for device_class in classes:
            for expression in device_class.selectors:
                try:
                    compiled.append(self._cel.compile(expression))
                except ValueError:
                    continue  # reported when the class arrived
        return compiled

    def _warm_slice(self, devices: tuple[DeviceView, ...], compiled: list[Any], start: int | None, until: float | None = None) -> int:
        """Warm devices[start:] until `until` (monotonic); returns where it stopped."""
        cel = self._cel
        i = start or 0
        while i < len(devices):
            if until is not None and i > (start or 0) and time.monotonic() > until:
                return i
            device = devices[i]
            i += 1
            if until is not None and self._current(device.id) is not device:
                continue  # replaced or gone since it was queued (its successor is queued itself)
            previous = set_deadline(time.monotonic() + WARM_EVALUATION_SECONDS)
            try:
                for selector in compiled:
                    if not cel.evaluate(selector, device):
                        break  # the class's later selectors are not needed for this device
            except ValueError:
                pass
            except DeadlineExceeded as e:
                log.debug("warm-up evaluation gave up", extra={"device": str(device.id), "expression": e.expression[:200]})
            finally:
                set_deadline(previous)
        return i
