"""The three PATCH formats: JSON merge (RFC 7386), strategic merge, JSON patch (RFC 6902).

Strategic merge is a context-free approximation of the Go struct tags: a
list is merged by key when its field name has a known `patchMergeKey`
(`conditions` by `type`, `containers` by `name`, `reservedFor` by `uid`,
...), `finalizers` merge as a set, other lists are replaced; the `$patch`
(replace/delete), `$deleteFromPrimitiveList/` and `$setElementOrder/`
directives are understood. That covers what controllers send in practice
(e.g. one pod condition patched into `status.conditions`).
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch does not apply (a failed `test`, a bad path): answers 422."""


# ------------------------------------------------------------------ merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a patch object merges key by key (recursively), a null member removes the key, any other value replaces.

    The fake's own, not the extender's: a test that sends both the same patch can see them differ.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
            continue
        merged[key] = merge_patch(merged.get(key), value)
    return merged


# ------------------------------------------------------------------ strategic merge patch

MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "reservedFor": "uid",
    "resourceClaims": "name",
    "resourceClaimStatuses": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
SET_LISTS = frozenset({"finalizers"})


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(map(_hashable, value or []))
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if _hashable(v) not in drop]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, list):
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(current, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    return result


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


def _merge_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if field in SET_LISTS:
        out = list(current)
        seen = set(map(_hashable, out))
        for v in patch:
            if _hashable(v) not in seen:
                out.append(v)
                seen.add(_hashable(v))
        return out
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return [copy.deepcopy(p) for p in patch]
    out = [dict(c) if isinstance(c, dict) else c for c in current]
    for item in patch:
        ident = item.get(key)
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == ident), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


# ------------------------------------------------------------------ JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"path {path!r}: {p!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, path)]
        else:
            raise PatchError(f"path {path!r}: cannot descend into a scalar")
    return cur


def _index(lst: list[Any], token: str, path: str, *, for_add: bool = False) -> int:
    if for_add and token == "-":
        return len(lst)
    if not token.isdigit():
        raise PatchError(f"path {path!r}: {token!r} is not an array index")
    i = int(token)
    if i > len(lst) or (i == len(lst) and not for_add):
        raise PatchError(f"path {path!r}: index {i} out of range")
    return i


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path)]
    raise PatchError(f"path {path!r} not found")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, for_add=True), value)
    else:
        raise PatchError(f"path {path!r}: parent is not a container")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} not found")
        del parent[last]
    elif isinstance(parent, list):
        parent.pop(_index(parent, last, path))
    else:
        raise PatchError(f"path {path!r} not found")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 add/remove/replace/move/copy/test on a deep copy of `target`."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind} at {path!r} has no value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            if _pointer(path):
                doc = _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"test operation failed at {path!r}")
        else:
            raise PatchError(f"unknown operation {kind!r}")
    return doc
