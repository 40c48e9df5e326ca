"""`python -m kubesim.fakeapi` whose heap a benchmark can freeze once it has seeded it (SIGUSR1).

The fake API server is Python: after a bulk load, its first full GC collections
scan every object it holds (233,000 at 5,000 nodes x 8 devices: a 160 ms pause,
measured with gc callbacks), and its watch events wait meanwhile. A real API
server does not pause like that, so the workloads freeze the seeded objects
(`gc.collect(); gc.freeze()` on SIGUSR1) before measuring the extender.

    python -m bench.fakeapi_frozen --port 0 --kubeconfig-out PATH   # same arguments as kubesim.fakeapi
"""

from __future__ import annotations

import gc
import runpy
import signal
import sys


def _freeze(*_: object) -> None:
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _freeze)
    sys.argv[0] = "kubesim.fakeapi"
    runpy.run_module("kubesim.fakeapi", run_name="__main__", alter_sys=True)
