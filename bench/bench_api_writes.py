"""The client's CPU per API write: the writes' own connections (tracker/apiserver/writer.py) against aiohttp's session.

    .venv/bin/python -m bench.bench_api_writes [--writes 1000] [--rounds 3]

The fake API server runs in a subprocess; this process patches one claim's
labels `--writes` times through `ApiSource.patch_claim` (the bind's writes go
the same way), and reports the thread CPU (utime + stime of this, the only
busy thread) per write, for each path, in alternating rounds so both see the
same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubesim.processes import start_fake_api, stop_process
from tracker.apiserver.source import ApiSource

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
}


async def _round(source: ApiSource, writes: int) -> float:
    """CPU ms per write of `writes` merge patches, after 50 to warm the connection."""
    for i in range(50):
        await source.patch_claim("default", "c", {"metadata": {"labels": {"warm": str(i)}}})
    started = time.thread_time()
    for i in range(writes):
        await source.patch_claim("default", "c", {"metadata": {"labels": {"n": str(i)}}})
    return 1000 * (time.thread_time() - started) / writes


async def _run(kubeconfig: Path, writes: int, rounds: int) -> dict[str, list[float]]:
    source = ApiSource(kubeconfig=str(kubeconfig))
    await source.connect()
    await source.create_claim("default", CLAIM)
    writer = source._writer
    out: dict[str, list[float]] = {"own connections": [], "aiohttp": []}
    try:
        for _ in range(rounds):
            source._writer = writer
            out["own connections"].append(round(await _round(source, writes), 4))
            source._writer = None
            out["aiohttp"].append(round(await _round(source, writes), 4))
    finally:
        source._writer = writer
        await source.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_api_writes")
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dra-writes-"))
    proc, _url, kubeconfig = start_fake_api(tmp)
    try:
        import uvloop

        result: dict[str, Any] = {"writes": a.writes, "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
        result["cpu_ms_per_write"] = uvloop.run(_run(kubeconfig, a.writes, a.rounds))
        result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        stop_process(proc)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
