"""docs/operator-guide.md's feature sections print what the code prints for their examples/ (tests/docs/feature_examples.py)."""

from __future__ import annotations

import pytest

from tests.docs.feature_examples import EXAMPLES, block_in_guide, directory, run


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_guide_shows_what_the_example_prints(name: str) -> None:
    assert directory(name).is_dir(), f"examples/{name}/ is missing"
    shown = block_in_guide(name)
    assert shown is not None, f"docs/operator-guide.md has no <!-- example {name} --> block"
    assert shown == run(name), f"docs/operator-guide.md, example {name}: regenerate with python -m tests.docs.feature_examples"
