"""Logging: human text, or one JSON object per line with klog's keys."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from tracker import events as ev

# uvicorn adds `color_message` (its message with ANSI escape codes) to every record: never ours to print.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName", "color_message"}
# uvicorn logs its lifecycle as "uvicorn.error" although nothing is wrong: shown as "uvicorn".
_LOGGER_NAMES = {"uvicorn.error": "uvicorn"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _name(record: logging.LogRecord) -> str:
    return _LOGGER_NAMES.get(record.name, record.name)


class JsonFormatter(logging.Formatter):
    """klog's JSON keys: ts (epoch ms), caller, msg, v, err, then the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created * 1000, 3),
            "caller": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
            "v": 0 if record.levelno >= logging.INFO else 4,
            "level": record.levelname.lower(),
            "logger": _name(record),
        }
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        for k, v in _extras(record).items():
            out[k] = v
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        extras = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}" for k, v in _extras(record).items())
        line = f"{ts} {record.levelname[0]} {_name(record)}: {record.getMessage()}"
        if extras:
            line += " " + extras
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(fmt: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "watchfiles", "celpy", "celpy.evaluation", "Evaluator", "NameContainer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# The kinds whose changes alter what devices look like (their taints, attributes, capacity, reach).
_DEVICE_KINDS = {"ResourceSlice", "DeviceTaintRule", "ResourceSlicePatch", "DeviceClass"}


def device_change_logger(slices_at_info: bool, ready: Callable[[], bool]) -> Callable[[ev.ObjectEvent], None]:
    """A tracker listener: one info line when a rule, patch, class (or, from a manifest directory, a slice) changes.

    Silent for the initial load (before `ready`) and for events that leave the spec as it was (status
    writes, re-lists). A cluster's drivers rewrite slices often, so there slice changes are logged at debug level.
    """
    changes = logging.getLogger("dra_extender.devices")
    seen: dict[tuple[str, str, str], int] = {}  # the hash of each object's spec: status writes and re-reads change nothing

    def on_event(event: ev.ObjectEvent) -> None:
        if event.kind not in _DEVICE_KINDS:
            return
        obj = event.object or {}
        spec = obj.get("spec") or {}
        ident = (event.kind, event.group, event.key)
        if event.type == "DELETED":
            seen.pop(ident, None)
        else:
            if event.kind == "DeviceTaintRule" and isinstance(spec.get("taint"), dict):  # the controller stamps timeAdded
                spec = {**spec, "taint": {k: v for k, v in spec["taint"].items() if k != "timeAdded"}}
            digest = hash(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS))
            if seen.get(ident) == digest:
                return
            seen[ident] = digest
        if not ready():
            return
        level = logging.DEBUG if event.kind == "ResourceSlice" and not slices_at_info else logging.INFO
        if not changes.isEnabledFor(level):
            return
        extra: dict[str, Any] = {"kind": event.kind, "group": event.group, "object": event.key, "change": event.type.lower()}
        if event.kind == "DeviceTaintRule" and event.type != "DELETED":
            taint = spec.get("taint") or {}
            value = f"={taint['value']}" if taint.get("value") else ""
            extra["taint"] = f"{taint.get('key')}{value}:{taint.get('effect')}"
            extra["selector"] = orjson.dumps(spec.get("deviceSelector")).decode()
        elif event.kind == "ResourceSlice" and event.type != "DELETED":
            extra["devices"] = len(spec.get("devices") or [])
        changes.log(level, "devices changed", extra=extra)

    return on_event
