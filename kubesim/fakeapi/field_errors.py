"""Field errors as the API server words them, for the 422 answers of every kind the fake validates.

One `FieldError` is one entry of a Kubernetes `field.ErrorList`: a Status
cause (reason, field, message) and the `field: detail` text the aggregate
message joins. The constructors below produce the detail texts the real
server prints, so a test that matches on a message matches a real cluster's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: the reason a Status cause carries, the field, and the text after it."""

    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueTooLong, FieldValueTooMany, FieldValueForbidden
    field: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.detail, "field": self.field}


def go_value(v: Any) -> str:
    """How `field.Invalid` prints a value: strings quoted, objects and lists by their type."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return '"object"'
    if isinstance(v, list):
        return '"array"'
    if v is None:
        return "null"
    return str(v)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, f"Required value: {detail}" if detail else "Required value")


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {go_value(value)}: {detail}")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, f"Forbidden: {detail}")


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path, f"Duplicate value: {go_value(value)}")


def not_found(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueNotFound", path, f"Not found: {go_value(value)}")


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    listed = ", ".join(json.dumps(s) for s in supported)
    return FieldError("FieldValueNotSupported", path, f"Unsupported value: {go_value(value)}: supported values: {listed}")


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError("FieldValueTooMany", path, f"Too many: {count}: must have at most {limit} items")


def too_long(path: str, limit: int) -> FieldError:
    return FieldError("FieldValueTooLong", path, f"Too long: may not be more than {limit} bytes")
