"""Per-taint token buckets: a rule that selected too much evicts slowly enough to be deleted in time.

One bucket per taint (a rule, or one driver-published taint), created on
first use and dropped once it is full again and no pending eviction needs
it, so a cluster with many short-lived taints keeps no garbage.

A bucket's tokens live in this process only, so a new process (a restart,
a crash loop, a new leader) cannot know what the last one spent. A taint
that was in effect before this controller began leading may have been
drained a moment ago: its bucket starts empty at that moment and refills
at the rule's rate, never with a fresh burst. Only a taint added since then
(one no earlier controller can have acted on) starts full. What this reads
back is the taint's `timeAdded` (written to the cluster before anything is
evicted for it: `stamping.py`); the cost is one burst per taint per
hand-over, never more evictions than the rate allows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_RATE = 10.0  # evictions per second (docs/design.md#eviction)
DEFAULT_BURST = 10
# Refills are float arithmetic on epoch seconds (resolution ~2e-7 s): 0.1 s at 10/s may
# come to 0.999999 of a token. A token that close is a token, or the controller would
# wait for a deadline that rounds to now.
_EPSILON = 1e-3


@dataclass(slots=True)
class TokenBucket:
    rate: float
    burst: int
    tokens: float
    updated: float

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def available_at(self, now: float) -> float:
        """When the next whole token is there (`now` if it already is)."""
        self._refill(now)
        if self.tokens >= 1.0 - _EPSILON:
            return now
        return max(now + (1.0 - self.tokens) / self.rate, math.nextafter(now, math.inf))

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens >= 1.0 - _EPSILON:
            self.tokens = max(0.0, self.tokens - 1.0)
            return True
        return False

    def give_back(self) -> None:
        """An attempt that evicted nothing (refused by a PDB) does not count against the rate."""
        self.tokens = min(float(self.burst), self.tokens + 1.0)

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst - _EPSILON


class TaintLimiters:
    def __init__(self, burst: int = DEFAULT_BURST) -> None:
        self.burst = burst
        self.buckets: dict[str, TokenBucket] = {}
        self.leading_since = -math.inf  # when this controller began leading (set by `began_leading`)

    def began_leading(self, now: float) -> None:
        """A new term: whatever an earlier leader (or process) spent is unknown, so every bucket starts again from `now`."""
        self.buckets.clear()
        self.leading_since = now

    def _initial_tokens(self, rate: float, added: float, now: float) -> float:
        # timeAdded has whole seconds (metav1.Time): a taint stamped in the second this term began reads as
        # earlier than the term's start. No earlier process can have stamped and drained it in that same second
        # and handed over (a restart or a Lease hand-over takes longer), so that second counts as this term's.
        began = math.floor(self.leading_since) if math.isfinite(self.leading_since) else self.leading_since
        if began <= added <= now:
            return float(self.burst)  # added in this term: no earlier controller evicted for it
        # In effect before this term (or dated in the future, which proves nothing): as if emptied when the term began.
        return min(float(self.burst), max(0.0, now - self.leading_since) * rate)

    def _bucket(self, taint: str, rate: float, added: float, now: float) -> TokenBucket:
        bucket = self.buckets.get(taint)
        if bucket is None:
            bucket = self.buckets[taint] = TokenBucket(rate, self.burst, self._initial_tokens(rate, added, now), now)
        elif bucket.rate != rate:
            bucket._refill(now)
            bucket.rate = rate  # the rule's evictionsPerSecond changed: the new rate applies from now
        return bucket

    def acquire(self, taints: Iterable[tuple[str, float, float]], now: float) -> tuple[str | None, float]:
        """Take a token from whichever of the pod's taints (id, rate, timeAdded) has one, trying the fastest first.

        Returns (taint charged, now) on success, or (None, when the earliest
        of them will have a token) when all are exhausted: a pod hit by several
        taints goes at the fastest applicable rate.
        """
        earliest = float("inf")
        for taint, rate, added in sorted(taints, key=lambda t: (-t[1], t[0])):
            bucket = self._bucket(taint, rate, added, now)
            if bucket.take(now):
                return taint, now
            earliest = min(earliest, bucket.available_at(now))
        return None, earliest

    def give_back(self, taint: str) -> None:
        bucket = self.buckets.get(taint)
        if bucket is not None:
            bucket.give_back()

    def drop_idle(self, needed: set[str], now: float) -> None:
        """Forget buckets that are full and that no pending eviction refers to."""
        for taint in [t for t, b in self.buckets.items() if t not in needed and b.full(now)]:
            del self.buckets[taint]


class Backoff:
    """Per pod: when a refused (429) or failed eviction may be tried again, doubling up to a limit."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._retry: dict[str, tuple[float, float]] = {}  # pod UID -> (not before, last backoff)

    def not_before(self, uid: str) -> float:
        return self._retry.get(uid, (0.0, 0.0))[0]

    def failed(self, uid: str, now: float) -> float:
        """The next backoff of the pod (seconds), counted from `now`."""
        _, backoff = self._retry.get(uid, (0.0, 0.0))
        backoff = min(self.maximum, backoff * 2 if backoff else self.initial)
        self._retry[uid] = (now + backoff, backoff)
        return backoff

    def succeeded(self, uid: str) -> None:
        self._retry.pop(uid, None)

    def keep(self, live: set[str]) -> None:
        """Forget the pods no longer planned."""
        self._retry = {uid: r for uid, r in self._retry.items() if uid in live}
