"""The leader's pod label, so that the alerts Service selects the leader alone.

With several replicas, only the leader acts on a delivery; a follower
answers 503 and Alertmanager retries until a retry reaches the leader. The
chart's alerts Service therefore selects `LABEL: "true"`, which this task
keeps on the process's own pod (POD_NAME/POD_NAMESPACE from the downward
API) exactly while it leads. A process that starts, or stops, leading
removes it: a label left on a restarted container's pod is removed at
startup. Between a hand-over and the next poll both pods, or neither, may
carry it: the follower's 503 remains the fallback then.

Under `--read-only` the source refuses the write before sending it; that
answer holds for the whole process, so the task says so once and stops
rather than retrying (and logging) at every poll.
"""

from __future__ import annotations

import asyncio
import logging
import os

from tracker.clock import Clock, SystemClock
from tracker.leadership_gate import LeadershipGate, MayWrite
from tracker.source import PodLabelWriter, ReadOnlyRefused

log = logging.getLogger("dra_extender.health")

LABEL = "resource.dra-extender.io/health-leader"


def own_pod() -> tuple[str, str] | None:
    """(namespace, name) of this process's pod from the downward API's env vars; None outside a pod."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    return (namespace, name) if name and namespace else None


class LeaderLabel:
    def __init__(
        self,
        source: PodLabelWriter,
        namespace: str,
        name: str,
        leadership: MayWrite,
        *,
        clock: Clock | None = None,
        poll: float = 1.0,
    ) -> None:
        self.source = source
        self.namespace, self.name = namespace, name
        self.pod = f"{namespace}/{name}"
        self.leadership = leadership
        self.clock: Clock = clock or SystemClock()
        self.poll = poll
        self.labelled: bool | None = None  # what the pod carries, as last written (None: not known yet)
        self.refused = False  # --read-only refused the write: nothing to do for the rest of the process
        self.wake = asyncio.Event()

    async def step(self) -> None:
        """Label or unlabel the pod if leadership differs from what was last written; a failure is retried at the next poll."""
        want = self.leadership.may_write()
        if want == self.labelled:
            return
        try:
            await self.source.label_pod(self.namespace, self.name, {LABEL: "true" if want else None})
        except ReadOnlyRefused:
            self.refused = True
            log.info("read-only (--read-only): the own pod's health leader label is not written", extra={"object": self.pod})
            return
        except Exception as e:  # any failure (refused, unreachable, the session gone) is retried at the next poll, never fatal
            log.warning(
                "could not set the health leader label on the own pod", extra={"object": self.pod, "err": str(e) or type(e).__name__}
            )
            return
        self.labelled = want
        log.info("health leader label " + ("set" if want else "removed"), extra={"object": self.pod})

    async def run(self) -> None:
        try:
            while not self.refused:
                await self.step()
                self.wake.clear()
                await self.clock.wait(self.wake, self.clock.now() + self.poll)
        finally:
            if self.labelled:  # stopping: the Service stops sending deliveries here at once
                self.leadership = LeadershipGate.never()
                await asyncio.shield(self.step())
                if self.labelled:
                    log.error(
                        "stopping with the health leader label still on the own pod: deliveries may reach it until it is gone",
                        extra={"object": self.pod, "label": LABEL},
                    )
