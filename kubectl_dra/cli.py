"""`kubectl dra`: taint devices, see every device's effective taints, explain a rule, ask why a pod is pending.

Installed as the console script `kubectl-dra`, which kubectl runs for
`kubectl dra ...`. Views come from one list of each kind through the
extender's own tracker and allocator code (kubectl_dra/views.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kubectl_dra.cluster import MANAGED_BY, PLUGIN, ApiError, Cluster
from kubectl_dra.taint_spec import (
    EFFECTS,
    TaintSpec,
    TaintSyntaxError,
    parse_key_effect,
    parse_taint,
)
from tracker import events as ev
from tracker.resources import KIND_RESOURCES

EXAMPLES = {
    "taint": """examples:
  # Maintenance, safely: first see what NoExecute would evict (effect None evicts nothing)
  kubectl dra taint example.com/maintenance=planned:None --driver gpu.example.com --pool node-a --name node-a-maintenance
  kubectl dra explain-rule node-a-maintenance
  # then stop new allocations, then evict (same rule name: the effect is updated)
  kubectl dra taint example.com/maintenance=planned:NoExecute --driver gpu.example.com --pool node-a --name node-a-maintenance
  # every device of a class whose CEL selector matches, server-side dry run first
  kubectl dra taint example.com/ecc=high:NoSchedule --device-class gpu.example.com --selector 'device.attributes["gpu.example.com"].model == "a100"' --dry-run
  # an upstream resource.k8s.io rule (driver/pool/device only)
  kubectl dra taint example.com/broken:NoSchedule --upstream --driver gpu.example.com --device gpu-3
""",
    "untaint": """examples:
  kubectl dra untaint node-a-maintenance               # by rule name
  kubectl dra untaint example.com/maintenance:NoExecute --pool node-a
  kubectl dra untaint example.com/maintenance          # every kubectl-dra rule with this key
""",
    "devices": """examples:
  kubectl dra devices
  kubectl dra devices --node node-a --tainted
  kubectl dra devices -o json
""",
    "explain-rule": """examples:
  kubectl dra explain-rule node-a-maintenance
  kubectl dra explain-rule broken-gpu --upstream -o json
""",
    "why": """examples:
  kubectl dra why trainer
  kubectl dra why -n ml trainer -o json
""",
}


class UsageError(Exception):
    """Exit 2 with the message (bad arguments)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl dra",
        description="DRA device taints and scheduling views for clusters running dra-extender. "
        "Views are computed on this machine from the API objects, with the extender's own code.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="".join(EXAMPLES.values()),
    )
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("-n", "--namespace", help="namespace of the pod (why); default: the context's, else default")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name, help=help_, description=help_, epilog=EXAMPLES.get(name), formatter_class=argparse.RawDescriptionHelpFormatter
        )
        # kubectl's global flags also after the command (`kubectl dra why -n ml POD`).
        p.add_argument("--kubeconfig", metavar="PATH", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--context", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="namespace (why)" if name == "why" else argparse.SUPPRESS)
        return p

    taint = command("taint", "taint devices with a DeviceTaintRule (the project's CRD; --upstream: resource.k8s.io)")
    taint.add_argument("taint", metavar="KEY[=VALUE]:EFFECT", help=f"EFFECT: {', '.join(EFFECTS)}")
    _selector_flags(taint)
    taint.add_argument("--device-class", metavar="CLASS", help="only devices a DeviceClass selects (CRD only)")
    taint.add_argument("--selector", metavar="CEL", action="append", help="a CEL selector on the device; repeatable (CRD only)")
    taint.add_argument("--name", help="rule name (default: generated); an existing kubectl-dra rule of that name is updated")
    taint.add_argument("--upstream", action="store_true", help="create a resource.k8s.io DeviceTaintRule instead of the CRD's")
    taint.add_argument("--all-devices", action="store_true", help="allow no selector at all (every device) with NoExecute")
    taint.add_argument("--dry-run", action="store_true", help="server-side dry run; print the devices the rule would match")

    untaint = command("untaint", "delete kubectl-dra DeviceTaintRules by name or by taint key")
    untaint.add_argument("target", metavar="RULE-NAME|KEY[:EFFECT]")
    _selector_flags(untaint)
    untaint.add_argument("--upstream", action="store_true", help="resource.k8s.io rules instead of the CRD's")

    devices = command("devices", "every device with its effective taints, their source, and its allocation")
    devices.add_argument("--node", help="devices reachable from this node")
    devices.add_argument("--tainted", action="store_true", help="only devices with a taint")
    devices.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")

    explain = command("explain-rule", "devices a rule matches, their claims, and the pods NoExecute would evict")
    explain.add_argument("name", metavar="NAME")
    explain.add_argument("--upstream", action="store_true", help="a resource.k8s.io rule instead of the CRD's")
    explain.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")

    why = command("why", "why a pod is pending: the extender's per-node reasons, computed here")
    why.add_argument("pod", metavar="POD")
    why.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")

    completion = command("completion", "print a shell completion script (bash or zsh)")
    completion.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _selector_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--driver", help="device driver, e.g. gpu.example.com")
    p.add_argument("--pool", help="pool name (usually the node's)")
    p.add_argument("--device", help="device name within the pool")


# ---------------------------------------------------------------------------- taint / untaint


def rule_object(args: argparse.Namespace, spec: TaintSpec, api_version: str) -> dict[str, Any]:
    """The DeviceTaintRule `kubectl dra taint` creates; refuses selector flags the target API lacks."""
    selector: dict[str, Any] = {k: v for k, v in (("driver", args.driver), ("pool", args.pool), ("device", args.device)) if v}
    if args.upstream and (args.device_class or args.selector):
        raise UsageError("--upstream rules select by --driver, --pool and --device only (resource.k8s.io has no class or CEL selectors)")
    if args.device_class:
        selector["deviceClassName"] = args.device_class
    if args.selector:
        selector["selectors"] = [{"cel": {"expression": e}} for e in args.selector]
    if not selector and spec.effect == "NoExecute" and not args.all_devices:
        raise UsageError(
            "no selector (--driver, --pool, --device, --device-class, --selector) means every device, and NoExecute would "
            "evict every pod using DRA devices; pass --all-devices if that is what you want"
        )
    metadata: dict[str, Any] = {"labels": {MANAGED_BY: PLUGIN}}
    if args.name:
        metadata["name"] = args.name
    else:
        metadata["generateName"] = "kubectl-dra-"
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": metadata,
        "spec": {"deviceSelector": selector, "taint": spec.to_api()},
    }


async def cmd_taint(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    spec = parse_taint(args.taint)
    res = await cluster.rule_resource(args.upstream)
    obj = rule_object(args, spec, f"{res.group}/{res.version}")
    query = {"dryRun": "All"} if args.dry_run else None
    existing = await _get(cluster, res.item("", args.name)) if args.name else None
    if existing is not None:
        if (existing["metadata"].get("labels") or {}).get(MANAGED_BY) != PLUGIN:
            raise UsageError(f"DeviceTaintRule {args.name} exists and is not managed by kubectl-dra; choose another --name")
        old = (existing.get("spec") or {}).get("taint") or {}
        if old.get("effect") == spec.effect and old.get("timeAdded"):
            obj["spec"]["taint"]["timeAdded"] = old["timeAdded"]  # same effect: its clock goes on; a new one restarts it
        existing["spec"] = obj["spec"]
        written = await cluster.call("PUT", res.item("", args.name), query=query, body=existing)
        verb = "configured"
    else:
        written = await cluster.call("POST", res.collection(), query=query, body=obj)
        verb = "created"
    name = written["metadata"]["name"]
    out(f"devicetaintrule.{res.group}/{name} {verb}{' (server dry run)' if args.dry_run else ''}")
    if args.dry_run:
        from kubectl_dra.views import explain_rule

        state = await cluster.snapshot()
        written.setdefault("apiVersion", f"{res.group}/{res.version}")
        written.setdefault("kind", "DeviceTaintRule")
        state.apply(ev.ObjectEvent("ADDED", ev.DEVICE_TAINT_RULE, res.group, name, written))
        explained = explain_rule(state, res.group, name)
        if explained is not None:
            out(f"matches {len(explained.devices)} device(s):")
            for d in explained.devices:
                out(f"  {d}{'  allocated to ' + explained.allocated[d] if d in explained.allocated else ''}")
            out(f"as NoExecute: {explained.dry.pods} pod(s) in {explained.dry.namespaces} namespace(s) would be evicted")
    return 0


async def _get(cluster: Cluster, path: str) -> dict[str, Any] | None:
    try:
        return await cluster.call("GET", path)
    except ApiError as e:
        if e.status == 404:
            return None
        raise


async def cmd_untaint(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    res = await cluster.rule_resource(args.upstream)
    managed = await cluster.list(res, label_selector=f"{MANAGED_BY}={PLUGIN}")
    by_name = {r["metadata"]["name"]: r for r in managed}
    if args.target in by_name and not (args.driver or args.pool or args.device):
        chosen = [by_name[args.target]]
    else:
        try:
            key, effect = parse_key_effect(args.target)
        except TaintSyntaxError as e:
            if await _get(cluster, res.item("", args.target)) is not None:
                raise UsageError(
                    f"DeviceTaintRule {args.target} is not managed by kubectl-dra (label {MANAGED_BY}={PLUGIN}); delete it with kubectl"
                ) from None
            raise UsageError(f"no kubectl-dra rule named {args.target!r}, and not a taint: {e}") from None
        chosen = []
        for r in managed:
            spec = r.get("spec") or {}
            taint, sel = spec.get("taint") or {}, spec.get("deviceSelector") or {}
            if taint.get("key") != key or (effect is not None and taint.get("effect") != effect):
                continue
            if any(want and sel.get(f) != want for f, want in (("driver", args.driver), ("pool", args.pool), ("device", args.device))):
                continue
            chosen.append(r)
    if not chosen:
        if await _get(cluster, res.item("", args.target)) is not None:
            raise UsageError(
                f"DeviceTaintRule {args.target} is not managed by kubectl-dra (label {MANAGED_BY}={PLUGIN}); delete it with kubectl"
            )
        out(f"no DeviceTaintRule managed by kubectl-dra matches {args.target!r}")
        return 1
    for r in chosen:
        name = r["metadata"]["name"]
        await cluster.call("DELETE", res.item("", name))
        out(f"devicetaintrule.{res.group}/{name} deleted")
    return 0


# ---------------------------------------------------------------------------- views


def _table(rows: list[list[str]], out: Callable[[str], None]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _dump(data: Any, fmt: str, out: Callable[[str], None]) -> None:
    out(json.dumps(data, indent=2, default=str) if fmt == "json" else yaml.safe_dump(data, sort_keys=False).rstrip())


async def cmd_devices(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kubectl_dra.views import device_rows

    rows = device_rows(await cluster.snapshot(), node=args.node, tainted=args.tainted)
    if args.output in ("json", "yaml"):
        _dump(rows, args.output, out)
        return 0
    if not rows:
        out("No devices found.")
        return 0
    head = ["NODE", "DRIVER", "POOL", "DEVICE", "TAINTS", "SOURCES", "ALLOCATED-TO"]
    if args.output == "wide":
        head += ["COUNTERS-LEFT", "CAPACITY-LEFT", "ATTRIBUTES"]
    table = [head]
    for r in rows:
        line = [
            r["node"],
            r["driver"],
            r["pool"],
            r["device"],
            ",".join(r["taints"]) or "<none>",
            ",".join(r["sources"]) or "<none>",
            r["allocatedTo"] or "<none>",
        ]
        if args.output == "wide":
            left = r.get("countersLeft") or {}
            line.append(",".join(f"{cs}/{k}={v}" for cs, counters in left.items() for k, v in counters.items()) or "<none>")
            line.append(",".join(f"{k.rpartition('/')[2]}={v}" for k, v in (r.get("capacityLeft") or {}).items()) or "<none>")
            line.append(",".join(f"{k}={v}" for k, v in r["attributes"].items()))
        table.append(line)
    _table(table, out)
    return 0


async def cmd_explain(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kubectl_dra.views import explain_rule

    res = await cluster.rule_resource(args.upstream)
    explained = explain_rule(await cluster.snapshot(), res.group, args.name)
    if explained is None:
        out(f"Error: DeviceTaintRule {args.name} ({res.group}) not found{'' if args.upstream else '; an upstream rule? add --upstream'}")
        return 1
    if args.output != "text":
        _dump(explained.to_json(), args.output, out)
        return 0
    d = explained.dry
    out(f"Rule:       {args.name} ({res.group}), effect {explained.effect}")
    out(f"Devices:    {d.published_devices} published, {d.allocated_devices} allocated")
    for dev in explained.devices:
        out(f"  {dev}{'  -> ' + explained.allocated[dev] if dev in explained.allocated else ''}")
    out(f"As NoExecute it would evict {d.pods} pod(s) in {d.namespaces} namespace(s):")
    for p in explained.evicted:
        due = "now" if p["due"] <= 0 else datetime.fromtimestamp(p["due"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out(f"  {p['pod']}  claims {', '.join(p['claims'])}  due {due}  ({', '.join(p['taints'])})")
    out(f"Dry run:    {explained.message}")
    return 0


def _default_namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return args.namespace
    path = args.kubeconfig or (os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    current = args.context or config.get("current-context")
    for c in config.get("contexts") or []:
        if c.get("name") == current:
            return (c.get("context") or {}).get("namespace") or "default"
    return "default"


async def cmd_why(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kubectl_dra.views import why

    namespace = _default_namespace(args)
    raw = await _get(cluster, KIND_RESOURCES[ev.POD].item(namespace, args.pod))
    if raw is None:
        out(f'Error: pod "{args.pod}" not found in namespace {namespace}')
        return 1
    state = await cluster.snapshot()
    reasons = why(state, raw)
    if args.output != "table":
        _dump({"pod": f"{namespace}/{args.pod}", "nodes": reasons}, args.output, out)
        return 0
    node_name = (raw.get("spec") or {}).get("nodeName")
    if node_name:
        out(f"pod {namespace}/{args.pod} is bound to {node_name}; the reasons below are what a new pod like it would get")
    if not (raw.get("spec") or {}).get("resourceClaims"):
        out(f"pod {namespace}/{args.pod} has no resource claims: the extender passes every node")
    fits = sorted(n for n, r in reasons.items() if r is None)
    out(f"{len(fits)} of {len(reasons)} nodes fit{': ' + ', '.join(fits) if fits else ''}")
    rows = [["NODE", "REASON"]] + [[n, r] for n, r in sorted(reasons.items()) if r is not None]
    if len(rows) > 1:
        _table(rows, out)
    return 0


# ---------------------------------------------------------------------------- completion

COMMANDS = ("taint", "untaint", "devices", "explain-rule", "why", "completion")


def completions(words: Sequence[str]) -> list[str]:
    """Candidates for the last word, given the words after `kubectl dra` (used by both completion paths)."""
    parser = build_parser()
    current = words[-1] if words else ""
    before = list(words[:-1])
    command = next((w for w in before if w in COMMANDS), None)
    if command is None:
        options = [*COMMANDS, "--kubeconfig", "--context", "--namespace"]
    else:
        sub = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == command)[1]  # type: ignore[union-attr]
        options = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]
        if before and before[-1] in ("-o", "--output"):
            options = [c for a in sub._actions if "--output" in a.option_strings for c in a.choices or ()]
        if command == "completion":
            options = ["bash", "zsh"]
        if current.count(":") == 1 and command == "taint":
            options = [current.partition(":")[0] + ":" + e for e in EFFECTS]
    return [o for o in options if o.startswith(current)]


BASH = """# kubectl dra completion; source it: source <(kubectl-dra completion bash)
_kubectl_dra() {
    local IFS=$'\\n'
    COMPREPLY=($(kubectl-dra __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -F _kubectl_dra kubectl-dra
"""
ZSH = """#compdef kubectl-dra
# kubectl dra completion; source it: source <(kubectl-dra completion zsh)
_kubectl_dra() {
    local -a candidates
    candidates=(${(f)"$(kubectl-dra __complete ${words[2,CURRENT]} 2>/dev/null)"})
    compadd -a candidates
}
compdef _kubectl_dra kubectl-dra
"""


def complete_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl_complete-dra`: kubectl (1.26+) asks it for `kubectl dra <TAB>` candidates, cobra style."""
    words = list(sys.argv[1:] if argv is None else argv)
    for c in completions(words):
        print(c)
    print(":4")  # ShellCompDirectiveNoFileComp
    return 0


# ---------------------------------------------------------------------------- main

HANDLERS: dict[str, Callable[[Cluster, argparse.Namespace, Callable[[str], None]], Awaitable[int]]] = {
    "taint": cmd_taint,
    "untaint": cmd_untaint,
    "devices": cmd_devices,
    "explain-rule": cmd_explain,
    "why": cmd_why,
}


async def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    if args.command == "taint":
        parse_taint(args.taint)  # syntax errors before any request
    cluster = Cluster(kubeconfig=args.kubeconfig, context=args.context)
    try:
        return await HANDLERS[args.command](cluster, args, out)
    finally:
        await cluster.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["__complete"]:
        for c in completions(argv[1:]):
            print(c)
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        print(BASH if args.shell == "bash" else ZSH, end="")
        return 0
    try:
        return asyncio.run(run(args))
    except (TaintSyntaxError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ApiError as e:
        print(f"Error from server: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"error: {e} (no kubeconfig? pass --kubeconfig or set KUBECONFIG)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
