"""The plugin's views over a ClusterState: the same code the extender runs, on the admin's machine.

- `devices`: each published device with its effective taints (after rules
  and patches), where each comes from, who holds it, and which
  ResourceSlicePatch set which of its attributes and capacity.
- `explain_rule`: what a rule matches and whom NoExecute would evict, with
  the eviction controller's own plan and dry run (`effect: None` status).
- `why`: a pending pod's per-node reasons, from the extender's own
  Service.filter.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.allocation import Allocator
from allocator.features import Features
from allocator.types import EFFECT_NO_EXECUTE, EFFECT_NONE, DeviceID, DeviceTaint
from controllers.eviction.plan import DryRun, Ownership, dry_run, plan_evictions
from controllers.eviction.rule_checks import rule_problems
from controllers.eviction.rule_status import RuleCounts, condition, existing
from extender.service import build_service
from extender.wire import BadRequest, ExtenderArgs
from serving.metrics import Metrics
from tracker.clock import parse_time
from tracker.device_rows import device_row
from tracker.source import BindingSource
from tracker.state import ClusterState

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
        row = device_row(state, did)
        patched = state.queries.patched_by(did)
        rows.append(
            {
                "node": row.node or ("<all nodes>" if view.all_nodes else "<selected nodes>"),
                "driver": did.driver,
                "pool": did.pool,
                "device": did.device,
                "taints": [str(t) for t in view.taints],
                "sources": [source_label(s) for s in view.taint_sources],
                "allocatedTo": row.holder or "",
                "attributes": row.attributes,
                # Which ResourceSlicePatch set each attribute and capacity the view holds (or removed it).
                "patched": {kind: {n: p for (k, n), p in sorted(patched.items()) if k == kind} for kind in ("attributes", "capacity")},
                **row.sharing,
            }
        )
    return rows


@dataclass
class RuleExplanation:
    source: str
    effect: str
    devices: list[str]
    allocated: dict[str, str]  # device -> claim
    evicted: list[dict[str, Any]]  # pod, claims, due (epoch s, 0 = now), taints
    dry: DryRun
    message: str = field(default="")
    problems: list[str] = field(default_factory=list)  # kubectl_dra.rule_checks: invalid selectors, an unknown effect
    condition: dict[str, Any] | None = None  # the rule's own EvictionInProgress condition, as the controller wrote it
    generation: int = 0

    @property
    def acting(self) -> bool:
        """At NoExecute the rule's pods are being evicted: its real condition counts, not the hypothetical dry run."""
        return self.effect == EFFECT_NO_EXECUTE

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
            "dryRunMessage": None if self.acting else self.message,
            "problems": self.problems,
            "condition": self.condition,
        }


def explain_rule(state: ClusterState, group: str, name: str, status: Mapping[str, Any] | None = None) -> RuleExplanation | None:
    """What the rule matches and would evict; `status`: the rule's own, for its actual condition."""
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
    problems = rule_problems(state, rule)
    return RuleExplanation(
        source,
        rule.taint.effect,
        devices,
        dict(sorted(allocated.items())),
        evicted,
        dry,
        message,
        problems,
        existing(status),
        rule.meta.generation,
    )


async def why(state: ClusterState, source: BindingSource, raw_pod: dict[str, Any], features: Features) -> dict[str, str | None]:
    """node -> None when it fits, else the reason /filter gives, for every node the tracker knows.

    The extender's own Service answers, through the same `filter` the HTTP
    edge calls: claims, volume taints, binding conditions, DRA-backed
    extended resources, counters and capacity are judged by one code path.
    It runs `observe_only` (no deallocation of a failed binding) over a
    source that refuses writes, waits for nothing (no claim or placement
    wait) and looks at every node (no `--offer-nodes` cut-off). `features`
    are the gates the extender runs with: its cluster's minor's defaults.
    """
    service = build_service(
        state,
        source,
        Allocator(state.cel, features=features),
        Metrics(),
        claim_wait=0,
        placement_wait=0,
        offer_nodes=0,
        observe_only=True,
        features=features,
    )
    names = sorted(state.nodes)
    try:
        passed, failed = await service.filter(ExtenderArgs(raw_pod, names, None, None))
    except BadRequest as e:
        raise ValueError(f"the pod does not parse: {e}") from None
    out: dict[str, str | None] = {n: None for n in passed}
    out.update(failed)
    return {n: out.get(n, "not looked at by /filter") for n in names}
