"""Every `kubectl dra` example a reader may copy (chart NOTES, README, docs, the plugin's --help) is exact.

Exact: a `taint` example names its rule (`--name`, so the next step updates
it instead of adding a second rule) and, when it selects by driver or device,
its pool (a device name alone matches that device on every node). The NOTES
and README sequences run, command by command, in tests/e2e/test_doc_sequences.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kubectl_dra.cli import EXAMPLES, build_parser
from tests.e2e.harness import ROOT

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
