"""Huge requests fail fast, before any kernel runs, and write nothing into out=.

test_errors.py has one request of each kind; here every public function and
dtype meets the exact Py_ssize_t boundary of the output's byte count, and the
kernels' own scratch allocation is made to fail for real (address-space limit in
a subprocess) to show that MemoryError comes before the first write.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import tracemalloc

import numpy as np
import pytest

import cpe
from call_specs import NO_OUT, SPEC_IDS, SPECS, CallSpec

DTYPES = [np.float64, np.float32, np.float16]
ROWS = 3  # positions or table rows: the width D carries the size
OUT_SPECS = [spec for spec in SPECS if spec.has_out]


def _past_py_ssize_t(itemsize: int, multiple: int = 1) -> int:
    """The smallest D (a multiple of ``multiple``) for which ROWS * D * itemsize
    bytes exceed sys.maxsize."""
    D = (sys.maxsize + 1 + ROWS * itemsize - 1) // (ROWS * itemsize)
    return -(-D // multiple) * multiple


def _below_py_ssize_t(itemsize: int, multiple: int = 1) -> int:
    """The largest D (a multiple of ``multiple``) for which the bytes fit."""
    D = _past_py_ssize_t(itemsize) - 1
    return D - D % multiple


def _call_cheaply(spec: CallSpec, D: int, dtype, out=None):
    """Make the call; assert it took little time and memory; return the exception."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises((ValueError, MemoryError)) as info:
            spec.call({**spec.example(ROWS, D), "dtype": dtype}, NO_OUT if out is None else out)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0, f"rejecting took {elapsed:.1f} s: work was done first"
    assert peak < 1 << 20, f"rejecting allocated {peak / 2**20:.1f} MiB first"
    return info.value


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_byte_count_past_py_ssize_t_is_a_value_error(spec, dtype):
    itemsize = np.dtype(dtype).itemsize
    for D in (_past_py_ssize_t(itemsize, spec.width_multiple), 2**62, sys.maxsize):
        exc = _call_cheaply(spec, D, dtype)
        assert isinstance(exc, ValueError), repr(exc)
        assert "too large" in str(exc), repr(exc)
    exc = _call_cheaply(spec, sys.maxsize + 1, dtype)
    assert isinstance(exc, ValueError), repr(exc)
    assert f"{spec.width} is too large" in str(exc), repr(exc)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_byte_count_just_below_py_ssize_t_is_a_memory_error(spec, dtype):
    # Representable, so it reaches the allocator, which cannot give 2**63 bytes.
    exc = _call_cheaply(
        spec, _below_py_ssize_t(np.dtype(dtype).itemsize, spec.width_multiple), dtype
    )
    if np.dtype(dtype) == np.float16:
        # float16 is computed in a float64 buffer four times larger: refused at once.
        assert isinstance(exc, ValueError), repr(exc)
        assert "too large" in str(exc), repr(exc)
    else:
        assert isinstance(exc, MemoryError), repr(exc)


@pytest.mark.parametrize(
    ("head_dim", "dtype"),
    [(2**59 - 6, np.float64), (2**59 - 64, np.float64), (2**60 - 10, np.float32)],
)
def test_rope_tables_that_fit_alone_but_not_both_are_a_memory_error(head_dim, dtype):
    # Both tables, the second a whole number of cache lines after the first, need
    # more than a Py_ssize_t of bytes: each is then asked for alone.
    with pytest.raises(MemoryError):
        cpe.rope_cos_sin(1, head_dim, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("spec", OUT_SPECS, ids=[spec.name for spec in OUT_SPECS])
def test_huge_request_leaves_a_callers_out_untouched(spec, dtype):
    arrays = tuple(np.full((ROWS, 4), 7.0, dtype=dtype) for _ in range(spec.outputs))
    out = arrays if spec.outputs > 1 else arrays[0]
    itemsize = np.dtype(dtype).itemsize
    multiple = spec.width_multiple
    for D in (_past_py_ssize_t(itemsize, multiple), _below_py_ssize_t(itemsize, multiple), 2**62):
        exc = _call_cheaply(spec, D, dtype, out=out)
        assert isinstance(exc, ValueError), repr(exc)
        # "out must have shape", or "out[0] (cos) must have shape" of a tuple
        assert re.match(r"out(\[0\] \(cos\))? must have shape", str(exc)), repr(exc)
        for array in arrays:
            np.testing.assert_array_equal(array, 7.0)


# Below 64 rows the Python layer passes no digit levels, and the table kernel
# mallocs its own: 16 * ceil(D/2) * (2R + n/R**2 + 1) bytes (R = ceil(cbrt(n))),
# 6.5 MiB for 63 rows of width 65536, a fifth of the 31.5 MiB output. With the
# address space capped just above what the process holds, the output exists and
# the scratch (or the float16 path's float64 buffer) cannot be had. A fixed mmap
# threshold makes glibc return freed blocks to the system instead of keeping them.
_LIMITED_CALL = textwrap.dedent("""
    import json, os, resource, sys
    import numpy as np
    import cpe
    n, D, dtype = 63, 65536, sys.argv[1]
    out = np.full((n, D), 7.0, dtype=dtype)
    expected = cpe.positional_encoding_table(n, D, base=1234.0, dtype=dtype)  # warm the caches
    del expected
    held = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (held + (4 << 20), hard))
    try:
        cpe.positional_encoding_table(n, D, base=1234.0, dtype=dtype, out=out)
        outcome = "returned"
    except MemoryError as exc:
        outcome = "MemoryError: " + str(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(json.dumps([outcome, bool((out == 7.0).all())]))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot apply",
)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_memory_that_cannot_be_allocated_is_a_memory_error_and_writes_nothing(dtype):
    name = np.dtype(dtype).name
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED_CALL, name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    outcome, untouched = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome.startswith("MemoryError"), outcome
    assert untouched, "out= was written before the MemoryError"
    # float64/float32 fail in the kernel's scratch malloc, float16 in its float64 buffer.
    assert ("scratch" in outcome) == (name != "float16"), outcome
