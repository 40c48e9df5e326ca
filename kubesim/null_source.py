"""A source with nothing behind it, for tests and benches that build a Service but never bind through it.

Each satisfies the narrow protocol it is passed as (tracker/source.py);
tests/tracker/test_source_protocols.py has mypy check that.
"""

from __future__ import annotations

from typing import Any

from tracker.resources import api_version as registry_api_version
from tracker.source import SourceError


class NullSource:
    """A `BindingSource` with no objects: reads find nothing, writes fail, Events are dropped."""

    description = "none"

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        return None

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        raise SourceError(f"no source: cannot patch ResourceClaim {namespace}/{name}")

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        raise SourceError(f"no source: cannot create a ResourceClaim in {namespace}")

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        raise SourceError(f"no source: cannot delete ResourceClaim {namespace}/{name}")

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise SourceError(f"no source: cannot patch Pod {namespace}/{name} status")

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise SourceError(f"no source: cannot bind Pod {namespace}/{name}")

    async def create_event(self, event: dict[str, Any]) -> None:
        pass

    def api_version(self, kind: str, group: str) -> str:
        return registry_api_version(kind, group)
