"""A missing promtool/amtool fails the test under CI=true (an install step is broken) and skips it elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.prometheus.tools import tool


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    ci: str | None
    installed: bool
    want: str  # "path", "fail" or "skip"


ROWS = (
    Row("installed, in CI", "true", True, "path"),
    Row("installed, locally", None, True, "path"),
    Row("missing in CI: the test fails", "true", False, "fail"),
    Row("missing in CI (CI=1): fails", "1", False, "fail"),
    Row("missing locally: skipped with the reason", None, False, "skip"),
    Row("missing with CI=false: skipped", "false", False, "skip"),
)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_missing_tool_fails_in_ci_and_skips_elsewhere(row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if row.installed:
        exe = tmp_path / "promtool"
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    if row.ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", row.ci)
    if row.want == "path":
        assert tool("promtool") == str(tmp_path / "promtool")
        return
    outcome = pytest.fail.Exception if row.want == "fail" else pytest.skip.Exception
    with pytest.raises(outcome, match="apt-get install prometheus"):
        tool("promtool")
