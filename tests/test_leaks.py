"""Repeated calls do not grow memory, on the success and the error paths alike.

A pool of calls of every public function (valid ones, one bad argument, anything
at all; about half of them raise) is run for a warm-up, then for 100 000 calls
under tracemalloc (Python and NumPy allocations) and 300 000 under the resident
set size (/proc/self/statm, Linux only: everything, the kernels' own malloc
included). tracemalloc is exact: a leak of 16 bytes a call would show 1.6 MB
against a bound of 64 KiB (the noise is ~1 KiB). RSS moves by up to ~1.3 MiB
either way from one reading to the next (the allocator's history: glibc raises
its thresholds after earlier tests free large blocks), so it is read after every
50 000 calls and the lowest of the last three readings is compared with the
highest of the first two: a leak of 16 bytes a call would put it ~2.4 MB higher,
against a bound of 512 KiB. Reference counts of the arguments are checked apart,
exactly.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from call_specs import NO_OUT, SPECS, CallSpec, Index, RandomChooser, draw_call
from contract import ALLOWED_ERRORS

CALLS = 100_000
RSS_BOUND = 512 << 10  # bytes of growth allowed (see above)
RSS_WINDOWS = 6  # of CALLS // 2 calls each
TRACED_BOUND = 64 << 10
STATM = Path("/proc/self/statm")

Case = tuple[CallSpec, dict[str, Any], Any]


def _pool() -> list[Case]:
    c = RandomChooser(1107)
    pool: list[Case] = []
    for spec in SPECS:
        for mode in ("valid", "one_bad", "arbitrary"):
            for _ in range(80):
                args, out, _ = draw_call(c, spec, mode)
                pool.append((spec, args, NO_OUT if out is None else out.value))
        # The table kernel mallocs scratch memory above 16 rows: have plenty of those.
        pool += [(spec, spec.example(40, 64), NO_OUT)] * 10
    return pool


POOL = _pool()


def _call(case: Case) -> bool:
    spec, args, out = case
    try:
        spec.call(args, out)
    except ALLOWED_ERRORS:
        return False
    return True


def _run(calls: int) -> int:
    """Make ``calls`` calls from the pool; return how many succeeded."""
    succeeded = 0
    for i in range(calls):
        succeeded += _call(POOL[i % len(POOL)])
    return succeeded


def test_the_pool_exercises_both_paths():
    succeeded = _run(len(POOL))
    assert 0.25 < succeeded / len(POOL) < 0.75, f"{succeeded} of {len(POOL)} calls succeeded"


def _resident_bytes() -> int:
    """Resident bytes once free heap pages are returned to the system (glibc).

    Without the trim the reading depends on the allocator's history: once earlier
    tests have freed blocks of 16 MiB, glibc raises its mmap and trim thresholds,
    keeps freed memory in its heap and RSS varied by 2 MiB between runs.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)
    return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not STATM.exists(), reason="RSS is read from Linux's /proc")
def test_resident_memory_does_not_grow():
    _run(len(POOL) * 20)  # warm-up: caches, free lists, malloc arenas
    readings = [_resident_bytes()]
    for _ in range(RSS_WINDOWS):
        _run(CALLS // 2)
        readings.append(_resident_bytes())
    grown = min(readings[-3:]) - max(readings[:2])
    kib = [(r - readings[0]) // 1024 for r in readings]
    assert grown < RSS_BOUND, f"RSS grew by {grown // 1024} KiB; readings (KiB): {kib}"


def test_traced_allocations_do_not_grow():
    tracemalloc.start()
    try:
        _run(len(POOL) * 5)  # warm-up under tracing
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        _run(CALLS)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < TRACED_BOUND, f"traced memory grew by {grown} bytes over {CALLS} calls"


def _referenced_objects(args: dict[str, Any], out: Any) -> list[Any]:
    """Arguments whose reference counts are this test's own (not shared singletons)."""
    values = [*args.values(), out]
    return [
        v
        for v in values
        if isinstance(v, (np.ndarray, np.generic, Index, list, np.dtype, type)) and v is not NO_OUT
    ]


def test_arguments_keep_their_reference_counts():
    checked = 0
    for case in POOL[::3]:
        spec, args, out = case
        objects = _referenced_objects(args, out)
        if not objects:
            continue
        _call(case)  # first call: caches
        before = [sys.getrefcount(v) for v in objects]
        for _ in range(50):
            _call(case)
        after = [sys.getrefcount(v) for v in objects]
        assert before == after, (
            f"{spec.name}({args}, out={type(out).__name__}): {before} -> {after}"
        )
        checked += 1
    assert checked > 50
