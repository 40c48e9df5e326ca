"""The plugin's views over a ClusterState: the same code the extender runs, on the admin's machine.

- `devices`: each published device with its effective taints (after rules
  and patches), where each comes from, and who holds it.
- `explain_rule`: what a rule matches and whom NoExecute would evict, with
  the eviction controller's own plan and dry run (`effect: None` status).
- `why`: a pending pod's per-node reasons from the outcome cache /filter
  answers with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from allocator.allocation import Allocator
from allocator.extended_resources import claims_per_node
from allocator.parse import ValidationError, parse_pod
from allocator.types import EFFECT_NONE, DeviceID, DeviceTaint, Node
from extender.eviction.clock import parse_time
from extender.eviction.plan import DryRun, Ownership, dry_run, plan_evictions
from extender.eviction.rule_status import RuleCounts, condition
from extender.outcomes import OutcomeCache
from tracker.state import ClusterState
from tracker.volumes import has_pvc_volumes, pod_volume_verdict

SLICE_SOURCE = "slice"


def _taint_time(_did: DeviceID, taint: DeviceTaint, _source: str) -> float:
    """timeAdded as epoch seconds; a taint without one counts from now (the controller's first sight)."""
    return parse_time(taint.time_added) or time.time()


def source_label(source: str) -> str:
    """`slice` or `DeviceTaintRule/<group>/<name>` as a short column value."""
    if source.startswith("DeviceTaintRule/"):
        _, group, name = source.split("/", 2)
        return f"rule/{name}" if group == "resource.dra-extender.io" else f"rule.{group}/{name}"
    return source


def device_rows(state: ClusterState, *, node: str | None = None, tainted: bool = False) -> list[dict[str, Any]]:
    rows = []
    for did, view in sorted(state.devices.items(), key=lambda kv: (kv[1].node_name or "", str(kv[0]))):
        if node is not None and not (
            view.node_name == node or (view.node_name is None and (n := state.node(node)) is not None and view.reachable_from(n))
        ):
            continue
        if tainted and not view.taints:
            continue
        rows.append(
            {
                "node": view.node_name or ("<all nodes>" if view.all_nodes else "<selected nodes>"),
                "driver": did.driver,
                "pool": did.pool,
                "device": did.device,
                "taints": [str(t) for t in view.taints],
                "sources": [source_label(s) for s in view.taint_sources],
                "allocatedTo": state.holder(did) or "",
                "attributes": {k: _plain(v) for k, v in sorted(view.attributes.items())},
                **state.sharing(did),
            }
        )
    return rows


def _plain(value: Any) -> Any:
    for attr in ("value", "string", "int", "bool", "version"):
        v = getattr(value, attr, None)
        if v is not None:
            return v
    return str(value)


@dataclass
class RuleExplanation:
    source: str
    effect: str
    devices: list[str]
    allocated: dict[str, str]  # device -> claim
    evicted: list[dict[str, Any]]  # pod, claims, due (epoch s, 0 = now), taints
    dry: DryRun
    message: str = field(default="")

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.source,
            "effect": self.effect,
            "devices": self.devices,
            "allocatedDevices": self.allocated,
            "podsToEvict": self.evicted,
            "counts": {
                "publishedDevices": self.dry.published_devices,
                "allocatedDevices": self.dry.allocated_devices,
                "pods": self.dry.pods,
                "namespaces": self.dry.namespaces,
            },
            "dryRunMessage": self.message,
        }


def explain_rule(state: ClusterState, group: str, name: str) -> RuleExplanation | None:
    rule = state.rules.get((group, name))
    if rule is None:
        return None
    source = rule.source
    devices = sorted(str(did) for did, view in state.devices.items() if source in view.taint_sources)
    allocated = {}
    for did, claim in state.allocated.items():
        view = state.device(did)
        if view is not None and source in view.taint_sources:
            allocated[str(did)] = claim
    plan = plan_evictions(state, Ownership(evict_upstream=True), _taint_time, simulate=source)
    evicted = [
        {"pod": p.key, "claims": list(p.claims), "due": p.due, "taints": sorted({str(r.taint) for r in p.reasons})}
        for p in sorted(plan.values(), key=lambda p: p.key)
    ]
    dry = dry_run(state, source, _taint_time)
    message = condition(EFFECT_NONE, RuleCounts(), dry, rule.meta.generation)["message"]
    return RuleExplanation(source, rule.taint.effect, devices, dict(sorted(allocated.items())), evicted, dry, message)


def why(state: ClusterState, raw_pod: dict[str, Any]) -> dict[str, str | None]:
    """node -> None when it fits, else the reason /filter would give (all nodes the tracker knows)."""
    names = sorted(state.nodes)
    spec = raw_pod.get("spec") or {}
    volume = pod_volume_verdict(state.volumes, raw_pod) if has_pvc_volumes(raw_pod) else None
    try:
        pod = parse_pod(raw_pod)
    except ValidationError as e:
        raise ValueError(f"the pod does not parse: {e}") from None
    if not spec.get("resourceClaims") and not pod.containers:
        return {n: (volume.message if volume is not None else None) for n in names}
    claims, problem = state.pod_claims(pod)
    if problem is None and volume is not None:
        problem = volume.message
    if problem is not None:
        return {n: problem for n in names}
    cache = OutcomeCache(state, Allocator(state.cel))
    out: dict[str, str | None] = {}
    # DRA-backed extended resources: the claim /bind would make, per group of nodes (allocator.extended_resources).
    for group_claims, group in claims_per_node(pod, claims, state.classes, [state.nodes.get(n) or Node(n) for n in names]):
        nodes = [(state.nodes.get(n) or Node(n), None) for n in group]
        verdicts = cache.verdicts(cache.signature(group_claims), group_claims, nodes)
        out.update({n: (None if o.failure is None else o.failure.message) for n, o in zip(group, verdicts, strict=True)})
    return {n: out[n] for n in names}
