"""DRA pods another scheduler schedules: counted, told on the pod, never left silent.

The extender allocates devices for the kube-scheduler profiles it serves. A
pod that uses DRA (allocator.pod_claims.dra_use: resource claims or
DRA-backed extended resources) but names another scheduler — the default
one, because the schedulerName webhook leaves its namespace out, because the
pod was created before its DeviceClass was seen, or because the webhook was
down with failurePolicy Ignore — gets its devices from that scheduler. If it
keeps its DynamicResources plugin on, two allocators manage one pool and a
device can be promised twice.

Each such pod (not finished) is flagged once, by the leader: the
`dra_extender_foreign_scheduler_pods` counter, a warning log and a Warning
Event on the pod. At startup, once the view is complete, the check runs over
every pod already held, and the webhook's excluded namespaces are named in a
warning.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from allocator.extended_resources import class_mapping
from allocator.pod_claims import dra_use
from tracker import events as ev
from tracker.leadership_gate import LeadershipGate, MayWrite

if TYPE_CHECKING:  # the CLI imports add_flags before anything heavy is loaded
    from allocator.types import Pod
    from serving.metrics import Metrics
    from tracker.k8s_events import EventRecorder
    from tracker.state import ClusterState

log = logging.getLogger("dra_extender.foreign_pods")

REASON = "ScheduledByAnotherScheduler"
DEFAULT_PROFILE = "default-scheduler"
LEADER_POLL_SECONDS = 1.0
_FINISHED = frozenset({"Succeeded", "Failed"})


def add_flags(serve: argparse.ArgumentParser) -> None:
    """Which schedulers are the extender's, and which namespaces the schedulerName webhook leaves out."""
    serve.add_argument(
        "--scheduler-name",
        action="append",
        metavar="NAME",
        help="a kube-scheduler profile this extender serves (repeatable; default: the profiles of --scheduler-config); "
        "a DRA pod of any other scheduler is counted and gets a Warning Event (neither given: not checked)",
    )
    serve.add_argument(
        "--webhook-excluded-namespace",
        action="append",
        metavar="NAMESPACE",
        help="a namespace the schedulerName webhook leaves out (repeatable; the chart passes them): named in the startup "
        "warning and in the Event of a DRA pod there that another scheduler schedules",
    )


def profiles_from(args: argparse.Namespace) -> frozenset[str] | None:
    """--scheduler-name, else the schedulerNames of --scheduler-config's profiles (kube-scheduler's default filled in).

    None when neither is given: the extender cannot tell its pods from another scheduler's.
    """
    if args.scheduler_name:
        return frozenset(args.scheduler_name)
    if getattr(args, "scheduler_config", None):
        from tracker.apiserver.leadership import SchedulerConfigError, load_scheduler_config

        config = load_scheduler_config(args.scheduler_config)
        profiles = config.get("profiles") or [{}]
        if not isinstance(profiles, list) or not all(isinstance(p, dict) for p in profiles):
            raise SchedulerConfigError(f"--scheduler-config {args.scheduler_config}: profiles must be a list of mappings")
        return frozenset(str(p.get("schedulerName") or DEFAULT_PROFILE) for p in profiles)
    return None


class ForeignSchedulerPods:
    """Flags each DRA pod whose schedulerName is not one of `profiles`, once, while this process leads."""

    def __init__(
        self,
        state: ClusterState,
        metrics: Metrics,
        events: EventRecorder,
        *,
        profiles: Collection[str],
        excluded: Collection[str] = (),
        leadership: MayWrite | None = None,
    ) -> None:
        self.state = state
        self.metrics = metrics
        self.events = events
        self.profiles = frozenset(profiles)
        self.excluded = frozenset(excluded)
        self.leadership: MayWrite = leadership or LeadershipGate.always()
        self._flagged: set[str] = set()  # pod uids (namespace/name when a pod has none)
        self._checked = False  # the startup check ran
        state.subscribe(self._on_event)

    async def run(self) -> None:
        """The startup check once the view is complete, then again whenever this process becomes the leader."""
        while not self.state.ready:
            # Readiness comes with no tracker event of its own: poll it (as the eviction controller does).
            await asyncio.sleep(0.05)
        self._startup_check()
        led = self.leadership.may_write()
        while True:
            await asyncio.sleep(LEADER_POLL_SECONDS)
            leads = self.leadership.may_write()
            if leads and not led:
                self.sweep()
            led = leads

    def _startup_check(self) -> None:
        self._checked = True
        if self.excluded:
            log.warning(
                "the schedulerName webhook leaves these namespaces out: a DRA pod there keeps its scheduler, and if that is "
                "the default scheduler with DynamicResources on, it allocates devices beside dra-extender; such pods are "
                "flagged (metric dra_extender_foreign_scheduler_pods, a Warning Event)",
                extra={"excluded_namespaces": ",".join(sorted(self.excluded)), "profiles": ",".join(sorted(self.profiles))},
            )
        found = self.sweep()
        log.info(
            "checked the DRA pods already in the cluster for another scheduler",
            extra={"foreign": found, "profiles": ",".join(sorted(self.profiles))},
        )

    def sweep(self) -> int:
        """Flag every held pod that qualifies; how many qualify (flagged now or before)."""
        return sum(1 for pod in list(self.state.pods.values()) if self._check(pod))

    def _on_event(self, event: ev.ObjectEvent) -> None:
        if event.kind != ev.POD:
            return
        if event.type == "DELETED":
            self._flagged.discard(ev.object_uid(event.object) or event.key)
            return
        pod = self.state.pods.get(event.key)
        if pod is not None and self._checked:
            self._check(pod)

    def _check(self, pod: Pod) -> bool:
        why = self.why(pod)
        if why is None:
            return False
        key = pod.meta.uid or pod.key
        if key in self._flagged or not self.leadership.may_write():
            return True
        self._flagged.add(key)
        self.metrics.foreign_scheduler_pods.inc()
        message = self._message(pod, why)
        log.warning("DRA pod scheduled by another scheduler", extra={"pod": pod.key, "scheduler": pod.scheduler_name, "why": why})
        self.events.record(
            {
                "type": "Warning",
                "reason": REASON,
                "message": message,
                "involvedObject": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "namespace": pod.meta.namespace,
                    "name": pod.meta.name,
                    **({"uid": pod.meta.uid} if pod.meta.uid else {}),
                },
            }
        )
        return True

    def why(self, pod: Pod) -> str | None:
        """Why the pod is one to flag (what DRA it uses), or None."""
        if pod.scheduler_name in self.profiles or pod.phase in _FINISHED:
            return None
        return dra_use(pod, class_mapping(self.state.classes))

    def _message(self, pod: Pod, why: str) -> str:
        ours = _names(self.profiles)
        where = "bound to " + pod.node_name if pod.node_name else "pending"
        text = (
            f"uses DRA ({why}) but spec.schedulerName is {pod.scheduler_name!r} ({where}), not {ours}: that scheduler "
            "allocates its devices beside dra-extender, and a device may be promised twice. Create it with "
            f"schedulerName {sorted(self.profiles)[0]!r}"
        )
        if pod.meta.namespace in self.excluded:
            text += f"; namespace {pod.meta.namespace} is excluded from the schedulerName webhook"
        return text


def _names(names: Iterable[str]) -> str:
    return " or ".join(repr(n) for n in sorted(names))
