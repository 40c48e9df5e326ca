"""The NOTES and README `kubectl dra` sequences run, command by command, against the fake API server
(a subprocess) with the demo cluster; that each example is exact is tests/docs/test_doc_examples.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.test_doc_examples import NOTES, commands
from tests.e2e.cluster import CRD_GROUP, FakeApi
from tests.e2e.harness import DEMO, ROOT
from tests.e2e.test_kubectl_dra import dra


def _managed_rules(api: FakeApi) -> list[str]:
    return sorted(
        r["metadata"]["name"]
        for r in api.list("DeviceTaintRule", CRD_GROUP)
        if (r["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "kubectl-dra"
    )


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
