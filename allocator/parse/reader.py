"""The JSON walker every parser uses, its error, and object metadata."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, overload

from allocator.types import (
    ObjectMeta,
)


class ValidationError(ValueError):
    """An API object that does not have the shape the API defines.

    `obj` is `Kind namespace/name` (or `Kind name`), `field` a JSON path such
    as `spec.devices[2].attributes.model`.
    """

    def __init__(self, obj: str, field_path: str, message: str) -> None:
        self.obj = obj
        self.field = field_path
        self.reason = message
        super().__init__(f"{obj}: {field_path}: {message}" if field_path else f"{obj}: {message}")


class _Reader:
    """Walks one object's JSON, remembering the path for error messages."""

    __slots__ = ("obj",)

    def __init__(self, obj: str) -> None:
        self.obj = obj

    def fail(self, path: str, message: str) -> ValidationError:
        return ValidationError(self.obj, path, message)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {_json_type(value)}")
        return value

    def seq(self, value: Any, path: str, *, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {_json_type(value)}")
        return value

    def string(self, value: Any, path: str, *, required: bool = False, default: str = "") -> str:
        if value is None:
            if required:
                raise self.fail(path, "required field is missing")
            return default
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, not {_json_type(value)}")
        if required and not value:
            raise self.fail(path, "must not be empty")
        return value

    @overload
    def integer(self, value: Any, path: str, *, default: int) -> int: ...

    @overload
    def integer(self, value: Any, path: str, *, default: None = None) -> int | None: ...

    def integer(self, value: Any, path: str, *, default: int | None = None) -> int | None:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {_json_type(value)}")
        return value

    def boolean(self, value: Any, path: str, *, default: bool = False) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(path, f"must be a boolean, not {_json_type(value)}")
        return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _object_ref(kind: str, raw: Any) -> str:
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"{kind} <unnamed>"
    name = meta.get("name") if isinstance(meta.get("name"), str) else "<unnamed>"
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if isinstance(ns, str) and ns else f"{kind} {name}"


INTERN_MAX = 64  # longer strings are rarely shared (descriptions, serials, hashes)


def interned_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A copy of `labels` with one string object per distinct key and short value in the process.

    Every Node (and most pods) repeats the same label keys and most values (`kubernetes.io/arch: amd64`,
    a zone, an instance type): decoded page by page, each would be its own string, held as long as the
    object (about 0.6 KB a heavy Node, bench/results/issue-31-memory.md).
    """
    intern = sys.intern
    return {intern(k): intern(v) if len(v) <= INTERN_MAX else v for k, v in labels.items()}


def parse_meta(r: _Reader, raw: Mapping[str, Any], *, namespaced: bool) -> ObjectMeta:
    meta = r.mapping(raw.get("metadata"), "metadata", required=True)
    labels = r.mapping(meta.get("labels"), "metadata.labels")
    annotations = r.mapping(meta.get("annotations"), "metadata.annotations")
    for k, v in labels.items():
        if not isinstance(v, str):
            raise r.fail(f"metadata.labels.{k}", "must be a string")
    for k, v in annotations.items():
        if not isinstance(v, str):
            raise r.fail(f"metadata.annotations.{k}", "must be a string")
    finalizers = tuple(r.string(f, f"metadata.finalizers[{i}]") for i, f in enumerate(r.seq(meta.get("finalizers"), "metadata.finalizers")))
    rv = meta.get("resourceVersion")
    return ObjectMeta(
        name=r.string(meta.get("name"), "metadata.name", required=True),
        namespace=r.string(meta.get("namespace"), "metadata.namespace", default="default" if namespaced else "") if namespaced else "",
        uid=r.string(meta.get("uid"), "metadata.uid"),
        resource_version=str(rv) if rv is not None else "",
        generation=r.integer(meta.get("generation"), "metadata.generation", default=0) or 0,
        creation_timestamp=r.string(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        labels=interned_labels(labels),
        annotations=dict(annotations),
        finalizers=finalizers,
        deletion_timestamp=r.string(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
    )
