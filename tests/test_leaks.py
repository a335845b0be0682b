"""Repeated calls do not grow memory, on the success and the error paths alike.

A pool of calls of every public function (valid ones, one bad argument, anything
at all; about half of them raise) is run for a warm-up, then for 100 000 calls
under tracemalloc (Python and NumPy allocations) and 800 000 under the resident
set size (/proc/self/statm, Linux only: everything, the kernels' own malloc
included). tracemalloc is exact: a leak of 16 bytes a call would show 1.6 MB
against a bound of 64 KiB (the noise is ~1 KiB). RSS is measured in a fresh
interpreter: in this one it depends on what earlier tests allocated (glibc raises
its thresholds once large blocks are freed; it jumped by 1.6 MiB once in CI).
Even there it moves by ~0.5 MiB either way between readings (taken every 100 000
calls, after returning free heap pages), so the test bounds the slope of a line
fitted to eight readings: ~70 KiB a window here, ~650 KiB with a 16-byte malloc
leaked by every call that reaches the positions kernel, against 256 KiB.
Reference counts of the arguments are checked apart, exactly.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from call_specs import NO_OUT, SPECS, CallSpec, Index, RandomChooser, draw_call
from contract import ALLOWED_ERRORS

CALLS = 100_000
RSS_SLOPE_BOUND = 256 << 10  # bytes of growth allowed per window (see above)
RSS_WINDOWS = 8  # of CALLS calls each
TRACED_BOUND = 128 << 10  # over TRACED_WINDOWS windows of CALLS calls: < 0.5 byte a call
TRACED_WINDOWS = 3
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


def resident_readings() -> list[int]:
    """RSS after the warm-up, then after each of RSS_WINDOWS windows of calls."""
    _run(len(POOL) * 20)  # warm-up: caches, free lists, malloc arenas
    readings = [_resident_bytes()]
    for _ in range(RSS_WINDOWS):
        _run(CALLS)
        readings.append(_resident_bytes())
    return readings


@pytest.mark.skipif(not STATM.exists(), reason="RSS is read from Linux's /proc")
def test_resident_memory_does_not_grow():
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join([here, *(p for p in sys.path if p)])
    script = "import json, test_leaks; print(json.dumps(test_leaks.resident_readings()))"
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    readings = json.loads(result.stdout.strip().splitlines()[-1])
    # Least-squares slope over the readings after the first window.
    slope = float(np.polyfit(np.arange(RSS_WINDOWS), np.array(readings[1:], float), 1)[0])
    kib = [(r - readings[0]) // 1024 for r in readings]
    assert slope < RSS_SLOPE_BOUND, (
        f"RSS grew by {slope / 1024:.0f} KiB per {CALLS} calls; readings (KiB): {kib}"
    )


def test_traced_allocations_do_not_grow():
    tracemalloc.start()
    try:
        _run(len(POOL) * 5)  # warm-up under tracing
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        # Bounded caches trade entries back and forth (+-60 KiB from one window of
        # calls to the next); a leak grows in every window.
        _run(TRACED_WINDOWS * CALLS)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    calls = TRACED_WINDOWS * CALLS
    assert grown < TRACED_BOUND, f"traced memory grew by {grown} bytes over {calls} calls"


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


DISTINCT_KEYS = """
import gc, os, sys
import numpy as np
import cpe
from cpe import _core

page = os.sysconf("SC_PAGE_SIZE")
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page

for i in range(20000):  # the caches full, the allocator warm
    cpe.positional_encoding(3, 2, base=1.5 + i)
before = rss()
for i in range(1_000_000):  # a million distinct encodings, each a cache entry
    cpe.positional_encoding(3, 2 + i % 2, base=2.0 + i * 1e-3)
    if i % 16 == 0:  # and their digit levels (made by an encoding's second request)
        cpe.positional_encoding_table(64, 2, scale=1.0 + i * 1e-3)
        cpe.positional_encoding_table(64, 2, scale=1.0 + i * 1e-3)
after = rss()
snap = _core._cache_snapshot()
print(after - before, len(snap["encodings"]), len(snap["levels"]))
"""


@pytest.mark.skipif(not STATM.exists(), reason="needs /proc/self/statm (Linux)")
def test_caches_keep_their_budget_over_a_million_distinct_keys():
    # The budgets are 2 MiB (encodings) and 8 MiB (digit levels), counted with
    # each entry's objects: a bound on what the process keeps, not only on the
    # frequencies. (When only the frequencies were counted, 16 bytes an entry,
    # the process kept 62-171 MiB.)
    done = subprocess.run(
        [sys.executable, "-c", DISTINCT_KEYS],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    grown, encodings, levels = map(int, done.stdout.split())
    assert grown < 12 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over a million cache keys"
    assert 1000 < encodings < 10000, encodings
    assert levels > 10, levels
