"""Small manifest clusters for the in-process /filter and /bind tests: pods with one claim each, loaded by the real ManifestSource."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from allocator.allocation import Allocator
from allocator.cel import CelEnvironment
from extender.service import Service, build_service
from extender.wire import ExtenderArgs, parse_extender_args
from kubesim.objects import claim, pod
from serving.metrics import Metrics
from tracker.manifest.source import ManifestSource
from tracker.state import ClusterState


async def load(source: ManifestSource, state: ClusterState, *, tries: int = 300) -> asyncio.Task[None]:
    """`source` feeding `state` in a task, returned once the state is ready (the caller cancels it)."""
    task = asyncio.create_task(source.run(state))
    for _ in range(tries):
        if state.ready:
            break
        await asyncio.sleep(0.01)
    assert state.ready, "the manifest cluster did not load"
    return task


async def manifest_service(
    directory: Path, *, allocator: dict[str, Any] | None = None, **options: Any
) -> tuple[Service, asyncio.Task[None]]:
    """A Service over the manifests in `directory`, loaded and ready, and the task feeding it (the caller cancels it);
    `allocator` holds Allocator options, `options` build_service's."""
    cel = CelEnvironment()
    state = ClusterState(cel)
    source = ManifestSource(directory, watch=False)
    service = build_service(state, source, Allocator(cel, **(allocator or {})), Metrics(), **options)
    return service, await load(source, state)


def claimed_pod(name: str, claim_name: str, device_class: str, exactly: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Claim `claim_name` (one device of `device_class`) and pod `name` (uid `uid-<name>`) using it as pod claim `gpu`."""
    return [
        claim(claim_name, device_class=device_class, exactly=exactly),
        pod(name, claims={"gpu": claim_name}, image="pause", meta={"uid": f"uid-{name}"}),
    ]


def filter_args(name: str, claim_name: str, names: list[str]) -> ExtenderArgs:
    """/filter's arguments for pod `name` (uid `uid-<name>`, claim `claim_name` as pod claim `gpu`) over node `names`."""
    body = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
    }
    return parse_extender_args(orjson.dumps({"Pod": body, "NodeNames": names}))
