"""Every repository file and Python symbol the docs name exists (issue 40, item 7).

A doc that names a module, a class's method or a file the code no longer has
sends its reader to nothing; the layout moves of issue 40 left design.md with
such names. This reads the backticked names and relative links of
docs/*.md and README.md and resolves each:

- a path (`tracker/state.py`, `views/`, `bench/results/*.md`) against the
  repository: one that starts with a top-level directory must exist as
  written; a shorter one (`views/devices.py`, `types.py`, named inside a
  package's paragraph) must be the tail of some repository path;
- a dotted Python name (`ClusterState.reserve`, `allocator.pod_claims.dra_use`,
  `asyncio.timeout`) by importing its module and getattr (for `Class.attr`,
  the class is found among the repository's class definitions; an attribute
  set in `__init__` or declared as a field counts);
- a bare name with an underscore (`raw_needs_extender`, `TAKEOVER_MARGIN`) must
  be defined somewhere in the repository's Python, or be a metric the code
  registers.

Names that belong to upstream Kubernetes (its Go paths and identifiers) are
not in this repository; each kind is listed in UPSTREAM with the reason.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SKIP_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()  # its rows name missing things on purpose
FILE_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".tsv", ".tpl", ".cfg", ".sh", ".go"}

# Upstream names the docs cite on purpose, each with why it is not checked here.
UPSTREAM: dict[str, str] = {
    "staging/": "kubernetes/kubernetes staged libraries; the docs cite upstream source by its repository path",
    "pkg/": "kubernetes/kubernetes packages (scheduler, controllers, registry), cited as upstream source",
    "cmd/": "kubernetes/kubernetes commands, cited as upstream source",
    "test/": "kubernetes/kubernetes tests (integration, e2e), cited as upstream source",
    ".go": "a Go file of upstream Kubernetes or client-go; this repository has no Go",
    "group_interval": "Alertmanager's route setting (upstream Go), which health.md tells operators to set",
    "repeat_interval": "Alertmanager's route setting (upstream Go), which health.md tells operators to set",
    "webhook_config": "Alertmanager's receiver kind (upstream Go) whose body the alert receiver reads",
    "webhook_configs": "Alertmanager's receiver list (upstream Go), as an operator writes it",
}


@dataclass(frozen=True, slots=True)
class Name:
    """One name a doc gives: the text between backticks, or a link target."""

    doc: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: `{self.text}`"


def _names(doc: Path) -> Iterator[Name]:
    in_fence = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for text in re.findall(r"`([^`\n]+)`", line):
            yield Name(doc.name, number, text)
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"[a-z]+:", target):
                yield Name(doc.name, number, "link:" + (target if not target.startswith("#") else doc.name + target))


@cache
def _repo_paths() -> tuple[frozenset[str], frozenset[str]]:
    """(files, directories), relative to the root, with `/` after each directory."""
    files: set[str] = set()
    dirs: set[str] = set()
    stack = [ROOT]
    while stack:
        for entry in stack.pop().iterdir():
            if entry.name in SKIP_DIRS or entry.name.endswith(".egg-info"):
                continue
            rel = entry.relative_to(ROOT).as_posix()
            if entry.is_dir():
                dirs.add(rel + "/")
                stack.append(entry)
            else:
                files.add(rel)
    return frozenset(files), frozenset(dirs)


def _top_dirs() -> set[str]:
    return {d.split("/")[0] for d in _repo_paths()[1]}


def _is_path(text: str) -> bool:
    if " " in text or text.startswith(("/", "~", ".", "-", "*")) or "://" in text:
        return False
    first = text.split("/")[0]
    if first in _top_dirs() and "/" in text:
        return True
    if "." in first and "/" in text and not first.endswith(tuple(FILE_SUFFIXES)):
        return False  # an API group, annotation or label key: resource.k8s.io/v1
    last = text.rstrip("/").rsplit("/", 1)[-1]
    return text.endswith("/") or Path(last).suffix in FILE_SUFFIXES


@cache
def _anchors(doc: Path) -> frozenset[str]:
    """The anchors GitHub gives a markdown file's headings (lower case, punctuation dropped, spaces to `-`)."""
    found: set[str] = set()
    in_fence = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (heading := re.match(r"#+ (.*)", line)):
            found.add(re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-"))
        found.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return frozenset(found)


def _upstream(text: str) -> bool:
    return text in UPSTREAM or text.startswith(tuple(k for k in UPSTREAM if k.endswith("/"))) or text.endswith(".go")


def _path_exists(text: str, base: str = "") -> bool:
    files, dirs = _repo_paths()
    everything = files | dirs
    if base:
        target = (ROOT / base / text).resolve()
        return target.exists() and ROOT in target.parents
    if text.split("/")[0] in _top_dirs() and "/" in text:
        if "*" in text:
            return any(fnmatch.fnmatchcase(p, text) for p in everything)
        return text in everything or text + "/" in dirs
    pattern = "*/" + text
    return any(fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, text) for p in everything)


@cache
def _trees() -> tuple[tuple[str, str, ast.Module], ...]:
    """(path, module, syntax tree) of every Python file of the repository, parsed once for every check."""
    return tuple(
        (rel, rel[: -len(".py")].replace("/", ".").removesuffix(".__init__"), ast.parse((ROOT / rel).read_text()))
        for rel in sorted(_repo_paths()[0])
        if rel.endswith(".py") and rel != SELF
    )


@cache
def _python_index() -> tuple[dict[str, list[str]], frozenset[str], dict[tuple[str, str], frozenset[str]]]:
    """(class name -> modules defining it, every name defined anywhere, (module, class) -> self.attr names)."""
    classes: dict[str, list[str]] = {}
    defined: set[str] = set()
    instance_attrs: dict[tuple[str, str], frozenset[str]] = {}
    for _, module, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(module)
                attrs = {
                    t.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Assign | ast.AnnAssign)
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                }
                instance_attrs[(module, node.name)] = frozenset(attrs)
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            defined.add(n.id)
                        elif isinstance(n, ast.Attribute):
                            defined.add(n.attr)
    return classes, frozenset(defined), instance_attrs


@cache
def _code_words() -> frozenset[str]:
    """Every identifier the repository's Python uses and every string constant it holds (metric names, keys)."""
    found: set[str] = set()
    for rel, _, tree in _trees():
        found.add(Path(rel).stem)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
            elif isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                found.add(node.arg)
    return frozenset(found)


@cache
def _metrics() -> frozenset[str]:
    """Sample names Prometheus serves: the code's metric names with their suffixes, and the process collector's."""
    from prometheus_client import REGISTRY

    names = {sample.name for family in REGISTRY.collect() for sample in family.samples}
    for word in _code_words():
        if word.startswith("dra_extender_"):
            names |= {word, word + "_total", word + "_bucket", word + "_sum", word + "_count"}
    return frozenset(names)


def _has(obj: object, attr: str, owner: tuple[str, str] | None) -> bool:
    if hasattr(obj, attr):
        return True
    annotations = {k for klass in getattr(obj, "__mro__", ()) for k in getattr(klass, "__annotations__", {})}
    return attr in annotations or (owner is not None and attr in _python_index()[2].get(owner, frozenset()))


def _resolve_dotted(text: str) -> bool | None:
    """True or False for a Python name, None where `text` is not one (an API field path, a chart value)."""
    parts = text.removesuffix("()").split(".")
    classes = _python_index()[0]
    if parts[0] in classes:
        for module in classes[parts[0]]:
            obj: object = getattr(importlib.import_module(module), parts[0], None)
            if obj is not None and all(_has(obj, p, (module, parts[0])) for p in parts[1:2]):
                return True
        return False
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return None


def _chart_value(text: str) -> bool:
    values = yaml.safe_load((ROOT / "charts" / "dra-extender" / "values.yaml").read_text())
    for part in text.split("."):
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


def _problem(name: Name) -> str | None:
    """Why `name` resolves to nothing, or None."""
    text = name.text
    if text.startswith("link:"):
        target, _, anchor = text[len("link:") :].partition("#")
        base = "." if name.doc == "README.md" else "docs"
        if not _path_exists(target, base):
            return "no such file (link)"
        file = (ROOT / base / target).resolve()
        if anchor and file.suffix == ".md" and anchor not in _anchors(file):
            return f"no heading for #{anchor} in {file.relative_to(ROOT)}"
        return None
    if _upstream(text):
        return None
    if "::" in text and _is_path(text.split("::")[0]):
        path, *names = text.split("::")
        if not _path_exists(path):
            return "no such repository path"
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        return None if set(names) <= defined else "no such test in that file"
    if _is_path(text):
        return None if _path_exists(text) else "no such repository path"
    if re.search(r"\.(io|com|org|net|dev)$", text):
        return None  # an API group or a domain: resource.k8s.io
    if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(\(\))?", text):
        if _chart_value(text):
            return None
        resolved = _resolve_dotted(text)
        return "no such Python name" if resolved is False else None
    if re.fullmatch(r"_?[A-Za-z]+(_[A-Za-z0-9]+)+", text):
        known = text in _python_index()[1] or text in _code_words() or text in _metrics()
        return None if known else "no such Python name or metric"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_named_file_and_symbol_exists(doc: Path) -> None:
    missing = [f"{name}: {why}" for name in _names(doc) if (why := _problem(name)) is not None]
    assert not missing, "names the repository does not have:\n" + "\n".join(missing)


CHECKER_ROWS = {
    "a repository file": ("tracker/state.py", True),
    "a missing repository file": ("tracker/nowhere.py", False),
    "a tail of a repository path": ("views/devices.py", True),
    "a missing tail": ("views/nowhere.py", False),
    "a glob that matches": ("bench/results/*.md", True),
    "a class method": ("ClusterState.reserve", True),
    "a missing class method": ("ClusterState.no_such_method", False),
    "an attribute set in __init__": ("ClaimWrites.leading", True),
    "a module attribute": ("allocator.pod_claims.raw_needs_extender", True),
    "a missing module attribute": ("allocator.pod_claims.no_such_function", False),
    "a standard library name": ("asyncio.timeout", True),
    "a defined snake_case name": ("raw_needs_extender", True),
    "an undefined snake_case name": ("no_such_helper_here", False),
    "an upstream Go path": ("pkg/scheduler/schedule_one.go", True),
    "an API group, not a path": ("resource.k8s.io/v1", True),
    "an API field path, not Python": ("spec.taint.effect", True),
    "an API group, not Python": ("resource.k8s.io", True),
    "a metric the code registers": ("dra_extender_source_errors_total", True),
    "a metric the code does not register": ("dra_extender_no_such_thing_total", False),
    "a chart value": ("extender.eviction.mode", True),
    "a chart value the chart does not have": ("nowhere.eviction.mode", True),
    "a test by its pytest id": ("tests/docs/test_doc_names.py::test_checker_tells_present_from_missing", True),
    "a missing test": ("tests/docs/test_doc_names.py::test_nothing", False),
    "a directory without its slash": ("charts/dra-extender", True),
    "a link to a heading": ("link:design.md#leadership", True),
    "a link to a moved heading": ("link:design.md#partitions-at-5000-nodes", False),
    "a link to a missing file": ("link:nowhere.md", False),
}


@pytest.mark.parametrize(("text", "exists"), list(CHECKER_ROWS.values()), ids=list(CHECKER_ROWS))
def test_checker_tells_present_from_missing(text: str, exists: bool) -> None:
    assert (_problem(Name("row", 1, text)) is None) is exists
