"""Alertmanager's webhook payload (and Grafana's variant) parsed once at the edge.

Alertmanager's `webhook_config` posts `version: "4"` with `alerts[]`, each
with `status` (firing|resolved), `labels`, `annotations`, `startsAt`,
`endsAt` and `fingerprint`. Grafana's contact point posts the same alert
shape under `version: "1"` with `orgId`/`state`. Anything else is a
`BadPayload` naming the field, answered 400: a retry would not fix it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tracker.timestamps import parse_rfc3339

FINGERPRINT_KEPT = 64  # characters of a fingerprint kept as is (Alertmanager's and Grafana's have 16)


def alert_key(fingerprint: str) -> str:
    """The ladder's signal key of an alert: a longer fingerprint (not from Alertmanager) by its hash, so a state stays bounded."""
    if len(fingerprint) <= FINGERPRINT_KEPT:
        return "alert:" + fingerprint
    return "alert:sha256:" + hashlib.sha256(fingerprint.encode()).hexdigest()[:40]


class BadPayload(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.field = path


@dataclass(frozen=True, slots=True)
class Alert:
    status: Literal["firing", "resolved"]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str
    ends_at: str
    fingerprint: str

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    @property
    def key(self) -> str:
        return alert_key(self.fingerprint)


@dataclass(frozen=True, slots=True)
class Delivery:
    source: Literal["alertmanager", "grafana"]
    receiver: str
    alerts: tuple[Alert, ...]


def _strings(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadPayload(path, f"must be an object of strings, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise BadPayload(f"{path}.{k}", f"must be a string, got {type(v).__name__}")
    return value


def _time(value: Any, path: str, *, required: bool) -> str:
    if value is None or value == "":
        if required:
            raise BadPayload(path, "is required")
        return ""
    if not isinstance(value, str) or parse_rfc3339(value) is None:
        raise BadPayload(path, f"must be an RFC 3339 time, got {value!r}")
    return value


def _alert(raw: Any, path: str) -> Alert:
    if not isinstance(raw, dict):
        raise BadPayload(path, f"must be an object, got {type(raw).__name__}")
    status = raw.get("status")
    if status not in ("firing", "resolved"):
        raise BadPayload(f"{path}.status", f"must be firing or resolved, got {status!r}")
    fingerprint = raw.get("fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise BadPayload(f"{path}.fingerprint", "is required (a non-empty string)")
    if "labels" not in raw:
        raise BadPayload(f"{path}.labels", "is required")
    return Alert(
        status=status,
        labels=_strings(raw.get("labels"), f"{path}.labels"),
        annotations=_strings(raw.get("annotations"), f"{path}.annotations"),
        starts_at=_time(raw.get("startsAt"), f"{path}.startsAt", required=True),
        ends_at=_time(raw.get("endsAt"), f"{path}.endsAt", required=False),
        fingerprint=fingerprint,
    )


_SPACE = re.compile(r"[ \t\n\r]*")


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_not_a_number)


def _load(text: str) -> Any:
    """The body's JSON, decoded a top-level member and an alert at a time.

    A delivery of 20,000 alerts takes ~150-200 ms to decode in one call,
    during which the decoder holds the interpreter lock and the thread that
    answers /filter waits; one short call per alert lets the interpreter
    switch threads between them (every 5 ms). Strict JSON as one call would
    decode it: a syntax error, NaN or trailing data raises ValueError.
    """

    def space(i: int) -> int:
        m = _SPACE.match(text, i)
        return m.end() if m else i

    def expect(i: int, what: str) -> int:
        if not text.startswith(what, i):
            raise ValueError(f"expected {what!r} at character {i}")
        return space(i + 1)

    i = space(0)
    if not text.startswith("{", i):
        return _DECODER.decode(text)  # not an object: parse_delivery says so
    doc: dict[str, Any] = {}
    i = space(i + 1)
    while not text.startswith("}", i):
        if doc:
            i = expect(i, ",")
        key, i = _DECODER.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError(f"expected a member name at character {i}")
        i = expect(space(i), ":")
        if key == "alerts" and text.startswith("[", i):
            alerts: list[Any] = []
            i = space(i + 1)
            while not text.startswith("]", i):
                if alerts:
                    i = expect(i, ",")
                alert, i = _DECODER.raw_decode(text, i)
                alerts.append(alert)
                i = space(i)
            doc[key], i = alerts, i + 1
        else:
            doc[key], i = _DECODER.raw_decode(text, i)
        i = space(i)
    if space(i + 1) != len(text):
        raise ValueError(f"extra data at character {space(i + 1)}")
    return doc


def parse_delivery(body: bytes) -> Delivery:
    """One webhook body; BadPayload names the first faulty field."""
    try:
        doc = _load(body.decode("utf-8"))
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadPayload("body", f"is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadPayload("body", f"must be a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    if version == "4":
        source: Literal["alertmanager", "grafana"] = "alertmanager"
    elif version == "1" and ("orgId" in doc or "state" in doc):
        source = "grafana"
    elif "version" not in doc:
        raise BadPayload("version", 'is required ("4" from Alertmanager, "1" from Grafana)')
    else:
        raise BadPayload("version", f'unknown webhook version {version!r}: expected "4" (Alertmanager) or "1" (Grafana)')
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise BadPayload("alerts", "is required (a list)")
    receiver = doc.get("receiver", "")
    if not isinstance(receiver, str):
        raise BadPayload("receiver", "must be a string")
    return Delivery(source, receiver, tuple(_alert(a, f"alerts[{i}]") for i, a in enumerate(alerts)))
