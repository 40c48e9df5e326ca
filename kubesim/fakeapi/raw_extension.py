"""RawExtension bytes as the real API server keeps them.

A ResourceClaim's `spec.devices.config[].opaque.parameters` is a
RawExtension: the API server stores the bytes exactly as the creator sent
them, answers reads with them compacted, and compares them byte-wise when it
checks that an update leaves the immutable spec alone. A client that reads a
claim and writes it back re-serialized (say with spaces after `:`) is refused
with "field is immutable" although nothing changed. The fake server keeps
the creator's bytes beside the stored object so the tests meet that too.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from typing import Any

import orjson

# Where RawExtensions sit in the kinds whose spec is immutable.
PARAMETER_PATHS: dict[str, tuple[str, ...]] = {
    "resourceclaims": ("spec", "devices", "config"),
    "resourceclaimtemplates": ("spec", "spec", "devices", "config"),
}


class _SpanDecoder(json.JSONDecoder):
    """The stdlib decoder with the pure-Python scanner, recording where each object starts and ends."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[int, tuple[int, int]] = {}
        self.keep: list[Any] = []  # keeps ids stable until the caller is done

        def parse_object(s_and_end: tuple[str, int], *args: Any) -> tuple[Any, int]:
            start = s_and_end[1] - 1  # the scanner has consumed the opening brace
            obj, end = json.decoder.JSONObject(s_and_end, *args)  # type: ignore[attr-defined]  # the pure-Python decoder's object hook: no stub
            self.spans[id(obj)] = (start, end)
            self.keep.append(obj)
            return obj, end

        self.parse_object = parse_object  # same call shape as JSONObject
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]  # the pure-Python scanner: no stub


def raw_parameters(body: bytes, plural: str) -> list[bytes] | None:
    """The bytes of every `opaque.parameters` in a JSON body, in config order (None: not such a kind or body)."""
    path = PARAMETER_PATHS.get(plural)
    if path is None:
        return None
    try:
        text = body.decode()
        decoder = _SpanDecoder()
        doc = decoder.decode(text)
    except (UnicodeDecodeError, ValueError):
        return None
    configs: Any = doc
    for key in path:
        configs = configs.get(key) if isinstance(configs, dict) else None
    out: list[bytes] = []
    for config in configs if isinstance(configs, list) else ():
        params = ((config or {}).get("opaque") or {}).get("parameters") if isinstance(config, dict) else None
        span = decoder.spans.get(id(params)) if isinstance(params, dict) else None
        out.append(text[span[0] : span[1]].encode() if span else orjson.dumps(params))
    return out


def stored_parameters(obj: dict[str, Any], plural: str) -> list[bytes]:
    """The compact bytes of a stored object's parameters (objects the tests created without HTTP)."""
    configs: Any = obj
    for key in PARAMETER_PATHS.get(plural, ()):
        configs = configs.get(key) if isinstance(configs, dict) else None
    return [
        orjson.dumps(((c or {}).get("opaque") or {}).get("parameters")) if isinstance(c, dict) else b"null"
        for c in (configs if isinstance(configs, list) else ())
    ]


class RawParameters:
    """The creators' parameter bytes, by (plural, namespace, name, uid), and the byte-wise check an update must pass."""

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, str, str, str], list[bytes]] = {}

    @staticmethod
    def _key(plural: str, obj: dict[str, Any]) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        return (plural, meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "")

    def remember(self, plural: str, obj: dict[str, Any], raw: list[bytes] | None) -> None:
        if raw is not None:
            self._bytes[self._key(plural, obj)] = raw

    def unchanged(self, plural: str, current: dict[str, Any], raw: list[bytes] | None) -> bool:
        """Whether an update's parameters are the stored object's, byte for byte (True when there is nothing to compare)."""
        if raw is None:
            return True
        stored = self._bytes.get(self._key(plural, current))
        if stored is None:
            stored = stored_parameters(current, plural)
        return raw == stored
