"""The HTTP edge reaches the cluster state only through the service (docs/design.md#architecture).

Two checks beside the import-linter contract (which forbids the edge to
import `tracker`): no edge module names the state or a service's private
part, and a whole round of requests is answered by a service that refuses
to hand out its state or its collaborators.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import httpx
import orjson

from extender.app import create_app
from tests.e2e.harness import demo_pod_args

ROOT = Path(__file__).resolve().parents[2]
EDGE = [ROOT / "extender" / "app.py", *sorted((ROOT / "extender" / "routes").glob("*.py"))]
# What a Service is made of: the edge asks the service, never these.
PARTS = frozenset({"state", "binder", "placements", "outcomes", "source", "allocator", "requeuer"})


def test_edge_modules_never_name_the_state_or_a_service_part() -> None:
    found = []
    for path in EDGE:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and (node.attr in PARTS or (node.attr.startswith("_") and not node.attr.startswith("__"))):
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Name) and node.id in {"state", "ClusterState"}:
                found.append(f"{path.name}:{node.lineno}: {node.id}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tracker"):
                found.append(f"{path.name}:{node.lineno}: from {node.module}")
    assert not found, "the HTTP edge reaches past the service:\n" + "\n".join(found)


class _ServiceOnly:
    """The service as the edge may see it: its public queries and verbs, not what it is made of."""

    def __init__(self, service: Any) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        assert name not in PARTS, f"the HTTP edge read service.{name}"
        return getattr(self._service, name)


async def test_every_route_is_answered_through_the_service_alone(demo_service) -> None:
    demo = await demo_service()
    app = create_app(_ServiceOnly(demo.service))  # type: ignore[arg-type]  # a stand-in that refuses its parts
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        for path in ("/livez", "/readyz", "/metrics", "/debug/devices", "/debug/objects", "/debug/volumes"):
            assert (await client.get(path)).status_code == 200, path
        args = orjson.dumps(demo_pod_args("trainer", ["node-a", "node-b"]))
        assert (await client.post("/filter", content=args)).json()["Error"] == ""
        assert (await client.post("/prioritize", content=args)).status_code == 200
        bound = await client.post("/bind", content=orjson.dumps({"PodName": "trainer", "PodNamespace": "default", "Node": "node-a"}))
        assert bound.status_code == 200
        assert (await client.post("/bind", content=b'{"PodUID": "u1", "Node": 3}')).status_code == 400
