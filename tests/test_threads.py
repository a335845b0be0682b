"""Threads: concurrent calls give the single-threaded results bit for bit, the
frequency cache stays bounded and consistent, and the kernels run without the GIL.

This file reads (never writes) cpe._core's caches through ``_core._cache_snapshot()``
on purpose: the caches are an implementation detail, but their bound and their
consistency under threads are what is promised here. The mix holds more (D, base)
pairs than the caches can, so entries are evicted and recomputed by racing threads
throughout. If the caches change shape, update ``cache_entries_are_consistent``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from call_specs import SPEC_IDS, SPECS, CallSpec, RandomChooser, draw_call, pick
from cpe import _core

THREADS = 8
ROUNDS = 2
WIDE = (1000, 2048, 3001, 4096, 6000, 8192)  # 8 KB to 64 KB of frequencies each
DTYPES = (np.float64, np.float32, np.float16)


def _outcome(spec: CallSpec, args: dict[str, Any], use_out: bool) -> tuple[Any, ...]:
    """What a call gives, comparable bit for bit: bytes, dtype and shape, or the error."""
    try:
        if use_out and spec.has_out:
            template = spec.arrays(spec.call(args))  # shape and dtype of the outputs
            given = tuple(np.full(a.shape, np.nan, a.dtype) for a in template)
            result = spec.call(args, given if spec.outputs > 1 else given[0])
            assert all(a is b for a, b in zip(spec.arrays(result), given, strict=True))
        else:
            result = spec.call(args)
    except (TypeError, ValueError, OverflowError, MemoryError) as exc:
        return ("error", type(exc), str(exc))
    return ("value", *((a.dtype.str, a.shape, a.tobytes()) for a in spec.arrays(result)))


def _cases() -> list[tuple[CallSpec, dict[str, Any], bool]]:
    """Mixed widths, bases and dtypes: more (D, base) pairs than the cache holds."""
    c = RandomChooser(20240607)
    cases = []
    for spec in SPECS:
        for _ in range(40):  # small, varied, all valid
            args, _, _ = draw_call(c, spec, "valid")
            cases.append((spec, args, bool(c.integer(0, 1))))
        for i in range(30):  # wide rows, a distinct base each: the cache must evict
            args = spec.example(pick(c, (1, 2, 3, 20)), pick(c, WIDE))
            args["base"] = 10000.0 + 37.0 * i + (0.5 if spec is SPECS[0] else 0.25)
            args["dtype"] = pick(c, DTYPES)
            cases.append((spec, args, bool(c.integer(0, 1))))
        for _ in range(15):  # calls that raise must raise the same way
            args, _, _ = draw_call(c, spec, "one_bad")
            cases.append((spec, args, False))
    return cases


def cache_entries_are_consistent() -> list[str]:
    """Problems with the caches as seen under their lock (empty: none)."""
    snap = _core._cache_snapshot()
    problems = []
    encodings, levels = snap["encodings"], snap["levels"]
    # An encoding is counted for its frequencies' bytes and its key's (when bytes),
    # plus a fixed cost per entry (cpe._core.Cache); a level entry for at least
    # its rows.
    entry = snap["entry_bytes"]
    for enc, cost in zip(encodings, snap["encoding_costs"], strict=True):
        key = enc.key
        counted = entry + enc.frequencies.nbytes + (len(key) if type(key) is bytes else 0)
        if cost != counted:
            problems.append(f"frequency cache: entry {key!r} counted for {cost} bytes")
    for table, cost in zip(levels.values(), snap["level_costs"], strict=True):
        if cost < table.nbytes:
            problems.append(f"level cache: an entry counted for {cost} bytes only")
    for name in ("encoding", "level"):
        held = sum(snap[f"{name}_costs"])
        if snap[f"{name}_bytes"] > snap[f"{name}_budget"]:
            problems.append(f"{name} cache: {snap[f'{name}_bytes']} bytes over its budget")
        if snap[f"{name}_bytes"] != held:
            problems.append(f"{name} cache: counts {snap[f'{name}_bytes']} bytes, holds {held}")
    for enc in encodings:
        w = enc.frequencies
        if w.flags.writeable or w.shape != (2, max(enc.n_freq, 1)):
            problems.append(f"entry {enc.key}: writeable={w.flags.writeable} shape={w.shape}")
            continue
        if np.isnan(enc.base):  # RoPE's given frequencies: their bytes end the key
            if w.tobytes() != enc.key[40:] or 2 * enc.n_freq != enc.width:
                problems.append(f"entry {enc.width} does not hold the frequencies of its key")
            continue
        j = np.arange(enc.n_freq)
        exact = enc.scale * enc.base ** (-j / enc.den)
        hi = w[0, : enc.n_freq]
        with np.errstate(divide="ignore", invalid="ignore"):  # scale=0: all zero
            slack = 4e-16 * (2.0 + np.abs(np.log(np.abs(exact))))  # NumPy's exponent rounding
            close = (np.abs(hi - exact) <= slack * np.abs(exact)) | (hi == exact)
        if not np.all(close):
            problems.append(f"entry {enc.key} does not hold the frequencies of its key")
    for key, array in levels.items():
        # (levels, radix), fixed by the width (cpe_fill.h's cpe_level_shape)
        n_freq = array.shape[2] // 2
        shape = (2, 256) if n_freq <= 64 else (3, 128) if n_freq <= 256 else (4, 32)
        if array.flags.writeable or array.shape[:2] != shape:
            problems.append(f"levels {key}: writeable={array.flags.writeable} shape={array.shape}")
    return problems


def _run_threads(target: Callable[[int], None], count: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread hung"


def test_concurrent_calls_equal_single_threaded_calls_bit_for_bit():
    cases = _cases()
    expected = [_outcome(spec, args, use_out) for spec, args, use_out in cases]
    assert sum(e[0] == "error" for e in expected) >= 10, "too few error paths in the mix"
    failures: list[str] = []
    barrier = threading.Barrier(THREADS + 1)
    done = threading.Event()
    peak = [0]

    def worker(index: int) -> None:
        order = list(range(len(cases)))
        random.Random(index).shuffle(order)
        try:
            barrier.wait()
            for _ in range(ROUNDS):
                for i in order:
                    spec, args, use_out = cases[i]
                    if _outcome(spec, args, use_out) != expected[i]:
                        failures.append(f"thread {index}: case {i} ({spec.name}, {args}) differs")
        except Exception as exc:
            failures.append(f"thread {index}: {exc!r}")

    def monitor() -> None:
        barrier.wait()
        while not done.is_set():
            peak[0] = max(peak[0], _core._cache_snapshot()["encoding_bytes"])
            failures.extend(cache_entries_are_consistent())
            time.sleep(0.002)

    watcher = threading.Thread(target=monitor)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as possible
    try:
        watcher.start()
        _run_threads(worker, THREADS)
    finally:
        done.set()
        sys.setswitchinterval(previous)
        watcher.join()
    assert not failures, "\n".join(failures[:20])
    assert cache_entries_are_consistent() == []
    budget = _core._cache_snapshot()["encoding_budget"]
    assert peak[0] > budget // 2, "the mix never filled the cache: no eviction tested"


def test_cache_is_bounded_and_skips_entries_larger_than_its_budget():
    for i in range(300):  # ~300 * 24 KB of frequencies: far past the budget
        assert (
            _outcome(SPECS[0], {"position": [3], "D": 3000, "base": 9000.0 + i}, False)[0]
            == "value"
        )
    assert cache_entries_are_consistent() == []
    snap = _core._cache_snapshot()
    assert snap["encoding_bytes"] > snap["encoding_budget"] // 2
    keys_before = {e.key for e in snap["encodings"]}
    huge_width = 2 * (snap["encoding_budget"] // 16) + 2  # 16 bytes per frequency: over budget
    SPECS[0].function(0, huge_width, base=1234.5)
    after = _core._cache_snapshot()["encodings"]
    keys_after = {e.key for e in after}
    assert not any(e.base == 1234.5 for e in after), "an over-budget entry was cached"
    assert keys_after == keys_before, "an over-budget entry evicted the others"


class Ticker(threading.Thread):
    """Runs Python bytecode in a loop and notes every pause of more than 1 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.pauses: list[tuple[float, float]] = []
        self.last = time.perf_counter()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.perf_counter()
            if now - self.last > 1e-3:
                self.pauses.append((self.last, now))
            self.last = now

    def longest_pause_within(self, t0: float, t1: float) -> float:
        time.sleep(0.01)  # let it run, closing a pause that spans t1
        pauses = [*self.pauses, (self.last, time.perf_counter())]
        return max(0.0, *(min(b, t1) - max(a, t0) for a, b in pauses))


def _call_seconds(spec: CallSpec, rows: int) -> float:
    """How long a call with ``rows`` rows of width 4096 takes: the shorter of two
    (the first call of a width also makes its frequencies)."""
    args = spec.example(rows, 4096)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        result = spec.call(args)
        times.append(time.perf_counter() - t0)
        del result
    return min(times)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_kernels_release_the_gil(spec):
    """A Python thread keeps running while an output of 128 MiB or more is filled.

    Were the GIL held through the kernel, the other thread could not run a single
    bytecode until the call returned: one pause as long as the call. Released, its
    pauses are scheduler noise. Several tries absorb a noisy machine. A call must last
    20 ms for a pause to tell: where 4096 x 4096 takes less than 40 ms (free-threaded
    builds, where no GIL is handed back, took 18-22 ms here), the rows are doubled
    first, up to 1 GiB (2 GiB when the calls turn out shorter than measured).
    """
    rows = 4096
    # Twice the 20 ms needed, so that a timed try is not a little shorter.
    while rows < 4 * 4096 and _call_seconds(spec, rows) <= 0.04:
        rows *= 2
    args = spec.example(rows, 4096)
    ticker = Ticker()
    ticker.start()
    tries = []
    try:
        for _ in range(5):
            time.sleep(0.05)
            t0 = time.perf_counter()
            result = spec.call(args)
            t1 = time.perf_counter()
            del result
            tries.append((t1 - t0, ticker.longest_pause_within(t0, t1)))
            if tries[-1][0] <= 0.02 and rows < 8 * 4096:
                # Sized while the machine was busier: twice the rows, tried again.
                rows *= 2
                args = spec.example(rows, 4096)
            elif tries[-1][1] < 0.5 * tries[-1][0]:
                break
    finally:
        ticker.stop.set()
        ticker.join()
    elapsed, pause = tries[-1]
    assert elapsed > 0.02, f"the call took {elapsed * 1e3:.1f} ms: too short to tell"
    assert pause < 0.5 * elapsed, (
        "another thread was stopped for most of each call (call ms, longest pause ms): "
        f"{[(round(e * 1e3), round(p * 1e3)) for e, p in tries]}: the GIL is held"
    )


# A child forked while another thread was making a digit row inherits the row
# claimed and never finished: it must make its own rather than wait for it.
FORK_WHILE_FILLING = """
import os, signal, threading, time, warnings
import numpy as np
import cpe

warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
D = 4096
positions = np.array([d * 32**k for k in range(4) for d in range(1, 32)], dtype=float)
current, stop = [None], [False]

def worker():
    base = 20000.0
    while not stop[0]:
        base += 0.5
        current[0] = base
        cpe.positional_encoding(positions, D, base=base)  # a new encoding each time

thread = threading.Thread(target=worker, daemon=True)
thread.start()
time.sleep(0.05)
hung = 0
for trial in range(8):
    time.sleep(0.013 * (trial + 1))
    base = current[0]
    pid = os.fork()
    if pid == 0:
        cpe.positional_encoding(positions, D, base=base)
        os._exit(0)
    deadline = time.time() + 10.0
    while time.time() < deadline and os.waitpid(pid, os.WNOHANG)[0] == 0:
        time.sleep(0.01)
    if time.time() >= deadline:
        hung += 1
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
stop[0] = True
print(hung)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_a_child_forked_while_a_thread_makes_digit_rows_does_not_hang():
    done = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_FILLING], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"], f"children that hung: {done.stdout}{done.stderr}"
