"""tracker/heap.py: the C heap's free pages go back to the system (glibc), and nothing breaks where there is no malloc_trim."""

from __future__ import annotations

import ctypes

import pytest

from kubesim.measure import proc_status_mb
from tracker.heap import release_free_memory

GLIBC = hasattr(ctypes.CDLL(None), "malloc_trim")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_blocks_below_a_live_one_are_returned() -> None:
    """What glibc's free() keeps (blocks under a live one at the heap's top) leaves the resident set."""
    import os

    pid = os.getpid()
    blocks = [bytes(4000) for _ in range(20_000)]  # over pymalloc's 512 bytes: malloc's heap, ~80 MB
    sentinel = bytes(4000)  # above them: free() cannot shrink the heap's top past it
    before = proc_status_mb(pid)
    del blocks
    kept = proc_status_mb(pid)
    assert release_free_memory() is True
    after = proc_status_mb(pid)
    assert before - kept < 20, (before, kept)  # free() alone gives back (almost) nothing
    assert kept - after > 50, (kept, after)
    del sentinel
