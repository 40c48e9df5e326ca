"""What kube-scheduler last said about a pod, beside what `kubectl dra why` computes on this machine.

`why` runs the extender's own code locally, so it answers even when the
extender itself is down or no replica leads, and then its "7 of 11 nodes
fit" is not why the pod waits. kube-scheduler records why in the pod's
FailedScheduling Events: when the extender could not be reached (the HTTP
error of its `/filter` or `/bind` call) or answered "not leader", `why` says
so; when the latest Event disagrees with the local answer, it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracker.timestamps import rfc3339

REASON = "FailedScheduling"
_VERBS = ("/filter", "/prioritize", "/bind", "extender")
_UNREACHABLE = (
    "connection refused",
    "no such host",
    "i/o timeout",
    "context deadline exceeded",
    "Client.Timeout",
    "connection reset",
    "EOF",
    "no route to host",
    "503",
)


@dataclass(frozen=True, slots=True)
class SchedulerSays:
    time: str  # RFC 3339, as the Event has it
    message: str

    @property
    def extender(self) -> str | None:
        """ "unreachable", "not leading" or None: what the message says of the extender."""
        if "not leader" in self.message:
            return "not leading"
        if any(v in self.message for v in _VERBS) and any(u in self.message for u in _UNREACHABLE):
            return "unreachable"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "message": self.message, "extender": self.extender}


def field_selector(pod_name: str) -> str:
    """The API server's own filter: the Events of pods of this name with this reason (the uid is checked here)."""
    return f"involvedObject.kind=Pod,involvedObject.name={pod_name},reason={REASON}"


def _when(event: dict[str, Any]) -> str:
    series = event.get("series") or {}
    meta = event.get("metadata") or {}
    return str(
        series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or ""
    )


def latest(events: list[dict[str, Any]], pod: dict[str, Any]) -> SchedulerSays | None:
    """The pod's latest FailedScheduling Event (by its time), None if it has none."""
    meta = pod.get("metadata") or {}
    mine = []
    for e in events:
        involved = e.get("involvedObject") or e.get("regarding") or {}
        if e.get("reason") != REASON or involved.get("kind") != "Pod" or involved.get("name") != meta.get("name"):
            continue
        if involved.get("uid") and meta.get("uid") and involved["uid"] != meta["uid"]:
            continue  # an earlier pod of the same name
        mine.append(e)
    if not mine:
        return None
    e = max(mine, key=_when)
    return SchedulerSays(_when(e) or rfc3339(0), str(e.get("message") or e.get("note") or ""))


def lines(says: SchedulerSays | None, fits: int, placed: bool) -> list[str]:
    """What `why` adds: the extender's state as kube-scheduler saw it, and the Event when it disagrees with the local answer."""
    if says is None or placed:
        return []
    out = []
    if says.extender == "unreachable":
        out.append(
            "the extender was unreachable when kube-scheduler last tried (below): the pod waits for it, "
            "not for the reasons computed here; is the dra-extender pod running and ready?"
        )
    elif says.extender == "not leading":
        out.append(
            "the extender answered 'not leader' when kube-scheduler last tried (below): no replica leads; "
            "check the dra-extender pods and the Lease they follow or hold"
        )
    if says.extender is not None or fits > 0:
        out.append(f"kube-scheduler's latest FailedScheduling Event ({says.time}): {says.message}")
    return out
