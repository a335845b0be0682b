"""Bad input: a clear exception naming the argument, and nothing written."""

from __future__ import annotations

import array
import ctypes
import sys
from typing import NamedTuple

import numpy as np
import pytest

import cpe

GOOD = {"position": [1, 2], "D": 4}


class Pair(NamedTuple):
    first: object
    second: object


class AList(list):
    pass


BAD_ARGUMENTS = [
    # (keyword overrides, exception, text that must appear in the message)
    ({"D": 4.0}, TypeError, "D must be an integer"),
    ({"D": "4"}, TypeError, "D must be an integer"),
    ({"D": True}, TypeError, "D must be an integer"),
    ({"D": None}, TypeError, "D must be an integer"),
    ({"D": 0}, ValueError, "D must be >= 1"),
    ({"D": -3}, ValueError, "D must be >= 1"),
    ({"D": 2**70}, ValueError, "D is too large"),
    ({"position": [1.0, np.nan]}, ValueError, "position must be finite"),
    ({"position": np.inf}, ValueError, "position must be finite"),
    ({"position": [-np.inf]}, ValueError, "position must be finite"),
    ({"position": True}, TypeError, "position"),
    ({"position": [True, False]}, TypeError, "position"),
    ({"position": "3"}, TypeError, "position"),
    ({"position": [1 + 2j]}, TypeError, "position"),
    ({"position": None}, TypeError, "position"),
    ({"position": [object()]}, TypeError, "position"),
    ({"position": [[1, 2], [3]]}, TypeError, "position"),
    ({"position": 2**60}, ValueError, "position"),
    ({"position": [2**60]}, ValueError, "position"),
    ({"position": np.array([-(2**60)])}, ValueError, "position"),
    ({"position": np.array(["2001-01-01"], dtype="datetime64[D]")}, TypeError, "position"),
    # np.timedelta64 is an np.integer to NumPy, but no position.
    ({"position": np.timedelta64(5, "s")}, TypeError, "position must be a real number"),
    ({"position": np.timedelta64(5, "D")}, TypeError, "position must be a real number"),
    ({"position": np.timedelta64("NaT", "ns")}, TypeError, "position must be a real number"),
    # numpy.asarray would make 0/1 of a bool, or round a big integer next to a float.
    ({"position": [True, 2]}, TypeError, "position"),
    ({"position": [[1, 2], [np.True_, 3]]}, TypeError, "position"),
    ({"position": (np.array([True, False]), [2, 3])}, TypeError, "position"),
    ({"position": [2**53 + 1, 0.5]}, ValueError, "position"),
    ({"position": [[0.5], [-(2**60)]]}, ValueError, "position"),
    ({"position": [np.int64(2**60), 0.5]}, ValueError, "position"),
    ({"position": [np.array(2**60), 0.5]}, ValueError, "position"),
    ({"position": np.array([2**53 + 1, 0])}, ValueError, "position"),
    ({"position": np.array([0, 2**53 + 1], np.uint64)}, ValueError, "position"),
    ({"position": np.ma.masked_array([1, 2], mask=[0, 1])}, TypeError, "must not be a masked"),
    ({"position": [np.ma.masked_array([1.0, 2.0], mask=[0, 1])]}, TypeError, "masked"),
    ({"position": Pair(True, 2.5)}, TypeError, "position"),  # a tuple subclass
    ({"position": [[0.5, 1.0], AList([2.0, np.True_])]}, TypeError, "position"),
    ({"position": [1.5e308], "base": 0.5}, ValueError, r"2\*\*53"),
    ({"base": 0}, ValueError, "base must be > 0"),
    ({"base": -10.0}, ValueError, "base must be > 0"),
    ({"base": np.nan}, ValueError, "base must be finite"),
    ({"base": np.inf}, ValueError, "base must be finite"),
    ({"base": 10**400}, ValueError, "base must be finite"),
    ({"base": "10000"}, TypeError, "base must be a real number"),
    ({"base": 1j}, TypeError, "base must be a real number"),
    ({"base": True}, TypeError, "base must be a real number"),
    ({"base": [10000.0]}, TypeError, "base must be a real number"),
    ({"dtype": np.int32}, TypeError, "dtype must be float64, float32, float16 or bfloat16"),
    ({"dtype": "complex128"}, TypeError, "dtype must be"),
    ({"dtype": "banana"}, TypeError, "dtype must be"),
    ({"dtype": ">f8"}, TypeError, "dtype must be"),
    ({"dtype": np.longdouble}, TypeError, "dtype must be"),
]


@pytest.mark.parametrize(("override", "exc", "text"), BAD_ARGUMENTS)
def test_positional_encoding_rejects(override, exc, text):
    kwargs = {**GOOD, **override}
    position, D = kwargs.pop("position"), kwargs.pop("D")
    with pytest.raises(exc, match=text):
        cpe.positional_encoding(position, D, **kwargs)


TABLE_BAD = [
    ({"n": -1}, ValueError, "n must be >= 0"),
    ({"n": 2.0}, TypeError, "n must be an integer"),
    ({"n": False}, TypeError, "n must be an integer"),
    ({"D": 0}, ValueError, "D must be >= 1"),
    ({"start": 1.5}, TypeError, "start must be an integer"),
    ({"start": True}, TypeError, "start must be an integer"),
    ({"start": 2**53}, ValueError, "start"),
    ({"start": -(2**53) - 1}, ValueError, "start"),
    ({"base": -1}, ValueError, "base"),
    ({"dtype": "int8"}, TypeError, "dtype"),
    ({"n": 2**40, "D": 2**40}, ValueError, "too large"),
]


@pytest.mark.parametrize(("override", "exc", "text"), TABLE_BAD)
def test_positional_encoding_table_rejects(override, exc, text):
    kwargs = {"n": 3, "D": 4, **override}
    n, D = kwargs.pop("n"), kwargs.pop("D")
    with pytest.raises(exc, match=text):
        cpe.positional_encoding_table(n, D, **kwargs)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 33])
def test_every_position_of_an_array_is_checked(n):
    # The largest magnitude is one reduction over the array (vectorized): a bad
    # value anywhere, in the vector part or the rest, is found.
    for index in range(n):
        for bad, text in [
            (np.nan, "must be finite"),
            (-np.inf, "must be finite"),
            (np.inf, "must be finite"),
            (-(2.0**60), "at most 2\\*\\*53"),
        ]:
            positions = np.full(n, 3.0)
            positions[index] = bad
            with pytest.raises(ValueError, match=text):
                cpe.positional_encoding(positions, 16)
            with pytest.raises(ValueError, match=text):
                cpe.rope_cos_sin(positions, 16)
        positions = np.full(n, 1.0)
        positions[index] = -(2.0**40)  # the largest, negative: within range for D=2
        assert np.isfinite(cpe.positional_encoding(positions, 2)).all()


@pytest.mark.parametrize("n", [1, 7, 8, 9, 33])
def test_every_64_bit_integer_is_checked_for_2_to_the_53(n):
    # 64-bit integers are exact only up to 2**53: the reduction that finds a
    # larger one anywhere in the array, either sign, and the exact limits kept.
    for index in range(n):
        for dtype, bad, fine in [
            (np.int64, 2**53 + 1, 2**53),
            (np.int64, -(2**53) - 1, -(2**53)),
            (np.uint64, 2**53 + 1, 2**53),
            (np.uint64, 2**64 - 1, 2**53 - 1),
        ]:
            positions = np.zeros(n, dtype)
            positions[index] = bad
            with pytest.raises(ValueError, match="integers of magnitude <= 2\\*\\*53"):
                cpe.positional_encoding(positions, 4)
            positions[index] = fine
            row = cpe.positional_encoding(positions, 4)[index]
            np.testing.assert_array_equal(row, cpe.positional_encoding(float(fine), 4))


def test_unallocatable_table_is_a_memory_error():
    with pytest.raises(MemoryError):
        cpe.positional_encoding_table(2**36, 2**20)


def sentinel(shape, dtype=np.float64):
    return np.full(shape, 7.0, dtype=dtype)


def _released():
    view = memoryview(sentinel((2, 4)))
    view.release()
    return view


def _failing_exporter():
    class Busy:
        def __buffer__(self, flags):
            raise BufferError("busy")

    return Busy()


BAD_OUTS = [
    (lambda: [0.0] * 8, TypeError, "out must be a numpy.ndarray"),
    (lambda: sentinel((2, 4), np.int32), TypeError, "out must have dtype float64, float32"),
    (lambda: sentinel((2, 4)).astype(">f8"), TypeError, "out must have dtype"),
    (lambda: sentinel((2, 5)), ValueError, "out must have shape"),
    (lambda: sentinel((8,)), ValueError, "out must have shape"),
    (lambda: sentinel((4, 2)).T, ValueError, "C-contiguous"),
    (lambda: sentinel((2, 8))[:, ::2], ValueError, "C-contiguous"),
    (
        lambda: np.frombuffer(bytearray(65), dtype=np.float64, offset=1).reshape(2, 4),
        ValueError,
        "aligned",
    ),
    # Buffers: read-only (bytes, a read-only memoryview), or bytes of no float dtype.
    (lambda: memoryview(sentinel((2, 4))).toreadonly(), ValueError, "out must be writeable"),
    (lambda: bytes(64), TypeError, "out must have dtype float64"),
    (lambda: bytearray(64), TypeError, r"out must have dtype float64.*\), got uint8"),
    (lambda: array.array("d", [7.0] * 8), ValueError, "out must have shape"),
    (lambda: memoryview(sentinel((4, 2)).T), ValueError, "C-contiguous"),
    (_released, ValueError, "out could not share its memory.*released"),
]
if sys.version_info >= (3, 12):  # (a Python class can export a buffer from 3.12 on)
    BAD_OUTS.append((_failing_exporter, ValueError, "out could not share its memory.*busy"))


@pytest.mark.parametrize(("make_out", "exc", "text"), BAD_OUTS)
def test_bad_out_is_rejected(make_out, exc, text):
    out = make_out()
    with pytest.raises(exc, match=text):
        cpe.positional_encoding([1, 2], 4, out=out)
    with pytest.raises(exc, match=text):
        cpe.positional_encoding_table(2, 4, out=out)


def test_out_sets_the_dtype_when_dtype_is_not_given():
    # As NumPy's ufuncs take the output's dtype; a dtype= that disagrees with out=
    # is still an error, and leaves it untouched.
    want = cpe.positional_encoding_table(6, 16, start=9, dtype=np.float32)
    out = np.full((6, 16), 7.0, np.float32)
    assert cpe.positional_encoding_table(6, 16, start=9, out=out) is out
    np.testing.assert_array_equal(out, want)
    out16 = np.empty(16, np.float16)
    cpe.positional_encoding(9, 16, out=out16, dtype=None)
    np.testing.assert_array_equal(out16, cpe.positional_encoding(9, 16, dtype=np.float16))
    pair = (np.empty((3, 8), np.float16), np.empty((3, 8), np.float16))
    cpe.rope_cos_sin(3, 8, out=pair)
    np.testing.assert_array_equal(pair[1], cpe.rope_cos_sin(3, 8, dtype=np.float16)[1])
    grid = np.empty((4, 16), np.float32)
    np.testing.assert_array_equal(
        cpe.sincos_2d(2, 2, 16, out=grid), cpe.sincos_2d(2, 2, 16, dtype=np.float32)
    )
    with pytest.raises(TypeError, match=r"out must have dtype float64 \(dtype=, or without it"):
        cpe.positional_encoding_table(6, 16, dtype=np.float64, out=out)
    np.testing.assert_array_equal(out, want)


def test_buffers_as_out_are_filled_and_returned():
    # Any writable buffer of the right shape and dtype: array.array, memoryview...
    flat = array.array("d", [7.0] * 8)
    assert cpe.positional_encoding(3, 8, out=flat) is flat
    assert np.asarray(flat).tobytes() == cpe.positional_encoding(3, 8).tobytes()
    table = memoryview(sentinel((5, 6), np.float32))
    assert cpe.positional_encoding_table(5, 6, start=2, dtype=np.float32, out=table) is table
    np.testing.assert_array_equal(table, cpe.positional_encoding_table(5, 6, start=2, dtype="f4"))
    cos, sin = memoryview(sentinel((4, 8))), memoryview(sentinel((4, 8)))
    assert cpe.rope_cos_sin(4, 8, out=(cos, sin))[1] is sin
    np.testing.assert_array_equal(np.asarray(sin), cpe.rope_cos_sin(4, 8)[1])


def test_an_unreadable_buffer_as_out_is_refused():
    with pytest.raises(TypeError, match="out must share memory that NumPy can read"):
        cpe.positional_encoding(3, 2, out=(ctypes.c_char_p * 2)())  # format '<z': none of NumPy's


def test_read_only_out_is_rejected_and_unchanged():
    out = sentinel((2, 4))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writeable"):
        cpe.positional_encoding([1, 2], 4, out=out)
    np.testing.assert_array_equal(out, 7.0)


@pytest.mark.parametrize(("override", "exc", "text"), BAD_ARGUMENTS)
def test_out_is_untouched_when_another_argument_is_bad(override, exc, text):
    out = sentinel((2, 4))
    kwargs = {**GOOD, **override}
    position, D = kwargs.pop("position"), kwargs.pop("D")
    with pytest.raises(exc):
        cpe.positional_encoding(position, D, out=out, **kwargs)
    np.testing.assert_array_equal(out, 7.0)


def _read_only(shape, dtype):
    out = sentinel(shape, dtype)
    out.flags.writeable = False
    return out


def _misaligned(shape, dtype):
    size = np.dtype(dtype).itemsize
    raw = np.zeros(shape[0] * size + 1, np.uint8)
    out = raw[1:].view(dtype)
    out[...] = 7.0
    return out


# Outputs of one position (shape (8,)) that must be refused: a scalar position
# takes the scalar path of positional_encoding, with the same checks of out=.
ONE_POSITION_BAD_OUTS = {
    "list": (lambda shape, dtype: [7.0] * 8, TypeError, "out must be a numpy.ndarray"),
    "other dtype": (
        lambda shape, dtype: sentinel(shape, np.float32 if dtype == np.float64 else np.float64),
        TypeError,
        "out must have dtype",
    ),
    "byte-swapped": (
        lambda shape, dtype: sentinel(shape, np.dtype(dtype).newbyteorder()),
        TypeError,
        "out must have dtype",
    ),
    "longer": (lambda shape, dtype: sentinel((9,), dtype), ValueError, "out must have shape"),
    "2-D": (lambda shape, dtype: sentinel((1, 8), dtype), ValueError, "out must have shape"),
    "0-D": (lambda shape, dtype: sentinel((), dtype), ValueError, "out must have shape"),
    "strided": (lambda shape, dtype: sentinel((16,), dtype)[::2], ValueError, "C-contiguous"),
    "reversed": (lambda shape, dtype: sentinel(shape, dtype)[::-1], ValueError, "C-contiguous"),
    "misaligned": (_misaligned, ValueError, "aligned"),
    "read-only": (_read_only, ValueError, "out must be writeable"),
}


@pytest.mark.parametrize("position", [5, -3, 2.5, np.int64(5), np.float64(2.5)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ONE_POSITION_BAD_OUTS)
def test_bad_out_for_one_position_is_rejected_and_unchanged(kind, dtype, position):
    make_out, exc, text = ONE_POSITION_BAD_OUTS[kind]
    out = make_out((8,), dtype)
    before = np.array(out, copy=True)
    with pytest.raises(exc, match=text):
        cpe.positional_encoding(position, 8, dtype=dtype, out=out)
    np.testing.assert_array_equal(np.asarray(out), before)


def test_out_is_untouched_by_a_bad_table_request():
    out = sentinel((3, 4))
    with pytest.raises(ValueError, match="base must be > 0"):
        cpe.positional_encoding_table(3, 4, base=-1.0, out=out)
    with pytest.raises(ValueError, match="start and start"):
        cpe.positional_encoding_table(3, 4, start=2**53, out=out)
    np.testing.assert_array_equal(out, 7.0)
