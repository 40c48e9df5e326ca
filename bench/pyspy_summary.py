"""A py-spy recording (`py-spy record --format raw`, collapsed stacks) summed up: self and cumulative share per frame.

    .venv/bin/python -m bench.pyspy_summary RECORDING.txt [--top 40] [--title TEXT] > bench/results/NAME-pyspy.txt

Why: the flame graph does not go into a results file; these two lists do,
and they are what the CPU work of issue 31 was decided on (which layer
of the extender's process takes the CPU per pod).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_NO_LINE = re.compile(r":\d+\)$")


def summarize(lines: list[str], top: int) -> str:
    """Self share of the innermost frame and cumulative share of every frame (once per sample), by function."""
    self_counts: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    total = 0
    for line in lines:
        m = _LINE.match(line.strip())
        if not m:
            continue
        n = int(m["count"])
        frames = [_NO_LINE.sub(")", f) for f in m["stack"].split(";") if f]
        if not frames:
            continue
        total += n
        self_counts[frames[-1]] += n
        for f in set(frames):
            cumulative[f] += n
    if not total:
        return "no samples\n"
    out = [f"samples {total}", "self:"]
    out += [f"{100 * c / total:5.1f}% {f}" for f, c in self_counts.most_common(top)]
    out.append("cumulative:")
    out += [f"{100 * c / total:5.1f}% {f}" for f, c in cumulative.most_common(top)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pyspy_summary")
    p.add_argument("recording", type=Path)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--title", default="")
    a = p.parse_args(argv)
    text = summarize(a.recording.read_text().splitlines(), a.top)
    sys.stdout.write((a.title + "\n" if a.title else "") + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
