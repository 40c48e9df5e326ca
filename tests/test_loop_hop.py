"""bench/loop_hop.py runs the hop through serve's own LoopBridge and writes what it measured (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import loop_hop


def test_every_round_crosses_and_is_recorded(tmp_path: Path) -> None:
    assert loop_hop.main(["--rounds", "2", "--calls", "20", "--name", "hop", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "hop.json").read_text())
    assert [r["round"] for r in result["rounds"]] == [0, 1]
    assert all(set(r) == {"round", "hop", "in_place"} for r in result["rounds"])
    assert all(r["hop"]["wall_us"] > 0 for r in result["rounds"])
    assert "| 1 |" in (tmp_path / "hop.md").read_text()


@pytest.mark.parametrize("flags", [pytest.param(["--rounds", "0"], id="no-rounds"), pytest.param(["--calls", "0"], id="no-calls")])
def test_nothing_to_measure_is_a_usage_error(flags: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        loop_hop.main([*flags, "--out", str(tmp_path)])
    assert exit_.value.code == 2
