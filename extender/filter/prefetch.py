"""Verdicts of a repeating claim shape computed in the background, so that its first pass leaves /filter's clock.

/filter looks at `offer_nodes` names at a time from a rotating start
(node_fit.py), so the first nodes / offer_nodes pods of a shape each meet
that many nodes with no verdict yet (~0.2-0.35 ms each on partitioned GPUs).
When a shape's limited look repeats (its second pod: a one-off shape never
costs a pass over every node), the remaining names' verdicts are computed
here, on the main event loop between verbs, in slices of
PREFETCH_SLICE_SECONDS followed by WARMUP_YIELDS turns of the loop, as the CEL
warm-up does (tracker/views/warmup.py).

It goes through OutcomeCache.verdicts, so a prefetched verdict is an
ordinary cached verdict: kept by node token and dropped by the tracker's
change log like one /filter computed. Nothing here decides or writes; a
failure is logged and ends the prefetch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

from allocator.cel.lib.budget import DeadlineExceeded
from allocator.cel.lib.budget import set_deadline as set_cel_deadline
from allocator.types import ResourceClaim
from extender.filter.outcomes import ClaimSignature, OutcomeCache
from extender.filter.request_nodes import RequestNodes
from tracker.views.warmup import WARM_EVALUATION_SECONDS, pass_turns

log = logging.getLogger("dra_extender.extender")

SEEN_SHAPES = 256  # signatures remembered (seen once, or prefetched already)
STEP_NODES = 4  # nodes per verdicts call inside a slice: ~1.5 ms at most past the slice's end
# A slice of the prefetch: a verb that arrives meanwhile waits for its end. It does not wait for a quiet
# moment as the CEL warm-up does (tracker/foreground.py): it is there for the shape's next pods, which
# arrive back to back; so its slices are short (5 ms ones made the pods beside them 12-13 ms at 5,000 nodes).
PREFETCH_SLICE_SECONDS = 0.001

Signature = tuple[ClaimSignature, ...]


class VerdictPrefetch:
    """At most one background pass at a time, over the names of a shape's second limited look."""

    def __init__(self, outcomes: OutcomeCache) -> None:
        self.outcomes = outcomes
        self._seen: OrderedDict[Signature, bool] = OrderedDict()  # signature -> prefetched already
        self.task: asyncio.Task[None] | None = None
        self.computed = 0  # verdicts computed by prefetches (for tests and benches)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def limited_look(self, signature: Signature, claims: Sequence[ResourceClaim], order: list[str], nodes: RequestNodes) -> None:
        """A /filter looked at part of `order` (the names from where the next look starts) for `signature`."""
        if not all(s and s[0] == "new" for s in signature):
            return  # an allocated claim's verdicts are its own; an extended-resource claim's requests differ per node
        done = self._seen.get(signature)
        self._seen[signature] = bool(done)
        self._seen.move_to_end(signature)
        while len(self._seen) > SEEN_SHAPES:
            self._seen.popitem(last=False)
        if done is None or done or self.running:
            return  # first sight, prefetched already, or another one running
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a tool answering once): nothing to do it between verbs
        self._seen[signature] = True
        self.task = loop.create_task(self._run(signature, tuple(claims), order, nodes), name="prefetch-verdicts")

    async def _run(self, signature: Signature, claims: tuple[ResourceClaim, ...], order: list[str], nodes: RequestNodes) -> None:
        try:
            await self._drain(signature, claims, order, nodes)
        except Exception:
            log.exception("verdict prefetch stopped", extra={"claims": ", ".join(c.key for c in claims), "names": len(order)})

    async def _drain(self, signature: Signature, claims: tuple[ResourceClaim, ...], order: list[str], nodes: RequestNodes) -> None:
        outcomes = self.outcomes
        known = outcomes.state.nodes
        i = 0
        while i < len(order):
            await pass_turns()
            if not outcomes.holds(signature):
                return  # dropped from the cache (evicted, or everything changed): not worth computing again
            until = time.monotonic() + PREFETCH_SLICE_SECONDS
            while i < len(order):
                part = [n for n in order[i : i + STEP_NODES] if n in known]  # a node gone since is not computed
                i += STEP_NODES
                if part:
                    before = outcomes.misses
                    previous = set_cel_deadline(time.monotonic() + WARM_EVALUATION_SECONDS)
                    try:
                        outcomes.verdicts(signature, claims, nodes.resolve(part))
                    except DeadlineExceeded:
                        pass  # a slow selector: left to the /filter that needs it, under its own budget
                    finally:
                        set_cel_deadline(previous)
                    self.computed += outcomes.misses - before
                if time.monotonic() > until:
                    break
