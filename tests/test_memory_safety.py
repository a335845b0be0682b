"""Hostile objects and racing callers cannot crash cpe or make it answer wrong.

Each test is a reproducer of an attack that once crashed the interpreter, read or
wrote out of bounds, or gave a silent wrong answer. The ones that crashed run in a
child process, so that a regression fails one test instead of killing the suite
(under the sanitizer stage the child is sanitized too: it inherits LD_PRELOAD).
"""

from __future__ import annotations

import numbers
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cpe


def run_child(code: str, timeout: float = 300) -> str:
    """Run ``code`` in a fresh interpreter; fail with its output unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert done.returncode == 0, (
        f"child exited with {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done.stdout


# ---- out= subclasses that lie about their shape or dtype ----

LIARS = """
import numpy as np
import cpe

class LyingShape(np.ndarray):
    claimed = None
    @property
    def shape(self):
        return type(self).claimed

class LyingDtype(np.ndarray):
    @property
    def dtype(self):
        return np.dtype(np.float64)

def liar(kind, real, claimed):
    view = real.view(kind)
    kind.claimed = claimed
    return view

def rejected(call, out, *more):
    arrays = [np.asarray(a) for a in (out, *more)]
    before = [a.copy() for a in arrays]
    try:
        call()
    except (TypeError, ValueError) as exc:
        assert "out" in str(exc), exc
    else:
        raise AssertionError("a lying out= was accepted")
    for a, b in zip(arrays, before):
        assert a.tobytes() == b.tobytes(), "a rejected out= was written"
"""


@pytest.mark.parametrize(
    "call",
    [
        "cpe.positional_encoding_table(1000, 64, out=out)",
        "cpe.positional_encoding_table(1000, 64, dtype=np.float32, out=out)",
        "cpe.positional_encoding_table(1000, 64, dtype=np.float16, out=out)",
        "cpe.positional_encoding(np.arange(1000), 64, out=out)",
        "cpe.sincos_2d(10, 100, 64, extra_tokens=2, out=out)",
        "cpe.sincos_3d(1, 10, 100, 64, out=out)",
    ],
)
def test_an_out_that_lies_about_its_shape_is_rejected(call):
    claimed = (
        "(1, 1000, 64)"
        if "sincos_3d" in call
        else ("(1002, 64)" if "extra_tokens" in call else "(1000, 64)")
    )
    dtype = "np.float32" if "float32" in call else ("np.float16" if "float16" in call else "float")
    run_child(
        LIARS
        + f"""
out = liar(LyingShape, np.full({claimed.replace("1000", "3").replace("1002", "3")}, 7, {dtype}),
           {claimed})
rejected(lambda: {call}, out)
"""
    )


@pytest.mark.parametrize(
    "call",
    [
        "cpe.positional_encoding(3.5, 4096, dtype=np.float16, out=out)",
        "cpe.positional_encoding(np.arange(2), 2048, dtype=np.float16, out=out)",
        "cpe.positional_encoding_table(2, 2048, dtype=np.float16, out=out)",
        "cpe.positional_encoding_table(2, 2048, out=out)",
    ],
)
def test_an_out_of_the_right_size_that_claims_a_smaller_shape_is_filled_safely(call):
    # The buffer is right and the claim is a lie: the output is computed for
    # NumPy's own shape (a float16 output's float64 scratch included).
    run_child(
        LIARS
        + f"""
dtype = np.float16 if "float16" in {call!r} else np.float64
real = np.full((4096,) if "3.5" in {call!r} else (2, 2048), 7, dtype)
out = liar(LyingShape, real, (1,))
result = {call}
assert result is out
expected = {call.replace(", out=out", "")}
assert np.array_equal(np.asarray(out), expected)
"""
    )


def test_a_one_position_out_that_lies_about_its_shape_is_rejected():
    run_child(
        LIARS
        + """
out = liar(LyingShape, np.full(1, 7.0), (100000,))
rejected(lambda: cpe.positional_encoding(5, 100000, out=out), out)
rejected(lambda: cpe.positional_encoding(5.5, 100000, out=out), out)
rejected(lambda: cpe.positional_encoding(np.int64(5), 100000, out=out), out)
"""
    )


def test_an_out_that_lies_about_its_dtype_is_rejected():
    run_child(
        LIARS
        + """
out = np.full((1000, 64), 7, np.int8).view(LyingDtype)
rejected(lambda: cpe.positional_encoding_table(1000, 64, out=out), out)
out = np.full(100000, 7, np.int8).view(LyingDtype)
rejected(lambda: cpe.positional_encoding(3, 100000, out=out), out)
"""
    )


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("n", ["1000", "np.arange(1000)"])
def test_a_rope_out_that_lies_is_rejected(which, n):
    run_child(
        LIARS
        + f"""
good = np.full((1000, 64), 7.0)
bad = liar(LyingShape, np.full((1, 64), 7.0), (1000, 64))
out = (bad, good) if {which} == 0 else (good, bad)
rejected(lambda: cpe.rope_cos_sin({n}, 64, out=out), *out)
lying = np.full((1000, 64), 7, np.int8).view(LyingDtype)
out = (lying, good) if {which} == 0 else (good, lying)
rejected(lambda: cpe.rope_cos_sin({n}, 64, out=out), *out)
"""
    )


# ---- positions that live in out=, behind a subclass that hides it ----


def test_positions_inside_out_are_read_before_they_are_overwritten():
    class Hiding(np.ndarray):
        def __array_function__(self, func, types, args, kwargs):
            if func is np.may_share_memory or func is np.shares_memory:
                return False
            return super().__array_function__(func, types, args, kwargs)

    out = np.zeros((5000, 64)).view(Hiding)
    flat = np.asarray(out).reshape(-1)
    flat[:5000] = np.arange(5000.0)
    positions = flat[:5000]
    expected = cpe.positional_encoding(np.arange(5000.0), 64)
    assert cpe.positional_encoding(positions, 64, out=out) is out
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_large_positions_inside_out_do_not_crash():
    run_child(
        """
import numpy as np
import cpe

class Hiding(np.ndarray):
    def __array_function__(self, func, types, args, kwargs):
        if func is np.may_share_memory or func is np.shares_memory:
            return False
        return super().__array_function__(func, types, args, kwargs)

values = 1e12 + np.arange(5000.0)
out = np.zeros((5000, 64)).view(Hiding)
flat = np.asarray(out).reshape(-1)
flat[:5000] = values
cpe.positional_encoding(flat[:5000], 64, out=out)
expected = cpe.positional_encoding(values, 64)
assert np.array_equal(np.asarray(out), expected)
cos, sin = np.zeros((5000, 64)).view(Hiding), np.zeros((5000, 64))
np.asarray(cos).reshape(-1)[:5000] = values
cpe.rope_cos_sin(np.asarray(cos).reshape(-1)[:5000], 64, out=(cos, sin))
want = cpe.rope_cos_sin(values, 64)
assert np.array_equal(np.asarray(cos), want[0]) and np.array_equal(sin, want[1])
"""
    )


# ---- positions changed by another thread during a call ----


@pytest.mark.parametrize(
    "call",
    [
        "cpe.positional_encoding(pos, 16)",
        "cpe.positional_encoding(pos, 16, dtype=np.float32)",
        "cpe.rope_cos_sin(pos, 16)",
    ],
)
def test_positions_changed_during_a_call_never_crash(call):
    run_child(
        f"""
import threading
import numpy as np
import cpe

pos = np.arange(100_000.0, 300_000.0)
stop = threading.Event()

def flip():
    while not stop.is_set():
        pos[-1] = np.nan
        pos[-1] = 299_999.0
        pos[0] = -1e300
        pos[0] = 100_000.0

thread = threading.Thread(target=flip)
thread.start()
try:
    for _ in range(40):
        try:
            result = {call}
        except ValueError:
            continue
        for table in (result if isinstance(result, tuple) else (result,)):
            assert np.isfinite(table).all()
finally:
    stop.set()
    thread.join()
""",
        timeout=600,
    )


def test_an_integer_beyond_2_53_written_during_a_call_is_never_encoded():
    # int64 positions beyond 2**53 were checked in the caller's array after the
    # float64 copy was made: a writer racing the call could put 2**60 in the copy
    # and 3 back before the check, and 2**60 (a value the check never saw) was
    # encoded. Now every call encodes only positions it checked: all 3s, or a
    # refusal. (A tiny scale keeps 2**60's angles within 2**53.)
    import threading

    positions = np.full(4096, 3, dtype=np.int64)
    three = cpe.positional_encoding(3, 8, scale=1e-10)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            positions[100] = 2**60
            positions[100] = 3

    thread = threading.Thread(target=flip)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread.start()
    try:
        for _ in range(400):
            try:
                table = cpe.positional_encoding(positions, 8, scale=1e-10)
            except ValueError as exc:
                message = str(exc)
            else:
                message = "" if (table == three).all() else "a position never checked, encoded"
            assert message in ("", "position must be integers of magnitude <= 2**53")
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)


# ---- float16 RoPE tables: every argument converted once, nothing written on error ----


class ChangingBase(numbers.Real):
    """A "real number" whose value changes each time it is read."""

    def __init__(self, *values):
        self.values = list(values)
        self.reads = 0

    def __float__(self):
        value = self.values[min(self.reads, len(self.values) - 1)]
        self.reads += 1
        return value

    # The rest of numbers.Real, unused.
    __abs__ = __add__ = __ceil__ = __eq__ = __floor__ = __floordiv__ = __le__ = __lt__ = __mod__ = (
        __mul__
    ) = __neg__ = __pos__ = __pow__ = __radd__ = __rfloordiv__ = __rmod__ = __rmul__ = __round__ = (
        __rpow__
    ) = __rtruediv__ = __truediv__ = __trunc__ = None
    __hash__ = object.__hash__


def test_a_float16_rope_table_reads_its_base_once():
    base = ChangingBase(10000.0, 500000.0, 2.0)
    cos, sin = cpe.rope_cos_sin(40000, 16, base=base, dtype=np.float16)
    want_cos, want_sin = cpe.rope_cos_sin(40000, 16, base=10000.0, dtype=np.float16)
    np.testing.assert_array_equal(cos, want_cos)
    np.testing.assert_array_equal(sin, want_sin)


def test_a_multimodal_rope_table_reads_its_base_once():
    # Text (a count: one position on every axis, the one-axis table) and image ids.
    mrope = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    thw = np.array([[[0, 1, 2]], [[0, 4, 4]], [[0, 5, 6]]])
    for n in (5, thw):
        base = ChangingBase(10000.0, 500000.0, 2.0)
        got = cpe.rope_cos_sin(n, 16, base=base, rope_parameters=mrope)
        want = cpe.rope_cos_sin(n, 16, base=10000.0, rope_parameters=mrope)
        for table, expected in zip(got, want, strict=True):
            np.testing.assert_array_equal(table, expected)
        assert base.reads == 1


class CountedExport:
    """A CPU array that shares its memory through DLPack, counting the exports."""

    def __init__(self, array):
        self.array, self.exports = array, 0

    def __dlpack__(self, **kwargs):
        self.exports += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("call", ["apply_rope", "add_positional_encoding"])
def test_an_array_changed_in_place_is_shared_once(call):
    # x and out=x are one argument: its memory is adopted once, then checked as an
    # output too (an exporter may hand out other memory at each export).
    x = np.random.default_rng(5).standard_normal((3, 5, 8))
    want = getattr(cpe, call)(x, start=4)
    if np.from_dlpack(CountedExport(x)).flags.writeable is False:
        pytest.skip(f"NumPy {np.__version__} shares DLPack memory read-only")
    shared = CountedExport(x)
    assert getattr(cpe, call)(shared, start=4, out=shared) is shared
    assert shared.exports == 1
    np.testing.assert_array_equal(x, want)
    # Memory shared read-only is read, but not written in place.
    x.flags.writeable = False
    before = x.copy()
    np.testing.assert_array_equal(getattr(cpe, call)(CountedExport(x), start=4),
                                  getattr(cpe, call)(before, start=4))  # fmt: skip
    shared = CountedExport(x)
    with pytest.raises(TypeError, match=r"^out.*(writeable|read-only)"):
        getattr(cpe, call)(shared, start=4, out=shared)
    np.testing.assert_array_equal(x, before)


def test_a_float16_rope_table_rejected_late_leaves_out_untouched():
    # A base that is fine when first read and NaN later gives the table of its
    # first value.
    cos, sin = cpe.rope_cos_sin(
        40000, 16, base=ChangingBase(10000.0, float("nan")), dtype=np.float16
    )
    want_cos, want_sin = cpe.rope_cos_sin(40000, 16, dtype=np.float16)
    np.testing.assert_array_equal(cos, want_cos)
    np.testing.assert_array_equal(sin, want_sin)
    # Angles beyond 2**53 only in the last rows (the largest frequency is
    # 0.5 ** (-14 / 16) > 1): refused before any row is written.
    start = int(2**53 / 0.5 ** (-14 / 16)) - 20000
    out = (np.full((40000, 16), 7, np.float16), np.full((40000, 16), 7, np.float16))
    with pytest.raises(ValueError, match="position"):
        cpe.rope_cos_sin(40000, 16, start=start, base=0.5, dtype=np.float16, out=out)
    assert (out[0] == 7).all()
    assert (out[1] == 7).all()


# ---- checks inside lists of positions ----


class MaskedInside:
    def __array__(self, dtype=None, copy=None):
        return np.ma.masked_array([1.0, 2.0], mask=[False, True])


@pytest.mark.parametrize(
    "position",
    [
        [memoryview(np.array([2**53 + 1, 3])), [0.5, 1.5]],
        [memoryview(np.array([True, False])), [1, 2]],
        [[0.5, 1.5], memoryview(np.array([2**53 + 1, 3]))],
        [MaskedInside(), [1.0, 2.0]],
        [bytearray(b"ab"), [1, 2]],
        [range(2), memoryview(np.array([True, False]))],
    ],
    ids=[
        "memoryview-big-int",
        "memoryview-bool",
        "second-memoryview",
        "array-masked",
        "bytes",
        "after-a-range",
    ],
)
def test_buffer_like_elements_of_a_list_are_refused(position):
    with pytest.raises(TypeError, match="position"):
        cpe.positional_encoding(position, 4)
    with pytest.raises(TypeError, match="position"):
        cpe.rope_cos_sin(position, 4)


def test_other_sequences_in_a_list_are_read_and_checked():
    from collections import deque

    expected = cpe.positional_encoding([[0, 1, 2], [0, 1, 2]], 4)
    np.testing.assert_array_equal(cpe.positional_encoding([range(3), range(3)], 4), expected)
    np.testing.assert_array_equal(cpe.positional_encoding([deque([0, 1, 2])], 4), expected[:1])
    with pytest.raises(TypeError, match="bool"):
        cpe.positional_encoding([deque([True, 2])], 4)
    with pytest.raises(TypeError, match="dtype complex"):  # not "convert it": it is no array
        cpe.positional_encoding([1 + 2j], 4)


# ---- no warning escapes ----


@pytest.mark.parametrize("dtype", ["a", "S", "U", "float128x", "f8,,", "O"])
def test_an_unreadable_dtype_string_raises_without_a_warning(dtype, recwarn):
    with pytest.raises(TypeError, match="dtype"):
        cpe.positional_encoding(1, 4, dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        cpe.positional_encoding_table(1, 4, dtype=dtype)
    assert not recwarn.list, [str(w.message) for w in recwarn.list]


def test_native_byte_order_dtype_strings_are_still_read():
    native = "<" if sys.byteorder == "little" else ">"
    for spelling in (native + "f8", "=f8", native + "f4", "=f2"):
        assert cpe.positional_encoding(1, 4, dtype=spelling).dtype == np.dtype(spelling)
    swapped = ">" if native == "<" else "<"
    with pytest.raises(TypeError, match="dtype"):
        cpe.positional_encoding(1, 4, dtype=swapped + "f8")


# ---- angles beyond the range where the accuracy bound holds ----


@pytest.mark.parametrize(
    "call",
    [
        lambda: cpe.positional_encoding(2**53, 4, scale=1e20),
        lambda: cpe.positional_encoding(1e17, 4),
        lambda: cpe.positional_encoding(np.array([0.0, 1e17]), 4),
        lambda: cpe.positional_encoding(100, 64, base=1e-308),
        lambda: cpe.positional_encoding_table(10, 64, start=100, base=1e-308),
        lambda: cpe.positional_encoding_table(2000, 4, start=2**53 - 2000, scale=2.0),
        lambda: cpe.rope_cos_sin(10, 64, start=100, base=1e-308),
        lambda: cpe.rope_cos_sin(np.array([1e17]), 4),
    ],
)
def test_angles_beyond_2_53_are_refused(call):
    with pytest.raises(ValueError, match=r"2\*\*53"):
        call()


def test_angles_up_to_2_53_are_accepted():
    row = cpe.positional_encoding(2**53, 4)
    assert np.isfinite(row).all()
    cpe.positional_encoding_table(3, 4, start=2**53 - 3)
    cpe.positional_encoding(2**52, 4, scale=2.0)
