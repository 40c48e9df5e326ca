"""docs/reference.md is what the code says: every flag, endpoint, metric and CRD field."""

from __future__ import annotations

import argparse

from dra_extender.cli import build_parser
from serving.metrics import Metrics
from tests.docs.reference import ROOT, _subparsers, render

REFERENCE = ROOT / "docs" / "reference.md"


def test_reference_is_generated_from_the_current_code() -> None:
    assert REFERENCE.read_text() == render(), "regenerate: python -m tests.docs.reference > docs/reference.md"


def test_every_flag_and_metric_is_in_the_reference() -> None:
    text = REFERENCE.read_text()
    commands = _subparsers(build_parser())
    for action in [a for c in ("serve", "controllers", "webhook") for a in commands[c]._actions if a.help != argparse.SUPPRESS]:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in text, f"flag {option} missing from docs/reference.md"
    for family in Metrics().registry.collect():
        assert f"`{family.name}" in text, f"metric {family.name} missing from docs/reference.md"


def test_no_help_placeholder_is_left_unexpanded() -> None:
    """argparse fills %(default)s, %(choices)s, %(prog)s in --help; the reference must say the same words, not the placeholder."""
    for n, line in enumerate(render().splitlines(), 1):
        assert "%(" not in line, f"docs/reference.md line {n}: an unexpanded argparse placeholder: {line}"
