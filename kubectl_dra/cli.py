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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from allocator.extended_resources import class_mapping
from allocator.features import DEFAULT_FEATURES, defaults_for
from allocator.parse import parse_pod
from allocator.pod_claims import dra_use
from kubectl_dra.cluster import MANAGED_BY, PLUGIN, ApiError, Cluster, NotServed, ReadOnlySource
from kubectl_dra.health import cmd_health
from kubectl_dra.taint_spec import (
    EFFECTS,
    TaintSpec,
    TaintSyntaxError,
    parse_key_effect,
    parse_taint,
)
from tracker import events as ev
from tracker.resources import EVENTS, KIND_RESOURCES
from tracker.timestamps import rfc3339

if TYPE_CHECKING:
    from kubectl_dra.views import RuleExplanation
    from tracker.state import ClusterState

EXAMPLES = {
    "taint": """examples:
  # Maintenance, safely: first see what NoExecute would evict (effect None evicts nothing)
  kubectl dra taint example.com/maintenance=planned:None --driver gpu.example.com --pool node-a --name node-a-maintenance
  kubectl dra explain-rule node-a-maintenance
  # then stop new allocations, then evict (same rule name: the effect is updated)
  kubectl dra taint example.com/maintenance=planned:NoExecute --driver gpu.example.com --pool node-a --name node-a-maintenance
  # every device of a class whose CEL selector matches, server-side dry run first
  kubectl dra taint example.com/ecc=high:NoSchedule --device-class gpu.example.com --selector 'device.attributes["gpu.example.com"].model == "a100"' --name ecc-a100 --dry-run=server
  # an upstream resource.k8s.io rule (driver/pool/device only)
  kubectl dra taint example.com/broken:NoSchedule --upstream --driver gpu.example.com --pool node-b --device gpu-1 --name broken-gpu
""",
    "untaint": """examples:
  kubectl dra untaint node-a-maintenance               # by rule name
  kubectl dra untaint example.com/maintenance:NoExecute --pool node-a
  kubectl dra untaint example.com/maintenance          # every kubectl-dra rule with this key
  kubectl dra untaint node-a-maintenance --ignore-not-found   # in scripts: gone already is fine
""",
    "devices": """examples:
  kubectl dra devices
  kubectl dra devices --node node-a --tainted
  kubectl dra devices -o json
  kubectl dra devices --tainted -o name        # driver/pool/device, one a line
""",
    "explain-rule": """examples:
  kubectl dra explain-rule node-a-maintenance
  kubectl dra explain-rule broken-gpu --upstream -o json
""",
    "why": """examples:
  kubectl dra why trainer
  kubectl dra why -n ml trainer -o json
""",
    "health": """examples:
  # Devices that DeviceHealthPolicies hold: rung, since, cause, when they clear
  kubectl dra health
  # One policy: its spec, its status (devices per step, guard, unmatched alerts) and its devices
  kubectl dra health --policy gpu-health -o yaml
""",
    "completion": """examples:
  source <(kubectl-dra completion bash)     # kubectl-dra <TAB>, bash
  source <(kubectl-dra completion zsh)      # kubectl-dra <TAB>, zsh
kubectl itself (1.26+) completes `kubectl dra <TAB>` through the executable
kubectl_complete-dra, installed with kubectl-dra: keep both on PATH and
kubectl's own completion (source <(kubectl completion bash)) covers the plugin,
pod names for `why` included.
""",
}

# One -o vocabulary for every verb, as kubectl's.
OUTPUTS = ("table", "wide", "json", "yaml", "name")
DRY_RUN = ("none", "client", "server")


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
    _global_flags(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name, help=help_, description=help_, epilog=EXAMPLES.get(name), formatter_class=argparse.RawDescriptionHelpFormatter
        )
        # kubectl's global flags also after the command (`kubectl dra why -n ml POD`), and in its help.
        _global_flags(p.add_argument_group("global flags (also before the command)"), argparse.SUPPRESS)
        return p

    taint = command("taint", "taint devices with a DeviceTaintRule (the project's CRD; --upstream: resource.k8s.io)")
    taint.add_argument("taint", metavar="KEY[=VALUE]:EFFECT", help=f"EFFECT: {', '.join(EFFECTS)}")
    _selector_flags(taint)
    taint.add_argument("--device-class", metavar="CLASS", help="only devices a DeviceClass selects (CRD only)")
    taint.add_argument("--selector", metavar="CEL", action="append", help="a CEL selector on the device; repeatable (CRD only)")
    taint.add_argument("--name", help="rule name (default: generated); an existing kubectl-dra rule of that name is updated")
    taint.add_argument("--upstream", action="store_true", help="create a resource.k8s.io DeviceTaintRule instead of the CRD's")
    taint.add_argument("--all-devices", action="store_true", help="allow no selector at all (every device) with NoExecute")
    taint.add_argument(
        "--allow-empty", action="store_true", help="create the rule even if it matches no device now (default: refused, exit 2)"
    )
    _dry_run_flag(taint, "client: print the rule without sending it; server: the API server validates it without storing it")
    _output_flag(taint)

    untaint = command("untaint", "delete kubectl-dra DeviceTaintRules by name or by taint key")
    untaint.add_argument("target", metavar="RULE-NAME|KEY[:EFFECT]")
    _selector_flags(untaint)
    untaint.add_argument("--upstream", action="store_true", help="resource.k8s.io rules instead of the CRD's")
    untaint.add_argument("--ignore-not-found", action="store_true", help="exit 0 when no rule matches (default: exit 1)")
    _dry_run_flag(untaint, "client: print what would be deleted; server: the API server checks the deletions without doing them")
    _output_flag(untaint)

    devices = command("devices", "every device with its effective taints, their source, and its allocation")
    devices.add_argument("--node", help="devices reachable from this node")
    devices.add_argument("--tainted", action="store_true", help="only devices with a taint")
    _output_flag(devices)

    explain = command("explain-rule", "devices a rule matches, their claims, and the pods NoExecute would evict")
    explain.add_argument("name", metavar="NAME")
    explain.add_argument("--upstream", action="store_true", help="a resource.k8s.io rule instead of the CRD's")
    _output_flag(explain)

    why = command("why", "why a pod is pending: the extender's /filter answer per node, computed here by its own code")
    why.add_argument("pod", metavar="POD")
    why.add_argument(
        "--scheduler-name",
        default="dra-scheduler",
        metavar="NAME",
        help="the kube-scheduler profile that calls the extender (the chart's schedulerName; default %(default)s)",
    )
    _output_flag(why)

    from kubectl_dra.health import add_parser as add_health_parser

    add_health_parser(command, _output_flag)

    completion = command("completion", "print a shell completion script (bash or zsh); kubectl's own completion uses kubectl_complete-dra")
    completion.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _global_flags(p: argparse._ActionsContainer, default: str | None) -> None:
    """--kubeconfig, --context, -n: before the command (defaults) and after it (SUPPRESS: the earlier value stays)."""
    p.add_argument("--kubeconfig", metavar="PATH", default=default, help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", default=default, help="kubeconfig context (default: its current-context)")
    p.add_argument("-n", "--namespace", default=default, help="namespace of the pod (why); default: the context's, else default")


def _output_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format: %(choices)s (default %(default)s)")


def _dry_run_flag(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("--dry-run", choices=DRY_RUN, default="none", help=f"none, client or server, as kubectl's; {help_} (default none)")


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


_DRY_SUFFIX = {"none": "", "client": " (dry run)", "server": " (server dry run)"}


def _report_written(obj: dict[str, Any], group: str, verb: str, args: argparse.Namespace, out: Callable[[str], None]) -> None:
    """One written (or dry-run) object in the -o format: `devicetaintrule.GROUP/NAME VERB` for table and wide, as kubectl's."""
    ref = f"devicetaintrule.{group}/{obj['metadata'].get('name') or obj['metadata'].get('generateName', '') + '<generated>'}"
    if args.output == "name":
        out(ref)
    elif args.output in ("json", "yaml"):
        _dump(obj, args.output, out)
    else:
        out(f"{ref} {verb}{_DRY_SUFFIX[args.dry_run]}")


async def cmd_taint(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    spec = parse_taint(args.taint)
    res = await cluster.rule_resource(args.upstream)
    obj = rule_object(args, spec, f"{res.group}/{res.version}")
    if (
        args.device_class
        and args.dry_run != "client"
        and await _get(cluster, KIND_RESOURCES[ev.DEVICE_CLASS].item("", args.device_class)) is None
    ):
        raise UsageError(f"--device-class {args.device_class}: no such DeviceClass (the rule would taint no device)")
    from kubectl_dra.taint_checks import refusal

    refused = refusal(await cluster.snapshot(), res.group, obj, args)
    if refused is not None:
        raise UsageError(refused)
    query = {"dryRun": "All"} if args.dry_run == "server" else None
    existing = await _get(cluster, res.item("", args.name)) if args.name else None
    if existing is not None:
        if (existing["metadata"].get("labels") or {}).get(MANAGED_BY) != PLUGIN:
            raise UsageError(f"DeviceTaintRule {args.name} exists and is not managed by kubectl-dra; choose another --name")
        old = (existing.get("spec") or {}).get("taint") or {}
        if old.get("effect") == spec.effect and old.get("timeAdded"):
            obj["spec"]["taint"]["timeAdded"] = old["timeAdded"]  # same effect: its clock goes on; a new one restarts it
        existing["spec"] = obj["spec"]
        verb = "configured"
        written = existing if args.dry_run == "client" else await cluster.call("PUT", res.item("", args.name), query=query, body=existing)
    else:
        verb = "created"
        written = obj if args.dry_run == "client" else await cluster.call("POST", res.collection(), query=query, body=obj)
    _report_written(written, res.group, verb, args, out)
    if args.dry_run != "none" and args.output in ("table", "wide"):
        from kubectl_dra.views import explain_rule

        name = written["metadata"].get("name") or "kubectl-dra-dry-run"
        written["metadata"]["name"] = name
        state = await cluster.snapshot()
        written.setdefault("apiVersion", f"{res.group}/{res.version}")
        written.setdefault("kind", "DeviceTaintRule")
        state.apply(ev.ObjectEvent("ADDED", ev.DEVICE_TAINT_RULE, res.group, name, written))
        explained = explain_rule(state, res.group, name)
        if explained is not None:
            out(f"matches {len(explained.devices)} device(s):")
            for d in explained.devices:
                out(f"  {d}{'  allocated to ' + explained.allocated[d] if d in explained.allocated else ''}")
            out(f"as NoExecute: {_pods_phrase(explained.dry.pods, explained.dry.namespaces)} would be evicted")
    return 0


def _pods_phrase(pods: int, namespaces: int) -> str:
    if pods == 0:
        return "no pods"
    return f"{pods} pod{'s' if pods != 1 else ''} in {namespaces} namespace{'s' if namespaces != 1 else ''}"


async def _get(cluster: Cluster, path: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] | None = await cluster.call("GET", path)
    except ApiError as e:
        if e.status == 404:
            return None
        raise
    return obj


def _by_taint(managed: list[dict[str, Any]], key: str, effect: str | None, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rules with this taint key (and effect, when given) whose selector has the --driver/--pool/--device given."""
    chosen = []
    for r in managed:
        spec = r.get("spec") or {}
        taint, sel = spec.get("taint") or {}, spec.get("deviceSelector") or {}
        if taint.get("key") != key or (effect is not None and taint.get("effect") != effect):
            continue
        if any(want and sel.get(f) != want for f, want in (("driver", args.driver), ("pool", args.pool), ("device", args.device))):
            continue
        chosen.append(r)
    return chosen


async def _in_the_other_group(cluster: Cluster, args: argparse.Namespace) -> list[str]:
    """The kubectl-dra rules of the other API group (CRD vs resource.k8s.io) the target names: a forgotten or extra --upstream."""
    try:
        other = await cluster.rule_resource(not args.upstream)
    except ApiError:
        return []  # resource.k8s.io rules are not served
    managed = await cluster.list(other, label_selector=f"{MANAGED_BY}={PLUGIN}")
    found = [r for r in managed if r["metadata"]["name"] == args.target and not (args.driver or args.pool or args.device)]
    if not found:
        try:
            key, effect = parse_key_effect(args.target)
        except TaintSyntaxError:
            return []
        found = _by_taint(managed, key, effect, args)
    return [f"devicetaintrule.{other.group}/{r['metadata']['name']}" for r in found]


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
        chosen = _by_taint(managed, key, effect, args)
    if not chosen:
        if await _get(cluster, res.item("", args.target)) is not None:
            raise UsageError(
                f"DeviceTaintRule {args.target} is not managed by kubectl-dra (label {MANAGED_BY}={PLUGIN}); delete it with kubectl"
            )
        elsewhere = await _in_the_other_group(cluster, args)
        if elsewhere:
            flag = "drop --upstream" if args.upstream else "add --upstream"
            raise UsageError(f"no kubectl-dra rule in {res.group} matches {args.target!r}, but {', '.join(elsewhere)} does: {flag}")
        if args.ignore_not_found:
            return 0
        print(f"Error: no DeviceTaintRule managed by kubectl-dra matches {args.target!r} (--ignore-not-found: exit 0)", file=sys.stderr)
        return 1
    for r in chosen:
        name = r["metadata"]["name"]
        if args.dry_run != "client":
            await cluster.call("DELETE", res.item("", name), query={"dryRun": "All"} if args.dry_run == "server" else None)
        r.setdefault("apiVersion", f"{res.group}/{res.version}")
        r.setdefault("kind", "DeviceTaintRule")
        _report_written(r, res.group, "deleted", args, out)
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

    state = await cluster.snapshot()
    rows = device_rows(state, node=args.node, tainted=args.tainted)
    _warn_rule_problems(state)
    if args.output in ("json", "yaml"):
        _dump(rows, args.output, out)
        return 0
    if args.output == "name":
        for r in rows:
            out(f"{r['driver']}/{r['pool']}/{r['device']}")
        return 0
    if not rows:
        out("No devices found.")
        return 0
    head = ["NODE", "DRIVER", "POOL", "DEVICE", "TAINTS", "SOURCES", "ALLOCATED-TO"]
    if args.output == "wide":
        head += ["COUNTERS-LEFT", "CAPACITY-LEFT", "ATTRIBUTES", "PATCHED"]
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
            patched = r["patched"]
            line.append(",".join(f"{k}={v}{PATCHED_MARK if k in patched['attributes'] else ''}" for k, v in r["attributes"].items()))
            line.append(_patched_cell(patched))
        table.append(line)
    _table(table, out)
    if args.output == "wide" and any(r["patched"]["attributes"] or r["patched"]["capacity"] for r in rows):
        out(
            f"{PATCHED_MARK} set by a ResourceSlicePatch; PATCHED names the patch per attribute and capacity (one that removed an attribute too)"
        )
    return 0


PATCHED_MARK = "*"


def _patched_cell(patched: dict[str, dict[str, str]]) -> str:
    """`name=patch` per patched attribute, `capacity:name=patch` per patched capacity; `<none>` when unpatched."""
    cells = [f"{n}={p}" for n, p in patched["attributes"].items()] + [f"capacity:{n}={p}" for n, p in patched["capacity"].items()]
    return ",".join(cells) or "<none>"


def _warn_rule_problems(state: ClusterState) -> None:
    """Rules that taint no device (a selector that does not compile) or act on none (an unknown effect), on stderr as kubectl's warnings."""
    from kubectl_dra.rule_checks import problem_rules
    from kubectl_dra.views import source_label

    for source, problems in problem_rules(state).items():
        for problem in problems:
            print(f"Warning: {source_label(source)}: {problem}", file=sys.stderr)


async def cmd_explain(cluster: Cluster, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kubectl_dra.views import explain_rule

    res = await cluster.rule_resource(args.upstream)
    raw = await _get(cluster, res.item("", args.name))
    explained = explain_rule(await cluster.snapshot(), res.group, args.name, (raw or {}).get("status"))
    if explained is None:
        print(
            f"Error: DeviceTaintRule {args.name} ({res.group}) not found{'' if args.upstream else '; an upstream rule? add --upstream'}",
            file=sys.stderr,
        )
        return 1
    if args.output in ("json", "yaml"):
        _dump(explained.to_json(), args.output, out)
        return 0
    if args.output == "name":
        out(f"devicetaintrule.{res.group}/{args.name}")
        return 0
    d = explained.dry
    out(f"Rule:       {args.name} ({res.group}), effect {explained.effect}")
    for problem in explained.problems:
        out(f"Problem:    {problem}")
    out(f"Devices:    {d.published_devices} published, {d.allocated_devices} allocated")
    for dev in explained.devices:
        out(f"  {dev}{'  -> ' + explained.allocated[dev] if dev in explained.allocated else ''}")
    if explained.acting:
        out(f"Still to evict: {_pods_phrase(d.pods, d.namespaces)}{':' if explained.evicted else '.'}")
    elif not explained.evicted:
        out("As NoExecute it would evict no pods.")
    else:
        out(f"As NoExecute it would evict {_pods_phrase(d.pods, d.namespaces)}:")
    for p in explained.evicted:
        due = "now" if p["due"] <= 0 else rfc3339(p["due"])
        out(f"  {p['pod']}  claims {', '.join(p['claims'])}  due {due}  ({', '.join(p['taints'])})")
    if not explained.acting:
        # The message the eviction controller writes into the rule's EvictionInProgress condition while its effect is None.
        out(f"Status:     {explained.message}")
    out(f"Condition:  {_condition_line(explained)}")
    return 0


def _condition_line(explained: RuleExplanation) -> str:
    """The rule's actual EvictionInProgress condition, labelled as the controller's, or why there is none."""
    c = explained.condition
    if c is None:
        if explained.acting:
            return "EvictionInProgress not written yet (the eviction controller writes it once it acts on the rule: is it running and leading?)"
        return "EvictionInProgress not written yet"
    line = f"EvictionInProgress={c.get('status')} {c.get('reason')}, written {c.get('lastTransitionTime') or '<no time>'}"
    observed = c.get("observedGeneration")
    if observed is not None and observed != explained.generation:
        line += f" for generation {observed} (the rule is at {explained.generation}: not yet updated)"
    message = c.get("message")
    return f"{line}: {message}" if message else line


def _default_namespace(args: argparse.Namespace) -> str:
    namespace: str | None = args.namespace
    if namespace:
        return namespace
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
        print(f'Error: pod "{args.pod}" not found in namespace {namespace}', file=sys.stderr)
        return 1
    state = await cluster.snapshot()
    minor = await cluster.minor()
    # The extender's gates are its cluster's minor's defaults (allocator/features.py); 1.36's when /version does not say.
    features = DEFAULT_FEATURES if minor is None else defaults_for(minor)
    try:
        reasons = await why(state, ReadOnlySource(cluster), raw, features)
    except ValueError as e:
        print(f"Error: pod {namespace}/{args.pod}: {e}", file=sys.stderr)
        return 1
    scheduler = (raw.get("spec") or {}).get("schedulerName") or "default-scheduler"
    ours = scheduler == args.scheduler_name
    from kubectl_dra import scheduler_says

    events = await cluster.list(EVENTS, namespace=namespace, field_selector=scheduler_says.field_selector(args.pod))
    says = scheduler_says.latest(events, raw)
    if args.output in ("json", "yaml"):
        answer = {"pod": f"{namespace}/{args.pod}", "schedulerName": scheduler, "extenderProfile": ours, "nodes": reasons}
        answer["featureGates"] = {"kubernetes": f"1.{minor}" if minor is not None else None, "gates": features.gate_map()}
        answer["schedulerSays"] = says.to_json() if says is not None else None
        _dump(answer, args.output, out)
        return 0
    if args.output == "name":  # the nodes that fit, as kubectl names them
        for n in sorted(n for n, r in reasons.items() if r is None):
            out(f"node/{n}")
        return 0
    node_name = (raw.get("spec") or {}).get("nodeName")
    waits = "was placed by" if node_name else "waits for"
    if ours:
        out(f"pod {namespace}/{args.pod} {waits} scheduler {scheduler}, the dra-extender profile: its /filter answers below")
    else:
        out(
            f"pod {namespace}/{args.pod} {waits} scheduler {scheduler}, not the dra-extender profile {args.scheduler_name} "
            "(--scheduler-name): the extender is never asked about it; below is what it would answer"
        )
    if node_name:
        out(f"pod {namespace}/{args.pod} is bound to {node_name}; the reasons below are what a new pod like it would get")
    if minor is None:
        out("the API server did not say its version at /version: judged with Kubernetes 1.36's DRA feature-gate defaults")
    fits = sorted(n for n, r in reasons.items() if r is None)
    if len(fits) == len(reasons) and dra_use(parse_pod(raw), class_mapping(state.classes)) is None:
        out(f"pod {namespace}/{args.pod} uses no DRA device (no resource claim, no DRA-backed extended resource)")
    out(f"{len(fits)} of {len(reasons)} nodes fit{': ' + ', '.join(fits) if fits else ''}")
    for line in scheduler_says.lines(says, len(fits), bool(node_name)):
        out(line)
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
        sub = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == command)[1]  # type: ignore[union-attr]  # argparse internals: set by add_subparsers above
        options = [s for a in sub._actions for s in a.option_strings if s.startswith("--")]
        if before and before[-1] in ("-o", "--output"):
            options = [c for a in sub._actions if "--output" in a.option_strings for c in a.choices or ()]
        if command == "completion":
            options = ["bash", "zsh"]
        if current.count(":") == 1 and command == "taint":
            options = [current.partition(":")[0] + ":" + e for e in EFFECTS]
        if command == "why" and not current.startswith("-") and _wants_positional(before):
            options = pod_names(before)
    return [o for o in options if o.startswith(current)]


def _wants_positional(before: Sequence[str]) -> bool:
    """Whether the word being completed is not the value of a flag (`why -n ml <TAB>` completes a pod, `why -n <TAB>` does not)."""
    return not before or before[-1] not in ("-n", "--namespace", "--kubeconfig", "--context", "-o", "--output")


def pod_names(words: Sequence[str]) -> list[str]:
    """Pods of the namespace the words name (-n, else the context's), for `why <TAB>`; [] when the cluster cannot be asked."""
    parser = build_parser()
    try:
        args, _ = parser.parse_known_args([*words, "why", "x"] if "why" not in words else [*words, "x"])
    except SystemExit:
        return []
    namespace = _default_namespace(args)

    async def names() -> list[str]:
        cluster = Cluster(kubeconfig=args.kubeconfig, context=args.context)
        try:
            async with asyncio.timeout(5):
                page = await cluster.call("GET", KIND_RESOURCES[ev.POD].collection(namespace), query={"limit": 500})
            return sorted(p["metadata"]["name"] for p in page.get("items") or [])
        finally:
            await cluster.close()

    try:
        return asyncio.run(names())
    except Exception:  # completion must never print a traceback into the shell
        return []


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
    "health": cmd_health,
}


def kubeconfig_path(args: argparse.Namespace) -> str:
    """The kubeconfig kubectl would use; a usage error naming it when it is missing or unreadable."""
    path = args.kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    where = "--kubeconfig" if args.kubeconfig else ("$KUBECONFIG" if os.environ.get("KUBECONFIG") else "default kubeconfig")
    try:
        config = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"kubeconfig {path} ({where}): no such file; pass --kubeconfig PATH or set KUBECONFIG") from None
    except OSError as e:
        raise UsageError(f"kubeconfig {path} ({where}): {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"kubeconfig {path}{at}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(config, dict) or not config.get("clusters"):
        raise UsageError(f"kubeconfig {path}: no clusters in it (is it a kubeconfig?)")
    contexts = {c.get("name") for c in config.get("contexts") or [] if isinstance(c, dict)}
    context = args.context or config.get("current-context")
    if not context:
        raise UsageError(
            f"kubeconfig {path}: no current-context; pass --context (one of: {', '.join(sorted(map(str, contexts))) or 'none'})"
        )
    if context not in contexts:
        raise UsageError(f"kubeconfig {path}: context {context!r} not found (have: {', '.join(sorted(map(str, contexts))) or 'none'})")
    from tracker.apiserver.kubeconfig import problem

    fault = problem(path, context)  # the rest (the context's cluster and user exist), as dra-extender checks them
    if fault is not None:
        raise UsageError(f"kubeconfig {path}: {fault}")
    return path


async def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    if args.command == "taint":
        from kubectl_dra.rule_checks import selector_errors

        parse_taint(args.taint)  # syntax errors before any request
        refused = selector_errors(args.selector or ())  # the extender's CEL engine: compile, cost, length
        if refused:
            raise UsageError("; ".join(refused) + " (the extender would select no device with it)")
    path = kubeconfig_path(args)
    cluster = Cluster(kubeconfig=path, context=args.context)
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
    if args.command is None:  # bare `kubectl dra`: what it can do, as kubectl's plugins print
        parser.print_help()
        return 0
    if args.command == "completion":
        print(BASH if args.shell == "bash" else ZSH, end="")
        return 0
    try:
        return asyncio.run(run(args))
    except (TaintSyntaxError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NotServed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ApiError as e:
        print(f"Error from server: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the client's own errors (config, TLS, connection): one line, never a traceback
        from kubernetes_asyncio.config.config_exception import ConfigException

        if isinstance(e, ConfigException):
            print(f"error: kubeconfig {args.kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}: {e}", file=sys.stderr)
            return 2
        if isinstance(e, OSError | TimeoutError) or type(e).__module__.startswith("aiohttp"):
            print(f"error: cannot reach the API server: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
