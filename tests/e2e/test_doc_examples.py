"""Every `kubectl dra` example a reader may copy (chart NOTES, README, docs, the plugin's --help) is exact and runs.

Exact: a `taint` example names its rule (`--name`, so the next step updates
it instead of adding a second rule) and, when it selects by driver or device,
its pool (a device name alone matches that device on every node). The NOTES
and README sequences then run, command by command, against the fake API
server with the demo cluster.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kubectl_dra.cli import EXAMPLES, build_parser
from tests.e2e.cluster import CRD_GROUP, FakeApi
from tests.e2e.harness import DEMO, ROOT
from tests.e2e.test_kubectl_dra import dra

NOTES = ROOT / "charts" / "dra-extender" / "templates" / "NOTES.txt"
DOCS = [ROOT / "README.md", NOTES, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "reference.md")]
_COMMAND = re.compile(r"^\s*(?:\$ )?kubectl dra (.+)$", re.M)


def commands(text: str) -> list[list[str]]:
    """The argument lists of every `kubectl dra ...` line (comments dropped)."""
    return [shlex.split(m.group(1), comments=True) for m in _COMMAND.finditer(text)]


def every_example() -> list[tuple[str, list[str]]]:
    out = [(str(p.relative_to(ROOT)), argv) for p in DOCS for argv in commands(p.read_text())]
    out += [(f"kubectl dra {verb} --help", argv) for verb, text in EXAMPLES.items() for argv in commands(text)]
    return out


EXAMPLE_ROWS = every_example()


def test_the_examples_were_found() -> None:
    where = {w for w, _ in EXAMPLE_ROWS}
    assert {"README.md", "charts/dra-extender/templates/NOTES.txt", "docs/operator-guide.md", "kubectl dra taint --help"} <= where


@pytest.mark.parametrize(("where", "argv"), EXAMPLE_ROWS, ids=[f"{w}: {' '.join(a)[:60]}" for w, a in EXAMPLE_ROWS])
def test_example_parses_and_is_exact(where: str, argv: list[str]) -> None:
    args = build_parser().parse_args(argv)  # SystemExit (a failed test) on a flag the plugin does not have
    if args.command != "taint":
        return
    assert args.name, f"{where}: a taint example without --name makes a new rule at every step"
    if (args.driver or args.device) and not (args.device_class or args.selector):
        assert args.pool, f"{where}: a taint example without --pool matches the device on every node"


def _managed_rules(api: FakeApi) -> list[str]:
    return sorted(
        r["metadata"]["name"]
        for r in api.list("DeviceTaintRule", CRD_GROUP)
        if (r["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "kubectl-dra"
    )


@pytest.mark.e2e  # the fake API server as a subprocess
@pytest.mark.parametrize("doc", [NOTES, ROOT / "README.md"], ids=["NOTES.txt", "README.md"])
def test_the_sequence_runs_and_leaves_one_rule(doc: Path) -> None:
    """Each step exits 0; while the steps run there is never more than one rule; untaint (if shown) removes it."""
    steps = commands(doc.read_text())
    assert [s[0] for s in steps if s[0] == "taint"], f"{doc.name} shows no taint example"
    api = FakeApi(DEMO)
    try:
        names: set[str] = set()
        for argv in steps:
            result = dra(api, *argv)
            rules = _managed_rules(api)
            assert len(rules) <= 1, f"{doc.name}: `kubectl dra {' '.join(argv)}` left {rules}"
            names.update(rules)
            if argv[0] == "explain-rule":
                assert "Rule:" in result.stdout and "0 pod(s)" not in result.stdout
        assert len(names) == 1, names
        if any(s[0] == "untaint" for s in steps):
            assert _managed_rules(api) == []
    finally:
        api.stop()


def test_no_doc_hard_codes_the_followed_lease() -> None:
    """The Lease lives in the scheduler's configuration only (--scheduler-config reads it); docs never repeat a concrete one."""
    places = [*DOCS, *sorted((ROOT / "examples").glob("*.yaml")), *sorted((ROOT / "charts").rglob("*.yaml"))]
    concrete = re.compile(r"--follow-scheduler-lease[ =](?!NAMESPACE/NAME|NS/NAME)\S+")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in places for m in concrete.finditer(p.read_text())]
    assert found == []


def _support_table(path: Path) -> str:
    found = re.findall(r"<!-- support-table -->\n(.*?)<!-- /support-table -->", path.read_text(), re.S)
    assert len(found) == 1, f"{path.name}: one support table"
    return found[0]


def test_the_supported_versions_table_is_the_same_in_readme_and_guide() -> None:
    guide = _support_table(ROOT / "docs" / "operator-guide.md")
    assert _support_table(ROOT / "README.md") == guide
    for version in ("1.34", "1.35", "1.36"):
        assert version in guide
    rows = {line.split(" | ")[0].strip("| "): line for line in guide.splitlines() if line.startswith("| ")}
    for feature, flag in [
        ("Partitionable devices", "--feature-partitionable-devices"),
        ("Consumable capacity", "--feature-consumable-capacity"),
        ("Binding conditions", "--feature-binding-conditions"),
        ("DRA-backed extended resources", "--feature-extended-resources"),
    ]:
        [row] = [r for name, r in rows.items() if name.startswith(feature)]
        assert "supported (1.36 beta, on by default)" in row and f"`{flag}`" in row, row
