"""API discovery: which optional APIs (upstream DeviceTaintRule, our CRDs) the server serves.

Only a 404 means "not served"; any other failure leaves the answer unknown
(None, or `DiscoveryUnknown`), so a reflector already running is not stopped
on a transient error.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

import aiohttp
import orjson

from tracker import events as ev
from tracker.resources import UPSTREAM_RULE_VERSIONS, UPSTREAM_RULES_PLURAL, Resource, upstream_rules

log = logging.getLogger("dra_extender.source")

DISCOVERY_TIMEOUT_SECONDS = 10.0


class Transport(Protocol):
    """The API server's authenticated session, as discovery and the reflectors use it."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = 30.0,
    ) -> tuple[int, bytes]: ...


class DiscoveryUnknown(Exception):
    """Discovery failed (not a 404): whether the API is served is unknown."""


def group_version_path(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def parse_resource_list(body: bytes) -> set[str]:
    """The resource names of an APIResourceList; ValueError if the body is not one."""
    try:
        return {r.get("name", "") for r in orjson.loads(body).get("resources", [])}
    except (orjson.JSONDecodeError, AttributeError) as e:
        raise ValueError("not an APIResourceList") from e


async def served(transport: Transport, group: str, version: str) -> set[str] | None:
    """The resources served at group/version: empty when not served (404), None when unknown (an error)."""
    path = group_version_path(group, version)
    try:
        status, body = await transport.request("GET", path, timeout=DISCOVERY_TIMEOUT_SECONDS)
    except (TimeoutError, OSError, aiohttp.ClientError) as e:
        log.warning("discovery failed", extra={"path": path, "err": str(e) or type(e).__name__})
        return None
    if status == 404:
        return set()
    if status != 200:
        log.warning("discovery failed", extra={"path": path, "status": status})
        return None
    try:
        return parse_resource_list(body)
    except ValueError:
        log.warning("discovery failed: not an APIResourceList", extra={"path": path})
        return None


async def discover_upstream_rules(transport: Transport) -> Resource | None:
    """resource.k8s.io DeviceTaintRule at the newest served version; None if none; DiscoveryUnknown on errors."""
    for version in UPSTREAM_RULE_VERSIONS:
        names = await served(transport, ev.GROUP_RESOURCE, version)
        if names is None:
            raise DiscoveryUnknown(f"{ev.GROUP_RESOURCE}/{version}")  # a newer version may be served: don't guess
        if UPSTREAM_RULES_PLURAL in names:
            return upstream_rules(version)
    return None


class VersionUnknown(Exception):
    """The server's /version did not say which Kubernetes minor it is (the message says why)."""


def minor_of(info: Any) -> int | None:
    """The minor of a /version document ("36", or "36+" from some distributions); None unless major 1 and a numeric minor."""
    if not isinstance(info, dict) or str(info.get("major")) != "1":
        return None
    found = re.match(r"\d+", str(info.get("minor") or ""))
    return int(found.group()) if found else None


async def server_minor(transport: Transport) -> int:
    """The Kubernetes minor the API server reports at /version; VersionUnknown when it does not say."""
    try:
        status, body = await transport.request("GET", "/version", timeout=DISCOVERY_TIMEOUT_SECONDS)
    except (TimeoutError, OSError, aiohttp.ClientError) as e:
        raise VersionUnknown(f"GET /version: {str(e) or type(e).__name__}") from None
    if status != 200:
        raise VersionUnknown(f"GET /version: HTTP {status}")
    try:
        info = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise VersionUnknown("GET /version: not JSON") from None
    minor = minor_of(info)
    if minor is None:
        got = {k: info.get(k) for k in ("major", "minor")} if isinstance(info, dict) else info
        raise VersionUnknown(f"GET /version: no Kubernetes 1.x minor in {got}")
    return minor
