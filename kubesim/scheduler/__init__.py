"""A model of kube-scheduler 1.36 as an extender client, to measure an extender the way production calls it.

Why: a driver that calls /filter -> /prioritize -> /bind and waits for each
bind (bench/bench_scheduling.py, "the extender alone") hides what happens
behind the real scheduler: its next /filter arrives before the previous
pod's /bind, a failed bind costs the pod a 1-10 s backoff, and a pod the
extender rejected waits for an event kube-scheduler considers relevant
(docs/design.md#how-kube-scheduler-calls-an-extender). Modelled on `pkg/scheduler/schedule_one.go`,
`extender.go`, `backend/queue/{scheduling_queue,backoff_queue,active_queue}.go`,
`framework/types.go` (UnrollWildCardResource) and `eventhandlers.go` of 1.36:

- one scheduling loop: pop from activeQ (priority, then time added); when
  activeQ is empty, pop the head of the backoffQ of rejected pods even if its
  backoff is not over (SchedulerPopFromBackoffQ, on by default; not the
  queue of pods that failed with an error);
- node sampling: numFeasibleNodesToFind (adaptive percentageOfNodesToScore
  50 - nodes/125 %, at least 5 %, at least 100 nodes, or a configured
  percentage) from a rotating nextStartNodeIndex; in-tree filters pass every
  node and in-tree scores are 0 (not modelled);
- POST /filter (nodeCacheCapable: ExtenderArgs {Pod, Nodes: null,
  NodeNames}); POST /prioritize unless one node is left (errors ignored:
  then the first feasible node wins), score x weight x 10, random pick among
  the top; assume; /bind (ExtenderBindingArgs) in a concurrent task per pod;
  httpTimeout (default 5 s) on every verb;
- failures: an extender Error, a transport error or a timeout is a
  scheduling error (error backoff queue); a pod the extender rejected on
  every node is unschedulable with plugin "Extender" (the PodScheduled=False
  condition is written, as the scheduler does); a failed bind forgets the
  assumption, moves every unschedulable pod (AssignedPodDelete) and sends
  the pod to the error backoff queue. Backoff 1 s doubling to 10 s, expiry
  aligned to 1 s windows, flushed every second;
- requeue of "Extender"-rejected pods (queueing hints on, the Extender's
  default hint: Queue) on Pod, Node, PV, PVC, CSINode, CSIDriver,
  CSIStorageCapacity, StorageClass, ResourceClaim and DeviceClass events
  (watched from the API server; kinds it does not serve are skipped), on any
  such event during the pod's own cycle, on the pod's own update, or by the
  5-minute flush (checked every 30 s) -- never on ResourceSlice or
  DeviceTaintRule events;
- a resourceclaim-controller stand-in: claims from templates after a delay,
  through a token bucket (kube-controller-manager's client: 20 qps, burst
  30; the default here is faster, see ClaimControllerConfig), then the pod's
  status.resourceClaimStatuses.

Modules, one job each: `config` (names, watched collections, the two
configurations), `api` (JSON client, informers), `queue` (activeQ, backoffQ,
unschedulable pods), `cycle` (`KubeSchedulerModel`: events, the scheduling
loop, one cycle, the bind), `claims` (the resourceclaim-controller
stand-in), `oracle` (did a rejected pod fit?), `workloads` (what a run
creates), `run` (`run_workload(Workload(...), extender_cmd=[...])`: the fake
API server, the extender and the model; tests/e2e use it), `driver` (a DRA
driver for binding conditions), `readings` (what a run measured), `stats`,
and `noop` (the reference extender, `python -m kubesim.scheduler.noop`).
`run_workload(..., nodra=True)` is the other reference, the ceiling: no
extender at all and the same pods without claims, the model writing each
Binding itself (as the DefaultBinder plugin does).
The benchmark that runs it and writes bench/results/ is
`python -m bench.kube_scheduler_model --help`.
"""

from __future__ import annotations

from kubesim.scheduler.config import ClaimControllerConfig, SchedulerConfig
from kubesim.scheduler.cycle import KubeSchedulerModel
from kubesim.scheduler.run import default_extender_cmd, run_workload
from kubesim.scheduler.workloads import DEFAULT_WORKLOADS, WORKLOADS, Workload

__all__ = [
    "DEFAULT_WORKLOADS",
    "WORKLOADS",
    "ClaimControllerConfig",
    "KubeSchedulerModel",
    "SchedulerConfig",
    "Workload",
    "default_extender_cmd",
    "run_workload",
]
