"""docs/reference.md, generated from the code: `python -m tests.docs.reference > docs/reference.md`.

Flags from the argparse parsers, endpoints from the FastAPI routes, metrics
from the Prometheus registry, CRDs from charts/dra-extender/crds/. The test
beside this file fails when the committed file differs from what the code says.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

# What each endpoint is for; a route missing here fails the generation (and so the test).
ENDPOINTS = {
    "/filter": "kube-scheduler's filterVerb: nodes whose devices fit the pod's claims (taints and tolerations included); the rest with reasons, all unresolvable.",
    "/prioritize": "kube-scheduler's prioritizeVerb: 0-10 per node, healthy devices first, then the placement policy (docs/scoring.md).",
    "/bind": "kube-scheduler's bindVerb: allocate, write claim status and reservation, then the Binding; the leader only.",
    "/livez": "200 while the event loop turns; 503 past --livez-stall-threshold (kubelet liveness).",
    "/healthz": "The same as /livez.",
    "/readyz": "200 once every kind's initial list is in; 503 naming the kinds still missing (kubelet readiness).",
    "/metrics": "Prometheus text format; the metrics below.",
    "/debug/devices": "Every device with its effective taints and attributes (off with --no-debug).",
    "/debug/objects": "The resourceVersion of every object in the view, per kind (off with --no-debug).",
    "/debug/volumes": "Every tainted PersistentVolumeClaim and PersistentVolume with its taints and the pods using it (off with --no-debug).",
}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    lines = ["| flag | default | description |", "| --- | --- | --- |"]
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(f"`{o}{' ' + str(action.metavar) if action.metavar else ''}`" for o in action.option_strings)
        if action.choices:
            choices = "\\|".join(map(str, action.choices))  # a table cell: escape the pipes
            name = ", ".join(f"`{o} {choices}`" for o in action.option_strings)
        default = "" if action.default in (None, False, argparse.SUPPRESS) else f"`{action.default}`"
        text = _expanded_help(parser, action).replace("|", "\\|")
        lines.append(f"| {name} | {default} | {text} |")
    return lines


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as `--help` prints it: every %(...)s placeholder filled in by argparse itself."""
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)  # type: ignore[attr-defined]  # argparse's own expansion, private


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _metrics() -> list[str]:
    from prometheus_client.metrics import MetricWrapperBase

    from serving.metrics import Metrics

    m = Metrics()
    lines = ["| metric | type | labels | description |", "| --- | --- | --- | --- |"]
    rows = []
    wrappers = [w for v in vars(m).values() for w in (v.values() if isinstance(v, dict) else (v,)) if isinstance(w, MetricWrapperBase)]
    named = set()
    for value in wrappers:
        name = value._name + ("_total" if value._type == "counter" else "")
        named.add(value._name)
        rows.append(f"| `{name}` | {value._type} | {', '.join(value._labelnames) or '—'} | {value._documentation} |")
    for family in m.registry.collect():  # collectors without a wrapper: process_*
        if family.name not in named:
            name = family.name + ("_total" if family.type == "counter" else "")
            rows.append(f"| `{name}` | {family.type} | — | {family.documentation} |")
    return lines + sorted(rows)


def _endpoints() -> list[str]:
    from extender.app import create_app
    from serving.metrics import Metrics

    stub: Any = SimpleNamespace(metrics=Metrics(), state=None, foreground=None, not_ready=lambda: None)
    full = {r.path: sorted(r.methods or ()) for r in create_app(stub).routes}  # type: ignore[attr-defined]
    probes = {r.path for r in create_app(stub, probes_only=True).routes}  # type: ignore[attr-defined]
    missing = sorted(set(full) - set(ENDPOINTS))
    if missing:
        raise KeyError(f"endpoints without a description in tests/docs/reference.py: {missing}")
    lines = ["| endpoint | method | on --probe-listen | what |", "| --- | --- | --- | --- |"]
    for path, methods in full.items():
        lines.append(f"| `{path}` | {', '.join(methods)} | {'yes' if path in probes else 'no'} | {ENDPOINTS[path]} |")
    return lines


def _crds() -> list[str]:
    out: list[str] = []
    for path in sorted((ROOT / "charts" / "dra-extender" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        names = spec["names"]
        out += [f"### {names['kind']} (`{spec['group']}`)", ""]
        out.append(
            f"Scope {spec['scope']}; plural `{names['plural']}`"
            + (f"; short names {', '.join('`' + s + '`' for s in names.get('shortNames', []))}" if names.get("shortNames") else "")
            + f"; file `charts/dra-extender/crds/{path.name}`."
        )
        out.append("")
        for version in spec["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            out.append(f"Version `{version['name']}`{' (served, storage)' if version.get('storage') else ''}:")
            out.append("")
            out.append("| field | type | description |")
            out.append("| --- | --- | --- |")
            for field, sub in _fields(schema.get("properties", {}).get("spec", {}), "spec", depth=3):
                out.append(f"| `{field}` | {sub.get('type', '')} | {' '.join((sub.get('description') or '').split()).replace('|', '/')} |")
            out.append("")
    return out


def _fields(schema: dict[str, Any], prefix: str, depth: int) -> list[tuple[str, dict[str, Any]]]:
    out = []
    props = schema.get("properties") or (schema.get("items") or {}).get("properties") or {}
    for name, sub in props.items():
        path = f"{prefix}.{name}" + ("[]" if sub.get("type") == "array" else "")
        out.append((path, sub))
        if depth > 1:
            out += _fields(sub, path, depth - 1)
    return out


def render() -> str:
    from dra_extender.cli import build_parser
    from kubectl_dra.cli import build_parser as plugin_parser

    lines = [
        "# Reference",
        "",
        (
            "Generated from the code by `python -m tests.docs.reference > docs/reference.md`; "
            "`tests/docs/test_reference.py` fails when this file and the code disagree. "
            "The operator guide (docs/operator-guide.md) says how to use these."
        ),
        "",
        "## `dra-extender serve` flags",
        "",
        "The kube-scheduler sidecar: the verbs and the requeue nudge.",
        "",
        *_flags(_subparsers(build_parser())["serve"]),
        "",
        "## `dra-extender controllers` flags",
        "",
        (
            "The eviction controller, the device health controller and the foreign-pod check, in their own process "
            "(the Lease `dra-extender-controllers`; `--listen` serves `/livez`, `/readyz` and `/metrics` only). "
            "`dra-extender all` takes the flags of both commands and runs both in one process (`make run`)."
        ),
        "",
        *_flags(_subparsers(build_parser())["controllers"]),
        "",
        "## `dra-extender webhook` flags",
        "",
        "The optional admission webhook (`webhook.enabled` in the chart): `POST /mutate` (AdmissionReview v1) and `GET /healthz`, over TLS.",
        "",
        *_flags(_subparsers(build_parser())["webhook"]),
        "",
        "## HTTP endpoints",
        "",
        "`--listen` (default `127.0.0.1:8888`) serves every endpoint; `--probe-listen` only the probe ones.",
        "",
        *_endpoints(),
        "",
        "## Metrics",
        "",
        "Histograms also export `_bucket`, `_sum` and `_count` series.",
        "",
        *_metrics(),
        "",
        "## `kubectl dra`",
        "",
        *_flags(plugin_parser()),
        "",
    ]
    for name, sub in _subparsers(plugin_parser()).items():
        lines += [f"### `kubectl dra {name}`", "", sub.description or "", ""]
        positionals = [a for a in sub._actions if not a.option_strings]
        if positionals:
            lines += [f"Arguments: {' '.join('`' + str(a.metavar or a.dest) + '`' for a in positionals)}.", ""]
        flags = _flags(sub)
        if len(flags) > 2:
            lines += [*flags, ""]
    lines += ["## CRDs", "", *_crds()]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
