"""Hostile CEL selectors: each passes the compile-time checks and tries to make one device evaluation as slow as possible.

`bench.bench_cel_hostile` times them (the slowest evaluation before the cost
limit stops it); the tests check each one's verdict ("cost": stopped by the
limit, "ok": completes within it), never its timing (docs/hostile-input.md).
"""

from __future__ import annotations

from dataclasses import dataclass


def _ints(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


A1000 = '"' + "a" * 1000 + '"'
A3000 = '"' + "a" * 3000 + '"'
A9000 = '"' + "a" * 9000 + '"'


def _growing(levels: int, seed: str = '"' + "x" * 1000 + '"') -> str:
    """cel.bind(v0, seed, cel.bind(v1, v0 + v0 + v0 + v0, ...)): a string that grows 4x per level."""
    body = f"size(v{levels}) > 0"
    for i in range(levels, 0, -1):
        p = f"v{i - 1}"
        body = f"cel.bind(v{i}, {p} + {p} + {p} + {p}, {body})"
    return f"cel.bind(v0, {seed}, {body})"


def _nested_parens(n: int) -> str:
    return "(" * n + "true" + ")" * n


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    verdict: str  # "cost": stopped by the cost limit; "ok": completes within it


CASES: list[Case] = [
    # docs/hostile-input.md#cel-selectors-the-runtime-cost: findAll charged nothing, 30 x 4,000 matches.
    Case("findAll-in-comprehension", f'{_ints(30)}.all(x, "{"a" * 4000}".findAll(".").size() > 0)', "cost"),
    Case("findAll-9k-matches", f'{A9000}.findAll(".").size() > 0', "cost"),
    Case("findAll-limited", f'{A9000}.findAll(".", 100).size() == 100', "ok"),
    # Comprehensions over lists built at runtime escape the static estimate (32 assumed).
    Case("nested-over-split", f'{A1000}.split("").all(x, {A1000}.split("").all(y, true))', "cost"),
    Case(
        "triple-nested-over-split",
        f'{A1000}.split("").all(x, "aaaaaaaaaaaaaaaaaaaa".split("").all(y, {A1000}.split("").all(z, x == y)))',
        "cost",
    ),
    Case("in-built-list", f'cel.bind(l, {A3000}.split(""), l.all(x, x in l))', "cost"),
    Case("indexOf-built-list", f'cel.bind(l, {A3000}.split(""), l.all(x, l.indexOf(x) >= 0))', "cost"),
    Case("list-equality", f'cel.bind(l, {A3000}.split(""), l.all(x, l == l))', "cost"),
    Case("sum-of-map", f'cel.bind(l, {A3000}.split("").map(c, 1), l.all(x, l.sum() > 0))', "cost"),
    Case("map-filter-chain", f'{A9000}.split("").map(x, x + x).filter(y, y.startsWith("a")).map(z, z.size()).size() > 0', "cost"),
    # String growth.
    Case("concat-growth", _growing(10), "cost"),
    Case("concat-growth-small", _growing(3), "ok"),
    Case("replace-growth", '"a"' + '.replace("a", "aaaaaaaaaa")' * 8 + ".size() > 0", "cost"),
    Case("replace-in-comprehension", f'{_ints(100)}.all(x, {A9000}.replace("a", "bb").size() > 0)', "ok"),
    Case("join-of-split", f'{_ints(100)}.all(x, {A9000}.split("").join("-").size() > 0)', "cost"),
    Case("lowerAscii-of-doubled", f"cel.bind(s, {A3000} + {A3000} + {A3000}, {_ints(200)}.all(x, s.lowerAscii().size() > 0))", "ok"),
    # Regular expressions on long inputs (RE2: linear, but charged by input x pattern).
    Case("matches-long-input", f'{_ints(100)}.all(x, {A9000}.matches("(a|aa)+(b|bb)*$"))', "cost"),
    Case("matches-big-pattern", f'{A3000}.matches("' + "(a?)" * 300 + "a" * 300 + '")', "cost"),
    Case("find-repeated", f'{_ints(100)}.all(x, {A9000}.find("a+b") == "")', "cost"),
    # Distinct patterns built at runtime: each is a compile, charged by its program's size
    # (`\\pL{1000}` is 9 characters but 50-90 ms of compiling before RE2 refuses it).
    Case("regex-compile-too-large", f'{_ints(1500)}.all(i, !"a".matches("\\\\pL{{1000}}" + string(i)))', "cost"),
    Case("regex-compile-medium", f'{_ints(1500)}.all(i, !"a".matches("\\\\pL{{30}}" + string(i)))', "cost"),
    Case("regex-compile-many-small", f'{_ints(1500)}.all(i, !"a".matches("\\\\pL{{3}}" + string(i)))', "cost"),
    Case("contains-repeated", f'{_ints(300)}.all(x, {A3000}.contains("{"a" * 200}b"))', "ok"),
    # Deep nesting: bounded by the parse-tree depth limit, not by cost.
    Case("deep-parens", _nested_parens(20), "ok"),
    Case("deep-comprehensions", "[1].all(a, [1].all(b, [1].all(c, [1].all(d, [1].all(e, [1].all(f, true))))))", "ok"),
    Case("many-ors", " || ".join(f'device.driver == "d{i}"' for i in range(200)), "ok"),
]
