"""No module of the production packages grows past 800 lines (issue 32): a longer one holds several responsibilities."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800


def oversized(package: Path, limit: int = MAX_LINES) -> list[str]:
    """The package's modules (at any depth) longer than `limit` lines, each with its length."""
    out = []
    for path in sorted(package.rglob("*.py")):
        with path.open("rb") as f:
            n = sum(1 for _ in f)
        if n > limit:
            out.append(f"{path.relative_to(package.parent).as_posix()}: {n} lines")
    return out


@pytest.mark.parametrize("package", ["allocator", "tracker", "extender"])
def test_no_module_over_the_limit(package: str) -> None:
    assert (ROOT / package).is_dir(), package
    assert oversized(ROOT / package) == [], f"split these modules (at most {MAX_LINES} lines each)"


def test_a_module_one_line_over_is_reported(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(pkg) == [f"pkg/sub/long.py: {MAX_LINES + 1} lines"]
