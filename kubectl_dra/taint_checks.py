"""Before `kubectl dra taint` writes: a rule that matches no device now, or whose selector fails at run time, is refused.

A typo in `--pool` or an attribute name (`.modle`) makes a rule that the API
server accepts and that taints nothing: the drain the operator asked for
silently does not happen. The rule is tried on this machine first, in the
tracker the extender runs (the same view building, the same CEL engine), and
refused with what matched nothing; `--allow-empty` creates it anyway (for
devices a driver will publish later).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from typing import Any

from allocator.types import DeviceID
from tracker import events as ev
from tracker.state import ClusterState

PROBE_NAME = "kubectl-dra-probe"  # the name a rule without --name is tried under (generateName gives it one later)


def refusal(state: ClusterState, group: str, rule: dict[str, Any], args: argparse.Namespace) -> str | None:
    """Why the rule must not be written as it stands (a usage error), or None; `state` gets the rule applied."""
    obj = copy.deepcopy(rule)
    name = obj["metadata"].get("name") or PROBE_NAME
    obj["metadata"]["name"] = name
    state.apply(ev.ObjectEvent("MODIFIED" if (group, name) in state.rules else "ADDED", ev.DEVICE_TAINT_RULE, group, name, obj))
    parsed = state.rules.get((group, name))
    if parsed is None:
        return None  # the tracker refused it as invalid: the API server will say why
    failed = state.problem_of(ev.DEVICE_TAINT_RULE, group, name)
    if failed is not None and args.selector:
        # As a selector that does not compile is refused (rule_checks.selector_errors): the same words, at run time.
        return f"--selector fails at run time: {failed} (the extender would not taint a device it fails for)"
    if args.allow_empty or any(parsed.source in view.taint_sources for view in state.devices.values()):
        return None
    return f"the rule would taint no device: {what_matched_nothing(state, args, failed)}; pass --allow-empty to create it anyway"


_PARTS: tuple[tuple[str, str, Callable[[DeviceID], str]], ...] = (
    ("--driver", "driver", lambda d: d.driver),
    ("--pool", "pool", lambda d: d.pool),
    ("--device", "device", lambda d: d.device),
)


def what_matched_nothing(state: ClusterState, args: argparse.Namespace, failed: str | None) -> str:
    """The first selector flag that leaves no published device, with what there is instead."""
    chosen = list(state.devices)
    if not chosen:
        return "the cluster publishes no device (no ResourceSlice)"
    said: list[str] = []
    for flag, attr, part in _PARTS:
        want = getattr(args, attr)
        if want is None:
            continue
        left = [d for d in chosen if part(d) == want]
        if not left:
            have = sorted({part(d) for d in chosen})
            listed = ", ".join(have[:10]) + (f", ... ({len(have)} in all)" if len(have) > 10 else "")
            of = f" with {' '.join(said)}" if said else ""
            return f"{flag} {want} matches no published device{of} (there are: {listed})"
        chosen = left
        said.append(f"{flag} {want}")
    flags = [f for f, given in (("--device-class", args.device_class), ("--selector", args.selector)) if given]
    scope = " ".join(said) if said else "published"
    why = f" ({failed})" if failed else ""
    return f"{' and '.join(flags) or 'the selector'} select none of the {len(chosen)} device(s) {scope}{why}"
