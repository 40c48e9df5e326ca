"""`kubectl dra health`: the devices DeviceHealthPolicies hold, read from their DeviceTaintRules.

Each failing device's ladder state lives in its rule's annotation
(controllers/health/rules.py), so this view needs nothing but the API: device,
policy, rule, the effect it holds, since when, the cause, and when it clears
(the hold-down after its last signal resolved, from the policy). Below the
devices, each policy's rules with the guard in force and the alerts that
named no device of theirs, and the policies the controller cannot act on,
marked invalid.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from controllers.health.ladder import effect_of
from controllers.health.policy import POLICIES, Policy, PolicyError, parse_policy
from controllers.health.rules import POLICY_LABEL, Owned, decode, label_value
from kubectl_dra.cluster import Cluster
from tracker.clock import format_time
from tracker.resources import OWN_RULES


def add_parser(command: Callable[[str, str], argparse.ArgumentParser], output_flag: Callable[[argparse.ArgumentParser], None]) -> None:
    health = command("health", "devices that DeviceHealthPolicies hold: policy, rule, effect, since, cause, when they clear")
    health.add_argument("--policy", metavar="NAME", help="only this policy (with -o yaml/json: the policy, its status and its devices)")
    output_flag(health)


def _clears(policy: Policy | None, rule: str, owned: Owned) -> str:
    if owned.pinned:
        return "pinned"
    if owned.state.firing:
        return "while firing"
    r = next((r for r in policy.rules if r.name == rule), None) if policy is not None else None
    if r is None or owned.state.resolved_at is None:
        return "unknown"
    return format_time(owned.state.resolved_at + r.clear_after)


def invalid(obj: dict[str, Any]) -> str | None:
    """Why the controller cannot act on the policy: a faulty field here, or its Ready=False Invalid condition
    (a selector that does not compile or fails at run time, which only the controller sees) for this generation."""
    try:
        parse_policy(obj)
    except PolicyError as e:
        return str(e)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != (obj.get("metadata") or {}).get("generation"):
        return None
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "False" and c.get("reason") == "Invalid":
            return str(c.get("message") or "invalid")
    return None


def policy_rows(policies: dict[str, dict[str, Any]], only: str | None) -> list[list[str]]:
    """POLICY, MODE, RULE, GUARD, UNMATCHED per rule; an invalid policy is one row saying why."""
    out = []
    for name, obj in sorted(policies.items()):
        if only is not None and name != only:
            continue
        why = invalid(obj)
        if why is not None:
            out.append([name, "INVALID", "-", why, "-"])
            continue
        p = parse_policy(obj)
        for r in p.rules:
            guard = "- (no NoExecute step)" if r.guard_origin == "unused" else f"{r.guard_origin}: {r.guard.describe()}"
            out.append([name, p.mode, r.name, guard, unmatched(obj, r.name)])
    return out


def unmatched(obj: dict[str, Any], rule: str) -> str:
    """The alerts of the rule that named no device, as the controller counted them: how many, and why the last did not match."""
    for entry in (obj.get("status") or {}).get("rules") or ():
        if isinstance(entry, dict) and entry.get("name") == rule:
            count = entry.get("unmatchedAlerts") or 0
            last = entry.get("lastUnmatched") or {}
            if not count:
                return "0"
            return f"{count} (last {last.get('time', '?')}: {last.get('reason', '?')})" if last else str(count)
    return "0"


def rows(policies: dict[str, dict[str, Any]], rules: list[dict[str, Any]], only: str | None) -> list[dict[str, Any]]:
    parsed: dict[str, Policy | None] = {}
    for name, obj in policies.items():
        try:
            parsed[label_value(name)] = parse_policy(obj)
        except PolicyError:
            parsed[label_value(name)] = None
    out = []
    for obj in rules:
        owned = decode(obj)
        if owned is None:
            continue
        policy = parsed.get(owned.policy)
        name = policy.name if policy is not None else owned.policy
        if only is not None and name != only:
            continue
        rule = next((r for r in policy.rules if label_value(r.name) == owned.rule), None) if policy is not None else None
        out.append(
            {
                "device": f"{owned.did.driver}/{owned.did.pool}/{owned.did.device}",
                "node": owned.node,
                "policy": name,
                "rule": rule.name if rule is not None else owned.rule,
                "step": effect_of(rule, owned.state.step) if rule is not None else owned.effect,
                "effect": owned.effect,
                "since": format_time(owned.state.first_seen),
                "cause": owned.state.cause,
                "firing": sorted(owned.state.active),
                "clears": _clears(policy, rule.name if rule is not None else "", owned),
                "deviceTaintRule": owned.name,
            }
        )
    return sorted(out, key=lambda r: (r["policy"], r["rule"], r["device"]))


async def cmd_health(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kubectl_dra.cli import UsageError, _dump, _table

    policies = {p["metadata"]["name"]: p for p in await cluster.list(POLICIES)}
    if args.policy is not None and args.policy not in policies:
        raise UsageError(f"DeviceHealthPolicy {args.policy!r} not found")
    devices = rows(policies, await cluster.list(OWN_RULES, label_selector=POLICY_LABEL), args.policy)
    # An invalid policy named by --policy is an error: it holds what it held, and acts on nothing.
    code = 1 if args.policy is not None and invalid(policies[args.policy]) is not None else 0
    if args.output in ("json", "yaml"):
        if args.policy is not None:
            p = policies[args.policy]
            doc: dict[str, Any] = {"policy": {"metadata": {"name": args.policy}, "spec": p.get("spec"), "status": p.get("status")}}
            if code:
                doc["invalid"] = invalid(p)
            _dump({**doc, "devices": devices}, args.output, out)
        else:
            _dump(devices, args.output, out)
        return code
    if args.output == "name":
        for r in devices:
            out(r["device"])
        return code
    bad = {name for name, obj in policies.items() if invalid(obj) is not None}
    if not devices:
        out("No devices held by a DeviceHealthPolicy.")
    else:
        table = [["DEVICE", "NODE", "POLICY", "RULE", "STEP", "SINCE", "CAUSE", "CLEARS"]]
        for r in devices:
            step = r["step"] if r["step"] == r["effect"] else f"{r['step']} (dry run: {r['effect']})"
            policy = f"{r['policy']} (INVALID)" if r["policy"] in bad else r["policy"]
            table.append([r["device"], r["node"] or "<none>", policy, r["rule"], step, r["since"], r["cause"] or "<none>", r["clears"]])
        _table(table, out)
    guards = policy_rows(policies, args.policy)
    if guards:
        out("")
        _table([["POLICY", "MODE", "RULE", "GUARD", "UNMATCHED"], *guards], out)
    if code:
        out(f"DeviceHealthPolicy {args.policy!r} is invalid: {invalid(policies[args.policy])}")
    return code
