"""API discovery: which optional APIs (upstream DeviceTaintRule, our CRDs) the server serves.

Only a 404 means "not served"; any other failure leaves the answer unknown
(None, or `DiscoveryUnknown`), so a reflector already running is not stopped
on a transient error.
"""

from __future__ import annotations

import logging
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
