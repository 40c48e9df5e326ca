"""The fake API server's answers: JSON bodies, Status errors and successes, and request bodies decoded once."""

from __future__ import annotations

from typing import Any

import orjson
import yaml
from aiohttp import web

from kubesim.fakeapi.store import ApiError

# Query values Kubernetes reads as true.
TRUE = ("true", "1", "True", "TRUE", "t", "T")


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def error_response(e: ApiError) -> web.Response:
    return json_response(e.body(), e.code, e.headers or None)


def success(code: int = 201) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def parse_body(data: bytes, content_type: str) -> Any:
    if not data:
        return None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(data)
        return orjson.loads(data)
    except (orjson.JSONDecodeError, yaml.YAMLError) as e:
        raise ApiError(400, f"the request body could not be decoded: {e}", "BadRequest") from e
