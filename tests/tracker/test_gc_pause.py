"""The reflectors' GC pause: off while any list is being parsed and applied, restored after the last."""

from __future__ import annotations

import gc

from tracker.apiserver.reflector import GcPause


def test_overlapping_lists_keep_gc_off_until_the_last_one_is_done() -> None:
    assert gc.isenabled()
    first, second = GcPause(), GcPause()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # the first reflector is done, the second still parses
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_gc_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with GcPause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
