"""The health controller's failed writes: per object, with backoff, and whether the API server as a whole is down.

A write the API server refuses for one object (400, 404, 409, 422: a rule
its schema refuses, a policy gone meanwhile) concerns that object alone: it
is retried with exponential backoff on the controller's clock, reported on
its policy, and no other write or delivery waits for it. A write that fails
for the server as a whole (no answer, a timeout, 5xx, 429, or 401/403 for
our identity) is retried with backoff too, under a shorter cap. The server
is down, and deliveries are answered 503, while the writes since the last
look all failed that way: none succeeded and none was judged for its object
(docs/health.md, Writes).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracker.source import SourceError

OBJECT_CAP = 300.0  # the longest wait between retries of a write the API server refuses for its object
SERVER_CAP = 30.0  # ... of a write that failed for the server as a whole: back soon after the server is


def server_wide(err: BaseException) -> bool:
    """Whether the error says the API server cannot be written at all, rather than refusing this object."""
    if isinstance(err, SourceError):
        return err.status >= 500 or err.status in (401, 403, 408, 429) or err.status < 400
    return True  # no answer: connection refused or reset, a timeout


@dataclass(slots=True)
class Failure:
    """One object's failing write: its policy, what it is, the last error, and when to try again."""

    policy: str
    what: str
    error: str
    attempts: int
    next_at: float
    server_wide: bool


class WriteFailures:
    """Per written object (a rule's name, a policy's status), the failure streak; and the server's state."""

    def __init__(self, retry: float) -> None:
        self.retry = retry
        self.by_key: dict[str, Failure] = {}
        self.down: str | None = None  # the error while the API server as a whole cannot be written
        self._answered = 0  # writes since the last `look` that the server took or judged for their object
        self._unanswered: str | None = None  # the last server-wide error since then

    def due(self, key: str, now: float) -> bool:
        f = self.by_key.get(key)
        return f is None or now >= f.next_at

    def failed(self, key: str, policy: str, what: str, err: BaseException, now: float) -> Failure:
        """Record a failed write; the new streak (attempts == 1 the first time: say so once)."""
        wide = server_wide(err)
        prev = self.by_key.get(key)
        attempts = (prev.attempts if prev is not None else 0) + 1
        wait = min(SERVER_CAP if wide else OBJECT_CAP, self.retry * 2 ** min(attempts - 1, 30))
        f = self.by_key[key] = Failure(policy, what, str(err), attempts, now + wait, wide)
        if wide:
            self._unanswered = str(err)
        else:
            self._answered += 1
        return f

    def succeeded(self, key: str) -> None:
        self.by_key.pop(key, None)
        self._answered += 1

    def look(self) -> str | None:
        """At the end of a pass: down while every write since the last look failed for the server as a whole."""
        if self._answered:
            self.down = None
        elif self._unanswered is not None:
            self.down = self._unanswered
        self._answered, self._unanswered = 0, None
        return self.down

    def next_at(self, after: float) -> float | None:
        """The next retry later than `after` (one due already is under way, or no longer needed)."""
        return min((f.next_at for f in self.by_key.values() if f.next_at > after), default=None)

    def of_policy(self, policy: str) -> list[Failure]:
        return [f for _k, f in sorted(self.by_key.items()) if f.policy == policy]

    def forget(self, key: str) -> None:
        """The object is gone (its rule deleted, its policy removed): no retry."""
        self.by_key.pop(key, None)

    def clear(self) -> None:
        """Leadership ended: the next leadership starts afresh."""
        self.by_key.clear()
        self.down = None
        self._answered, self._unanswered = 0, None
