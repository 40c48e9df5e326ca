"""Reading one manifest file into validated objects (no state, thread-safe).

What a file yields depends only on its bytes, so the source caches the result
per file content and re-parses only files that changed. Time-dependent
defaults (creationTimestamp, taint timeAdded) are *not* filled here: the
source fills them when an object wins, so they stay stable across reloads.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final

import orjson
import yaml

from allocator import api_limits as schema
from allocator.parse import (
    ValidationError,
    parse_device_class,
    parse_device_taint_rule,
    parse_node,
    parse_pod,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
    parse_resource_slice_patch,
)
from allocator.types import EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, EFFECT_NONE
from tracker import events as ev
from tracker.timestamps import rfc3339

log = logging.getLogger("dra_extender.source")

SUFFIXES: Final = (".yaml", ".yml", ".json")
MAX_FILE_BYTES: Final = 64 * 1024 * 1024
MAX_DEPTH: Final = 100  # deeper than any API object; also stops alias cycles
MAX_YAML_DEPTH: Final = 500  # what libyaml's recursive composer may be given (see _check_yaml_depth)
MAX_NODES_BASE: Final = 100_000  # + 2 per byte: a file's node budget, counting alias expansion (YAML bombs)
UID_NAMESPACE: Final = uuid.UUID("6f1d5a52-3a0c-4b8e-9d2f-0d2a7e1c5b11")
_INT64 = (-(2**63), 2**63 - 1)

Identity = tuple[str, str, str]  # (kind, group, key)

# (kind, group) pairs the sink is given as full lists, so deletions reconcile.
TRACKED: Final[tuple[tuple[str, str], ...]] = (
    (ev.NODE, ev.GROUP_CORE),
    (ev.POD, ev.GROUP_CORE),
    (ev.NAMESPACE, ev.GROUP_CORE),
    (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE),
    (ev.DEVICE_CLASS, ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER),
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER),
    (ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE),
    (ev.PERSISTENT_VOLUME, ev.GROUP_CORE),
)

_DRA_VERSIONS = frozenset({"v1", "v1beta2", "v1beta1"})
# (kind, apiVersion group) -> (served versions, the event group the object is filed under).
ACCEPTED: Final[dict[tuple[str, str], tuple[frozenset[str], str]]] = {
    (ev.NODE, ""): (frozenset({"v1"}), ev.GROUP_CORE),
    (ev.POD, ""): (frozenset({"v1"}), ev.GROUP_CORE),
    (ev.NAMESPACE, ""): (frozenset({"v1"}), ev.GROUP_CORE),
    (ev.PERSISTENT_VOLUME_CLAIM, ""): (frozenset({"v1"}), ev.GROUP_CORE),
    (ev.PERSISTENT_VOLUME, ""): (frozenset({"v1"}), ev.GROUP_CORE),
    (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE): (_DRA_VERSIONS, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE): (_DRA_VERSIONS, ev.GROUP_RESOURCE),
    (ev.RESOURCE_CLAIM_TEMPLATE, ev.GROUP_RESOURCE): (_DRA_VERSIONS, ev.GROUP_RESOURCE),
    (ev.DEVICE_CLASS, ev.GROUP_RESOURCE): (_DRA_VERSIONS, ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE): (frozenset({"v1", "v1beta2", "v1alpha3"}), ev.GROUP_RESOURCE),
    (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER): (frozenset({"v1alpha1"}), ev.GROUP_EXTENDER),
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER): (frozenset({"v1alpha1"}), ev.GROUP_EXTENDER),
    # KEP-5027 spelled it in resource.k8s.io; never served upstream, filed under ours.
    (ev.RESOURCE_SLICE_PATCH, ev.GROUP_RESOURCE): (
        frozenset({"v1alpha3", "v1beta1", "v1beta2", "v1"}),
        ev.GROUP_EXTENDER,
    ),
}


@dataclass(frozen=True, slots=True)
class LoadError:
    """One thing skipped: a whole file (object/field empty) or one object."""

    path: str
    message: str
    object: str = ""  # "Kind namespace/name" or "Kind name"
    field: str = ""  # JSON path, e.g. spec.taint.key


@dataclass(frozen=True, slots=True)
class Candidate:
    """A valid object from a file, with static defaults filled (namespace, uid)."""

    ident: Identity
    raw: dict[str, Any]
    path: str


@dataclass(frozen=True, slots=True)
class FileResult:
    digest: bytes  # of the file's bytes: unchanged bytes are not parsed again
    candidates: tuple[Candidate, ...]
    errors: tuple[LoadError, ...]
    ignored: tuple[tuple[str, str], ...]  # (apiVersion, kind) of each ignored object


class _KubeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # the base is picked at run time (libyaml's loader when built)
    """YAML as Kubernetes reads it: timestamps stay strings (sigs.k8s.io/yaml goes through JSON)."""


_KubeLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in _KubeLoader.yaml_implicit_resolvers.items()
}


def json_copy(value: Any) -> Any:
    """A deep copy of plain JSON data, several times faster than copy.deepcopy."""
    return orjson.loads(orjson.dumps(value))


def manifest_files(directory: Path, on_error: Callable[[str, str], None]) -> list[Path]:
    """Every manifest under `directory`, sorted by path.

    Hidden entries (`.git`, editor swap files, a ConfigMap volume's `..data`
    timestamped copies) are skipped: they would only duplicate or half-write
    the visible files. Symlinked files are read; symlinked directories are
    not followed (no loops).
    """
    found: list[Path] = []

    def onerror(e: OSError) -> None:
        on_error(str(e.filename or directory), f"cannot list directory: {e.strerror or e}")

    for root, dirs, files in os.walk(directory, onerror=onerror):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith(".") and name.endswith(SUFFIXES):
                found.append(Path(root, name))
    return sorted(found)


class _TooManyNodes(ValueError):
    """A file whose documents expand (through aliases) far beyond its size: skipped whole."""


def _short(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "..."


def _to_json_tree(doc: Any, budget: list[int]) -> tuple[str, str] | None:
    """Make a parsed document plain JSON in place; else (field, reason) why it cannot be.

    YAML can produce what the API cannot hold (non-string keys, bytes, sets,
    NaN, huge ints) and, with aliases, bombs and cycles: all are refused here
    so nothing downstream (copying, hashing, serialising) can blow up.
    """
    stack: list[tuple[Any, int, str]] = [(doc, 0, "")]
    while stack:
        node, depth, path = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooManyNodes("too many nodes for the file's size (YAML alias expansion?)")
        if depth > MAX_DEPTH:
            return _short(path), f"nested deeper than {MAX_DEPTH} levels (or an alias cycle)"
        if isinstance(node, dict):
            for k in list(node):
                if not isinstance(k, str):
                    return _short(path), f"key {str(k)[:40]!r} is not a string"
                v = node[k]
                if isinstance(v, datetime):
                    node[k] = rfc3339(v)
                elif isinstance(v, date):
                    node[k] = v.isoformat()
                else:
                    stack.append((v, depth + 1, f"{path}.{k}" if path else k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, datetime):
                    node[i] = rfc3339(v)
                elif isinstance(v, date):
                    node[i] = v.isoformat()
                else:
                    stack.append((v, depth + 1, f"{path}[{i}]"))
        elif isinstance(node, bool) or node is None or isinstance(node, str):
            continue
        elif isinstance(node, int):
            if not _INT64[0] <= node <= _INT64[1]:
                return _short(path), "integer out of the 64-bit range"
        elif isinstance(node, float):
            if node != node or node in (float("inf"), float("-inf")):
                return _short(path), "not a finite number"
        else:
            return _short(path), f"a {type(node).__name__} is not a JSON value"
    return None


_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _check_yaml_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_YAML_DEPTH before libyaml's composer sees it.

    The C composer recurses per level without a limit and crashes the
    process (SIGSEGV) on a few thousand `[`; the event parser is iterative.
    Every collection on a nesting path owns one of `[{-?:`, so texts with
    few of them (most manifests) skip this pass.
    """
    if sum(text.count(c) for c in "[{-?:") <= MAX_YAML_DEPTH:
        return
    depth = 0
    for event in yaml.parse(text, Loader=_KubeLoader):
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ValueError(f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, _CLOSES):
            depth -= 1


def _documents(path: Path, data: bytes) -> list[Any]:
    """The documents of one file; raises on a syntax error (the file is skipped)."""
    if path.suffix == ".json":
        return [orjson.loads(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)]
    text = data.decode("utf-8-sig")
    _check_yaml_depth(text)
    return [d for d in yaml.load_all(text, Loader=_KubeLoader) if d is not None]


def _object_ref(kind: str, doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return f"{kind} <unnamed>"
    ns = meta.get("namespace") if kind in ev.NAMESPACED_KINDS else None
    if kind in ev.NAMESPACED_KINDS:
        ns = ns if isinstance(ns, str) and ns else "default"
    return f"{kind} {ns}/{meta['name']}" if ns else f"{kind} {meta['name']}"


def _flatten(docs: list[Any], depth: int = 0) -> Iterator[Any]:
    """Expand `kind: List` (items carry their own kind) and `XxxList` (items may omit it)."""
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        items = doc.get("items") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list) and depth < 3:
            item_kind = kind[: -len("List")]
            filled = []
            for item in items:
                if isinstance(item, dict) and item_kind:
                    item = dict(item)
                    item.setdefault("kind", item_kind)
                    if isinstance(doc.get("apiVersion"), str):
                        item.setdefault("apiVersion", doc["apiVersion"])
                filled.append(item)
            yield from _flatten(filled, depth + 1)
        elif isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            yield doc  # items is not a list: reported as an invalid object
        else:
            yield doc


def validate(kind: str, group: str, raw: dict[str, Any], obj: str) -> None:
    """The allocator's parser for the kind, then the API server's/CRD's extra rules."""
    schema.check_metadata_limits(obj, raw.get("metadata") or {})
    if kind == ev.NODE:
        parse_node(raw)
    elif kind == ev.POD:
        parse_pod(raw)
    elif kind == ev.RESOURCE_SLICE:
        schema.check_slice_limits(obj, raw)
        parse_resource_slice(raw)
        schema.check_slice_taints(obj, raw)
    elif kind == ev.RESOURCE_CLAIM:
        parse_resource_claim(raw)
    elif kind == ev.RESOURCE_CLAIM_TEMPLATE:
        parse_resource_claim_template(raw)
    elif kind == ev.DEVICE_CLASS:
        parse_device_class(raw)
    elif kind == ev.DEVICE_TAINT_RULE:
        parse_device_taint_rule(raw, group=group)
        schema.check_device_taint_rule(obj, raw, own_crd=group == ev.GROUP_EXTENDER)
    elif kind == ev.RESOURCE_SLICE_PATCH:
        parse_resource_slice_patch(raw)
        schema.check_resource_slice_patch(obj, raw)


_KNOWN_EFFECTS = frozenset({EFFECT_NONE, EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})


def unknown_effects(kind: str, raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, effect) of every device taint whose effect this version does not know.

    They load and act like None, as upstream treats effects added by newer
    versions; but an operator's typo must not go unnoticed. (Our own CRD's
    rules never get here: its enum refuses them in `check_device_taint_rule`.)
    """
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        return []
    out: list[tuple[str, str]] = []
    if kind == ev.DEVICE_TAINT_RULE:
        taint = spec.get("taint")
        effect = taint.get("effect") if isinstance(taint, dict) else None
        if isinstance(effect, str) and effect not in _KNOWN_EFFECTS:
            out.append(("spec.taint.effect", effect))
    elif kind == ev.RESOURCE_SLICE:
        for i, device in enumerate(spec.get("devices") or []):
            taints = device.get("taints") if isinstance(device, dict) else None
            for j, taint in enumerate(taints if isinstance(taints, list) else []):
                effect = taint.get("effect") if isinstance(taint, dict) else None
                if isinstance(effect, str) and effect not in _KNOWN_EFFECTS:
                    out.append((f"spec.devices[{i}].taints[{j}].effect", effect))
    return out


def _candidate(doc: Any, path: str, budget: list[int]) -> Candidate | LoadError | tuple[str, str]:
    """One document: a valid object, the error that skips it, or (apiVersion, kind) if ignored."""
    if not isinstance(doc, dict):
        return LoadError(path, f"document is a {type(doc).__name__}, not an object")
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    for value, name in ((api_version, "apiVersion"), (kind, "kind")):
        if not isinstance(value, str) or not value:
            ref = _object_ref(kind if isinstance(kind, str) and kind else "object", doc)
            return LoadError(path, "required field is missing" if value is None else "must be a non-empty string", ref, name)
    assert isinstance(kind, str) and isinstance(api_version, str)
    api_group, _, version = api_version.rpartition("/")
    obj = _object_ref(kind, doc)
    if kind.endswith("List") and "items" in doc:
        return LoadError(path, "must be a list", obj, "items")
    if kind not in ev.KNOWN_KINDS:
        return (api_version, kind)
    accepted = ACCEPTED.get((kind, api_group))
    if accepted is None or version not in accepted[0]:
        wanted = sorted(f"{g}/{v}" if g else v for (k, g), (vs, _) in ACCEPTED.items() if k == kind for v in vs)
        return LoadError(path, f"unsupported apiVersion {api_version!r} for {kind} (want one of {', '.join(wanted)})", obj, "apiVersion")
    group = accepted[1]
    problem = _to_json_tree(doc, budget)
    if problem is not None:
        return LoadError(path, problem[1], obj, problem[0])
    try:
        raw = json_copy(doc)  # YAML aliases may share nodes (between List items, too): unshare them
    except (TypeError, ValueError) as e:  # e.g. a string orjson cannot encode
        return LoadError(path, f"not JSON-compatible: {e}", obj)
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        return LoadError(path, "required field is missing" if meta is None else "must be an object", obj, "metadata")
    namespaced = kind in ev.NAMESPACED_KINDS
    try:
        schema.check_object_name(obj, namespaced, meta)
        if namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)  # the API server ignores it on cluster-scoped kinds
        key = ev.object_key(kind, raw)
        meta.setdefault("uid", str(uuid.uuid5(UID_NAMESPACE, f"{kind}/{group}/{key}")))
        validate(kind, group, raw, obj)
    except ValidationError as e:
        return LoadError(path, e.reason, e.obj or obj, e.field)
    except Exception as e:
        return LoadError(path, f"invalid: {type(e).__name__}: {e}", obj)
    for field_path, effect in unknown_effects(kind, raw):
        log.warning(
            "unknown taint effect: nothing is evicted or blocked (treated as None)",
            extra={"path": path, "object": obj, "field": field_path, "effect": effect, "known": sorted(_KNOWN_EFFECTS)},
        )
    return Candidate((kind, group, key), raw, path)


def read_file(path: Path, data: bytes, digest: bytes) -> FileResult:
    """Parse and validate one file's bytes, logging what is skipped."""
    where = str(path)
    try:
        docs = _documents(path, data)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        log.error("skipping manifest file that does not parse", extra={"path": where, "err": first})
        return FileResult(digest, (), (LoadError(where, f"does not parse: {first}"),), ())
    candidates: list[Candidate] = []
    errors: list[LoadError] = []
    ignored: list[tuple[str, str]] = []
    budget = [MAX_NODES_BASE + 2 * len(data)]
    results = []
    try:
        for doc in _flatten(docs):
            results.append(_candidate(doc, where, budget))
    except _TooManyNodes as e:
        log.error("skipping manifest file that does not parse", extra={"path": where, "err": str(e)})
        return FileResult(digest, (), (LoadError(where, f"does not parse: {e}"),), ())
    for result in results:
        if isinstance(result, Candidate):
            candidates.append(result)
        elif isinstance(result, LoadError):
            errors.append(result)
            log.error(
                "skipping invalid object",
                extra={"path": where, "object": result.object, "field": result.field, "err": result.message},
            )
        else:
            ignored.append(result)
    return FileResult(digest, tuple(candidates), tuple(errors), tuple(ignored))
