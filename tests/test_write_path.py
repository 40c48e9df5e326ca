"""One write path (docs/design.md#one-write-path), held by a tool rather than by memory.

No module of the components outside tracker/apiserver/ sends, or builds, an
API request of its own: it calls a narrow writer of tracker/source.py, whose
requests tracker/apiserver/requests.py builds and `ApiWrites.execute` sends.
The HTTP client libraries are import-linter's (pyproject.toml, "only
tracker/apiserver/ holds an HTTP client"); this test reads the source for
what an import does not show: a method named by its literal, a raw
`send`/`request`, and the merge-patch content type spelled twice.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("allocator", "tracker", "serving", "extender", "controllers", "webhook", "dra_extender", "kubectl_dra")
SENDER = "tracker/apiserver/"
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
RAW = frozenset({"send", "request", "call_api", "open_watch"})  # the transport's own calls (ApiSource, kubernetes-asyncio)

# Each a file with its reason; an entry whose file no longer sends raw requests fails, so it goes with its reason.
EXEMPT = {
    "kubectl_dra/cli.py": "kubectl dra is an admin's generic API client (create, replace, delete with --dry-run, as kubectl "
    "does), not a component's write; its requests go through Cluster.call over ApiSource.request",
    "kubectl_dra/cluster.py": "Cluster.call, kubectl dra's one request helper (above), and its lists and discovery",
}
MERGE_PATCH_TEXT = "application/merge-patch+json"
# The fake API server parses the content type with its own table: it may not import the extender's code (pyproject.toml).
MERGE_PATCH_HOMES = ("tracker/apiserver/requests.py", "kubesim/fakeapi/")


def _names_a_method(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in HTTP_METHODS


def raw_requests(source: str) -> list[int]:
    """The lines of `source` that send or build an API request by hand: an HTTP method as a literal argument,
    or one of the transport's raw calls with more than an Event recorder's one argument."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        method_args = [*node.args[:2], *(kw.value for kw in node.keywords if kw.arg == "method")]
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        raw = attr in RAW and (attr in ("call_api", "open_watch") or len(node.args) >= 2 or any(kw.arg == "method" for kw in node.keywords))
        if raw or any(_names_a_method(a) for a in method_args):
            lines.append(node.lineno)
    return sorted(set(lines))


def violations() -> dict[str, list[int]]:
    """Per production module outside tracker/apiserver/ (repository-relative), the lines with raw requests."""
    out = {}
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(SENDER):
                continue
            found = raw_requests(path.read_text())
            if found:
                out[rel] = found
    return out


# (name, source, lines flagged)
ROWS: list[tuple[str, str, list[int]]] = [
    ("a raw send", 'async def f(s):\n    await s.send("PATCH", "/api/v1/pods/p", {}, content_type="x")\n', [2]),
    ("a raw read", 'async def f(s):\n    await s.request("GET", "/apis/x")\n', [2]),
    ("a send with the method in a variable", "async def f(s, m):\n    await s.send(m, '/p', {})\n", [2]),
    ("the method by keyword", 'async def f(s):\n    await s.request(method="POST", path="/p")\n', [2]),
    ("a helper handed the method", 'async def f(s):\n    await write(s, "DELETE", "/p", {}, "delete it")\n', [2]),
    ("kubernetes-asyncio's call_api", "async def f(api, p):\n    await api.call_api(p, 'GET')\n", [2]),
    ("a watch opened by hand", "async def f(s, p):\n    await s.open_watch(p, [], 1.0)\n", [2]),
    ("ok: a tracker writer", "async def f(s):\n    await s.patch_own_rule('r', {})\n", []),
    ("ok: an Event recorder's send", "def f(self, e):\n    self.send(e)\n", []),
    ("ok: a route's methods", 'def f(app, r):\n    app.add_api_route("/alerts", r, methods=["POST"])\n', []),
    ("ok: an ASGI scope's method", 'def f(scope):\n    return scope["method"] == "POST"\n', []),
]


@pytest.mark.parametrize(("source", "lines"), [pytest.param(s, n, id=name) for name, s, n in ROWS])
def test_raw_requests_are_found(source: str, lines: list[int]) -> None:
    assert raw_requests(source) == lines


def test_only_tracker_apiserver_sends_requests() -> None:
    found = violations()
    unexplained = {path: lines for path, lines in found.items() if path not in EXEMPT}
    assert unexplained == {}, "write through a narrow writer of tracker/source.py (built in tracker/apiserver/requests.py)"
    assert sorted(p for p in EXEMPT if p not in found) == [], "no longer needed: drop these from EXEMPT"


def test_one_merge_patch_content_type() -> None:
    """`MERGE_PATCH` (tracker/apiserver/requests.py) is the one spelling, outside the fake API server's own table."""
    spelled = []
    tops = [d for d in sorted(ROOT.iterdir()) if d.is_dir() and (d / "__init__.py").is_file()]  # the packages, not .venv
    for path in (p for top in tops for p in sorted(top.rglob("*.py"))):
        rel = path.relative_to(ROOT).as_posix()
        if path != Path(__file__) and MERGE_PATCH_TEXT in path.read_text() and not rel.startswith(MERGE_PATCH_HOMES):
            spelled.append(rel)
    assert spelled == [], "import MERGE_PATCH from tracker.apiserver.requests"
