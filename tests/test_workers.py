"""workers= and set_workers: large outputs filled by several threads.

Every part is a range of rows, and a row's bits never depend on the call, so the
result must be the same bits for any count; a request is checked once, before
any part starts, so a bad position leaves out= untouched, and the parts cannot
fail (a thread that cannot start or dies early leaves its part to the calling
thread); the default belongs to the calling thread.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpe

# Each at least 8 MiB (16 MiB of float64 rows), so that two to four parts of 4 MiB
# are made (smaller outputs stay on the calling thread).
BIG = {
    "table": lambda dt, w, out=None: cpe.positional_encoding_table(
        8192, 256, start=-3000, dtype=dt, workers=w, out=out
    ),
    "table, sin_cos, odd width": lambda dt, w, out=None: cpe.positional_encoding_table(
        7001, 301, start=10**6, dtype=dt, layout="sin_cos", workers=w, out=out
    ),
    "ids": lambda dt, w, out=None: cpe.positional_encoding(
        np.random.default_rng(5).integers(-(10**6), 10**6, (64, 130)), 257, dtype=dt,
        convention="fairseq", workers=w, out=out,
    ),
    "rope": lambda dt, w, out=None: cpe.rope_cos_sin(8192, 128, start=77, dtype=dt, workers=w),
    "rope ids, yarn": lambda dt, w, out=None: cpe.rope_cos_sin(
        np.arange(0, 3 * 16384, 3), 128, dtype=dt, workers=w, max_position_embeddings=4096,
        rope_parameters={"rope_type": "yarn", "factor": 8.0},
    ),
    "grid": lambda dt, w, out=None: cpe.sincos_2d(256, 128, 128, dtype=dt, workers=w, out=out),
    "video grid": lambda dt, w, out=None: cpe.sincos_3d(16, 32, 64, 128, dtype=dt, workers=w),
}  # fmt: skip

try:  # the optional bfloat16 dtype, when its package is installed
    import ml_dtypes

    DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]
except ImportError:
    DTYPES = [np.float64, np.float32, np.float16]


CPUS = os.cpu_count() or 1
needs_two_cpus = pytest.mark.skipif(CPUS < 2, reason="parts are never more than the CPUs")


def bits(result):
    arrays = result if type(result) is tuple else (result,)
    return [np.asarray(a).tobytes() for a in arrays]


@pytest.fixture
def started(monkeypatch):
    """The names of the threads started during the test."""
    names: list[str] = []
    start = threading.Thread.start

    def recording(self):
        names.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", recording)
    return names


@pytest.mark.parametrize("name", list(BIG))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_the_bits_do_not_depend_on_the_count(name, dtype, started):
    call = BIG[name]
    want = bits(call(dtype, 1))
    assert started == []
    for workers in (2, 3, 4, -1):
        del started[:]
        assert bits(call(dtype, workers)) == want, workers
        count = min(workers if workers > 0 else CPUS, CPUS)  # (never more parts than CPUs)
        assert (1 if count > 1 else 0) <= len(started) < max(count, 1), (workers, started)


@needs_two_cpus
def test_small_outputs_stay_on_the_calling_thread(started):
    cpe.positional_encoding_table(4096, 128, workers=8)  # 4 MiB: one part
    cpe.rope_cos_sin(100, 64, workers=-1)
    cpe.positional_encoding(12345, 4096, workers=8)
    cpe.sincos_2d(64, 64, 128, workers=8)
    assert started == []
    cpe.positional_encoding_table(8192, 128, workers=8)  # 8 MiB: two parts
    assert len(started) == 1


@needs_two_cpus
def test_a_failing_part_leaves_out_untouched():
    out = np.full((20000, 128), 7.0)
    for where in (0, -1):  # in the first part (the calling thread's), in the last
        for bad in (np.nan, 1e300):  # not finite; an angle out of range
            positions = np.arange(20000.0)
            positions[where] = bad
            with pytest.raises(ValueError, match="position"):
                cpe.positional_encoding(positions, 128, workers=2, out=out)
            assert (out == 7.0).all()
    # The error of one call whatever the parts: the first check that fails.
    positions = np.arange(20000.0)
    positions[10], positions[-1] = 1e300, np.nan
    with pytest.raises(ValueError, match="must be finite"):
        cpe.positional_encoding(positions, 128, workers=2, out=out)
    assert (out == 7.0).all()
    cos, sin = np.full((20000, 128), 7.0), np.full((20000, 128), 7.0)
    with pytest.raises(ValueError, match="finite"):
        cpe.rope_cos_sin(np.where(np.arange(20000) == 19999, np.inf, 1.0), 128, workers=3,
                         out=(cos, sin))  # fmt: skip
    assert (cos == 7.0).all()
    assert (sin == 7.0).all()


@needs_two_cpus
def test_an_interrupt_while_the_parts_start_is_raised_once_every_part_is_done(monkeypatch):
    # A KeyboardInterrupt in the calling thread while it starts the parts: the
    # parts that started may be writing, so the call finishes the output (its
    # parts cannot fail), then raises the interrupt, leaving no thread behind.
    start = threading.Thread.start
    main = threading.get_ident()

    def interrupted(self):
        start(self)
        if threading.get_ident() == main:
            raise KeyboardInterrupt

    expected = cpe.positional_encoding_table(8192, 512)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    out = np.full((8192, 512), 7.0)
    with pytest.raises(KeyboardInterrupt):
        cpe.positional_encoding_table(8192, 512, workers=2, out=out)
    monkeypatch.undo()
    assert out.tobytes() == expected.tobytes()
    assert not [t for t in threading.enumerate() if t.name.startswith("cpe-part")]


@needs_two_cpus
def test_a_thread_that_cannot_start_leaves_its_part_to_the_calling_thread(monkeypatch):
    start = threading.Thread.start
    count = []

    def failing(self):
        count.append(self.name)
        if len(count) == 1:  # the first thread of the call
            raise RuntimeError("can't start new thread")
        start(self)

    expected = cpe.positional_encoding_table(8192, 512)
    expected_grid = cpe.sincos_2d(128, 128, 256)
    monkeypatch.setattr(threading.Thread, "start", failing)
    out = np.full((8192, 512), 7.0)
    cpe.positional_encoding_table(8192, 512, workers=4, out=out)
    assert count  # (a thread was asked for)
    assert out.tobytes() == expected.tobytes()
    grid = np.full((128 * 128, 256), 7.0)
    del count[:]
    cpe.sincos_2d(128, 128, 256, workers=4, out=grid)
    assert count
    assert grid.tobytes() == expected_grid.tobytes()


def _with_dying_parts(expressions: list[str], lines: int) -> None:
    """Each expression (``{w}``: its workers) gives the bits of workers=1 with
    workers=2 while a tracing hook kills each new thread: at its first call
    (``lines`` 0), or after ``lines`` lines of its part. In a process of its own,
    under a timeout, since a failure may be a hang."""
    calls = "\n".join(
        f"assert bits({e.format(w=2)}) == expected[{i}], {e!r}" for i, e in enumerate(expressions)
    )
    script = f"""
import threading
import numpy as np
import cpe
def bits(result):
    return b"".join(a.tobytes() for a in (result if type(result) is tuple else (result,)))
expected = [bits(e) for e in ({", ".join(e.format(w=1) for e in expressions)},)]
def hook(frame, event, arg, seen=[0]):
    if event == "call" and {lines} == 0 or event == "line" and {lines} and (
            frame.f_code.co_name == "part" and seen.append(1) is None and len(seen) > {lines}):
        raise RuntimeError("tracing hook")
    return hook
threading.settrace(hook)
threading.excepthook = lambda args: None  # (the dying threads' reports)
{calls}
threading.settrace(None)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@needs_two_cpus
@pytest.mark.parametrize("lines", [0, 1, 2, 3], ids=lambda n: f"after {n} lines")
def test_a_part_thread_that_dies_costs_no_wait_and_leaves_no_hole(lines):
    # A part thread killed at its first call (it once waited at a gate for ever,
    # spinning without the GIL), or after a few lines of Python, before or after
    # its part, whichever line that is: the calling thread then does every part
    # a thread did not finish.
    _with_dying_parts(
        [
            "cpe.positional_encoding_table(8192, 512, workers={w})",
            "cpe.sincos_2d(128, 128, 256, workers={w})",
        ],
        lines,
    )


# Calls large enough to be split into parts (>= 2 parts of 4 MiB): every kind of
# request the parts run, the fill loop's and the apply request's.
DYING_CALLS = {
    "table": "cpe.positional_encoding_table(8192, 512, workers={w})",
    "positions": "cpe.positional_encoding(np.arange(32768.0) * 3.5 - 9.0, 64, workers={w})",
    "rope": "cpe.rope_cos_sin(32768, 128, dtype=np.float32, workers={w})",
    "rope float16": "cpe.rope_cos_sin(16384, 64, dtype=np.float16, workers={w})",
    "grid": "cpe.sincos_3d(4, 64, 64, 256, workers={w})",
    "apply": "cpe.apply_rope(np.ones((1, 16, 2048, 128)), start=5, workers={w})",
    "add": "cpe.add_positional_encoding(np.ones((8, 1024, 512)), start=3, workers={w})",
}


@needs_two_cpus
@settings(max_examples=10, deadline=None)
@given(call=st.sampled_from(sorted(DYING_CALLS)), lines=st.integers(0, 3))
def test_any_call_whose_part_threads_die_gives_its_bits(call, lines):
    # The property behind the test above, drawn over every kind of request.
    _with_dying_parts([DYING_CALLS[call]], lines)


@pytest.mark.parametrize(
    ("workers", "error", "text"),
    [
        (0, ValueError, "workers must be a positive count of threads, or -k for os.cpu_count"),
        (-(os.cpu_count() or 1) - 1, ValueError, "got -"),
        (1.5, TypeError, "workers must be an int (a count of threads, or -1 for every CPU), got"),
        (True, TypeError, "got bool"),
        ("2", TypeError, "got str"),
    ],
)  # fmt: skip
def test_bad_counts_are_refused_by_every_function(workers, error, text):
    calls = [
        lambda: cpe.positional_encoding(3, 8, workers=workers),
        lambda: cpe.positional_encoding([3], 8, workers=workers),
        lambda: cpe.positional_encoding_table(3, 8, workers=workers),
        lambda: cpe.rope_cos_sin(3, 8, workers=workers),
        lambda: cpe.sincos_2d(2, 2, 8, workers=workers),
        lambda: cpe.sincos_3d(1, 2, 2, 16, workers=workers),
    ]
    for call in calls:
        with pytest.raises(error, match=re.escape(text)):
            call()
    with pytest.raises(error), cpe.set_workers(workers):
        pass


def test_counts_as_numpy_integers_and_beyond_the_cpus():
    want = cpe.positional_encoding_table(9000, 256)
    assert np.array_equal(cpe.positional_encoding_table(9000, 256, workers=np.int64(2)), want)
    assert np.array_equal(cpe.positional_encoding_table(9000, 256, workers=10**9), want)


@needs_two_cpus
def test_set_workers_is_the_default_of_the_calling_thread(started):
    assert cpe.get_workers() == 1
    seen = []
    with cpe.set_workers(3):
        assert cpe.get_workers() == 3
        with cpe.set_workers(-1):
            assert cpe.get_workers() == os.cpu_count()
        assert cpe.get_workers() == 3
        thread = threading.Thread(target=lambda: seen.append(cpe.get_workers()))
        thread.start()
        thread.join()
        del started[:]
        cpe.positional_encoding_table(8192, 256)  # 16 MiB: three parts, or one a CPU
        assert len(started) == min(3, CPUS) - 1
        del started[:]
        cpe.positional_encoding_table(8192, 256, workers=1)  # an explicit count wins
        assert started == []
    # (Where threads inherit the context of their starter, as by default in
    # free-threaded Python 3.14, they inherit its count too.)
    assert seen == [3 if getattr(sys.flags, "thread_inherit_context", False) else 1]
    assert cpe.get_workers() == 1
    with pytest.raises(KeyError), cpe.set_workers(2):
        raise KeyError
    assert cpe.get_workers() == 1
    with pytest.raises(TypeError, match="got None"), cpe.set_workers(None):
        pass


def test_parallel_calls_from_several_threads_agree():
    want = cpe.positional_encoding_table(8192, 256, start=5, dtype=np.float32)
    results = [None] * 4

    def work(k):
        results[k] = cpe.positional_encoding_table(8192, 256, start=5, dtype=np.float32,
                                                   workers=2)  # fmt: skip

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert result.tobytes() == want.tobytes()


def test_parts_cover_the_rows_and_start_cache_lines_where_rows_allow():
    from cpe._workers import part_bounds

    rng = np.random.default_rng(25)
    for _ in range(2000):
        items = int(rng.integers(2, 5000))
        parts = min(int(rng.integers(2, 9)), items)
        item_bytes = int(rng.choice([4, 8, 12, 24, 512, 1000, 2048, 4 * 301]))
        addresses = tuple(4 * int(a) for a in rng.integers(0, 4096, int(rng.integers(1, 3))))
        bounds = part_bounds(items, parts, item_bytes, addresses)
        assert (bounds[0], bounds[-1], len(bounds)) == (0, items, parts + 1)
        assert bounds == sorted(bounds)
        reach = min(64, max(1, items // parts // 16))
        for k in range(1, parts):
            share = items * k // parts
            starts = [
                row
                for row in range(share, min(share + reach, items))
                if all((a + row * item_bytes) % 64 == 0 for a in addresses)
            ]
            # The first row that starts a line in every table, else the share.
            assert bounds[k] == max(starts[0] if starts else share, bounds[k - 1])
