"""Giving the C heap's free pages back to the system once the initial lists are applied.

The initial lists decode every object of the cluster page by page: at 5,000
nodes glibc's malloc is left holding ~30 MiB of freed blocks (orjson's
buffers, dict and list tables of the decoded pages) in pages it keeps
resident, and the objects that stay allocated afterwards are too small to
reuse most of them. `malloc_trim(0)` hands every whole free page back
(the heap's top and, since glibc 2.8, pages inside it), once: measured at
5000x8 in bench/results/issue-31-memory.md. Python's own small objects live
in pymalloc's arenas, which Python frees itself when they empty.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("dra_extender.heap")


def release_free_memory() -> bool:
    """malloc_trim(0) where the C library has it (glibc); False elsewhere (musl, macOS), where there is nothing to call."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    released = bool(trim(0))
    log.debug("malloc_trim", extra={"released": released})
    return True
