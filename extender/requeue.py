"""Wake pods the extender rejected when devices may have become usable.

kube-scheduler retries a pod rejected by an extender only on Pod, Node, PV,
PVC, CSI, StorageClass, ResourceClaim or DeviceClass events (or its 5-minute
flush). Freed devices arrive as ResourceClaim events and wake such pods by
themselves; a removed taint (a DeviceTaintRule deleted, a ResourceSlice
changed) or a ResourceSlicePatch does not, and the pod would wait for an
unrelated event.

So when one of those kinds changes, the leader patches an annotation onto
each pending pod it rejected: a Pod update event, which kube-scheduler
honours (after the pod's backoff). Passes are coalesced (at most one per
`interval`) and bounded (`batch` pods per pass, the longest-waiting first).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from serving.metrics import Metrics
from tracker import events as ev
from tracker.leadership_gate import MayWrite
from tracker.source import SourceError
from tracker.state import ClusterState
from tracker.timestamps import rfc3339

log = logging.getLogger("dra_extender.requeue")

REQUEUE_ANNOTATION = "resource.dra-extender.io/requeue"
# Kinds whose changes may make a rejected pod fit but do not requeue it in kube-scheduler.
WAKING_KINDS = frozenset({ev.RESOURCE_SLICE, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH})

PatchPod = Callable[[str, str, dict[str, Any]], Awaitable[Any]]


class Requeuer:
    def __init__(
        self,
        state: ClusterState,
        patch_pod: PatchPod,
        metrics: Metrics,
        *,
        leadership: MayWrite,
        interval: float = 1.0,
        batch: int = 200,
    ) -> None:
        self.state = state
        self.patch_pod = patch_pod
        self.metrics = metrics
        self.leadership = leadership
        self.interval = interval
        self.batch = batch
        self._rejected: OrderedDict[str, str] = OrderedDict()  # pod uid -> namespace/name, oldest first
        self._wake = asyncio.Event()
        state.subscribe(self._on_event)

    def rejected(self, pod_uid: str, pod_key: str) -> None:
        """/filter rejected every node for device reasons: wake the pod when devices change."""
        if pod_uid:
            self._rejected[pod_uid] = pod_key

    def placed(self, pod_uid: str) -> None:
        self._rejected.pop(pod_uid, None)

    def pending(self) -> int:
        return len(self._rejected)

    def _on_event(self, event: ev.ObjectEvent) -> None:
        if event.kind == ev.POD:
            if event.type == "DELETED" or ((event.object.get("spec") or {}).get("nodeName")):
                self._rejected.pop(ev.object_uid(event.object), None)
            return
        if event.kind in WAKING_KINDS and self._rejected and self.state.ready:
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.leadership.may_write():
                await self._nudge()
            await asyncio.sleep(self.interval)

    async def _nudge(self) -> None:
        stamp = rfc3339(micro=True)
        pods = list(self._rejected.items())[: self.batch]
        start = time.monotonic()
        for uid, key in pods:
            self._rejected.pop(uid, None)
            namespace, _, name = key.partition("/")
            patch = {"metadata": {"uid": uid, "annotations": {REQUEUE_ANNOTATION: stamp}}}
            try:
                await self.patch_pod(namespace, name, patch)
            except SourceError as e:
                self.metrics.requeues.labels("failed").inc()
                log.info("could not nudge a pending pod", extra={"pod": key, "err": e.message})
                continue
            self.metrics.requeues.labels("ok").inc()
        if pods:
            log.info(
                "nudged pending pods after a device change",
                extra={"pods": len(pods), "seconds": round(time.monotonic() - start, 3), "still_pending": len(self._rejected)},
            )
        if self._rejected and len(pods) == self.batch:
            self._wake.set()  # more to do after the interval
