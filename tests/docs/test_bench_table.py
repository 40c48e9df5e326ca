"""The README's performance table is what bench/results/*.json say (bench/readme_table.py writes it)."""

from __future__ import annotations

from bench.readme_table import README, readme_block, table


def test_readme_performance_table_matches_the_results() -> None:
    assert readme_block(README.read_text()) == table(), "regenerate: python -m bench.readme_table --write"


def test_every_row_says_its_conditions() -> None:
    rows = table().splitlines()[2:]
    assert len(rows) >= 7
    for row in rows:
        benchmark, conditions, result = row.strip("| ").split(" | ")
        assert any(measure in conditions for measure in ("wall time", "CPU time", "peak RSS")), benchmark
        assert "cores" in conditions or "in-process" in conditions, benchmark
        assert result, benchmark
