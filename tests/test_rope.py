"""Rotary (RoPE) cos/sin tables against HF Llama / GPT-J formulas and mpmath."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import cpe
import reference as ref


def close(got, expected, max_angle):
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15 * max(1.0, max_angle) * 8)


@pytest.mark.parametrize("head_dim", [2, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("start", [0, 4090])
def test_half_layout_is_llama(head_dim, base, start):
    cos, sin = cpe.rope_cos_sin(100, head_dim, base=base, start=start)
    ref_cos, ref_sin = ref.llama_rope(np.arange(start, start + 100), head_dim, base)
    close(cos, ref_cos, start + 100)
    close(sin, ref_sin, start + 100)


@pytest.mark.parametrize("head_dim", [2, 64])
def test_interleaved_layout_is_gptj(head_dim):
    cos, sin = cpe.rope_cos_sin(300, head_dim, layout="interleaved")
    ref_cos, ref_sin = ref.gptj_rope(300, head_dim)
    close(cos, ref_cos, 300)
    close(sin, ref_sin, 300)


def test_a_zero_start_beside_positions_is_accepted():
    ids = np.array([[4, 1]])
    expected = cpe.rope_cos_sin(ids, 8)
    for start in (0, np.int64(0), np.array(0)):
        for got, want in zip(cpe.rope_cos_sin(ids, 8, start=start), expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_python_int_is_a_count_and_anything_else_positions():
    # One meaning for a scalar across cpe: a NumPy integer (as indexing an array
    # gives) or a 0-d array is a position, as positional_encoding reads it; a
    # count is a Python int. (It was a count here: at decode time, the wrong rows.)
    class Count(int):
        pass

    for count in (5, Count(5)):
        cos, sin = cpe.rope_cos_sin(count, 4)
        assert cos.shape == sin.shape == (5, 4)
    table = cpe.rope_cos_sin(6, 4)
    for position in (np.int64(5), np.array(5), np.uint8(5), np.array(5.0), 5.0):
        cos, sin = cpe.rope_cos_sin(position, 4)
        assert cos.shape == sin.shape == (4,)
        np.testing.assert_array_equal(cos, table[0][5])
        np.testing.assert_array_equal(sin, table[1][5])
        np.testing.assert_array_equal(cpe.positional_encoding(position, 4)[1::2], cos[:2])


# Both tables of any size share one allocation; neither is a view of the other.
POSITION_IDS = [
    np.array([[0, 5, 9, 9], [100, 3, 2, 1]]),
    np.random.default_rng(7).integers(0, 8192, (3, 1000)),
]


@pytest.mark.parametrize("ids", POSITION_IDS, ids=["small", "3x1000"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_position_ids(ids, dtype, layout):
    cos, sin = cpe.rope_cos_sin(ids, 16, layout=layout, dtype=dtype)
    assert cos.shape == sin.shape == (*ids.shape, 16)
    assert cos.dtype == sin.dtype == dtype
    assert cos.flags.c_contiguous
    assert sin.flags.c_contiguous
    assert not np.shares_memory(cos, sin)
    table_cos, table_sin = cpe.rope_cos_sin(int(ids.max()) + 1, 16, layout=layout)
    atol = {np.float64: 2e-15, np.float32: 6e-8, np.float16: 1e-3}[dtype]
    np.testing.assert_allclose(cos, table_cos[ids], rtol=0, atol=atol)
    np.testing.assert_allclose(sin, table_sin[ids], rtol=0, atol=atol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float32_correctly_rounded_at_long_context(layout, report_error):
    mpmath.mp.dps = 50
    head_dim, base = 128, 500000.0
    positions = np.array([10**6 - 1, 10**6, 777_777, 123_456, 1])
    cos, sin = cpe.rope_cos_sin(positions, head_dim, base=base, layout=layout, dtype=np.float32)
    assert cos.dtype == sin.dtype == np.float32
    for i, p in enumerate(positions.tolist()):
        for k in range(0, head_dim, 5):
            j = k % (head_dim // 2) if layout == "half" else k // 2
            angle = mpmath.mpf(p) * mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * j) / head_dim)
            report_error(
                "float32 RoPE, |p| <= 1e6",
                float(abs(mpmath.mpf(float(cos[i, k])) - mpmath.cos(angle))),
                3.0e-8,
            )
            report_error(
                "float32 RoPE, |p| <= 1e6",
                float(abs(mpmath.mpf(float(sin[i, k])) - mpmath.sin(angle))),
                3.0e-8,
            )


def test_float32_arithmetic_rope_is_measurably_worse():
    """What the bound protects against: a float32 rotary cache at 1e6."""
    positions = np.float32(10**6)
    inv_freq = (
        1.0 / (np.float32(10000) ** (np.arange(0, 64, 2, dtype=np.float32) / np.float32(64)))
    ).astype(np.float32)
    naive = np.cos(positions * inv_freq)
    exact, _ = ref.llama_rope(10**6, 64)
    assert np.abs(naive - exact[:32]).max() > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"head_dim": 7}, ValueError, "head_dim must be even"),
        ({"head_dim": 0}, ValueError, "head_dim must be >= 2"),
        ({"layout": "neox"}, ValueError, "layout must be one of"),
        ({"n": True}, TypeError, "n must be an integer or an array"),
        ({"n": -1}, ValueError, "n must be >= 0"),
        ({"n": [1.0, np.nan]}, ValueError, "^n \\(the positions\\) must be finite"),
        ({"n": [[1, 2], [3]]}, TypeError, "n \\(the positions\\)"),
        ({"base": 0}, ValueError, "base must be > 0"),
        ({"dtype": "int64"}, TypeError, "dtype"),
        # Position ids carry their own offsets: a start beside them is refused,
        # not ignored (it used to be, unchecked).
        ({"n": np.array([[0, 1, 2]]), "start": 100}, ValueError, "start must be 0 when n gives"),
        ({"n": 3.5, "start": -1}, ValueError, "start must be 0 when n gives"),
        ({"n": np.array([0, 1]), "start": "x"}, TypeError, "start must be an integer, got str"),
        ({"n": np.array([0, 1]), "start": True}, TypeError, "start must be an integer, got bool"),
        ({"n": np.array([0, 1]), "start": 1.5}, TypeError, "start must be an integer, got float"),
        ({"n": np.array([0, 1]), "start": None}, TypeError, "start must be an integer"),
        # A table's first and last positions are exact doubles, as in the 1-D table.
        ({"start": 2**53}, ValueError, "start and start \\+ n must be integers"),
        ({"start": -(2**53) - 1}, ValueError, "start and start \\+ n must be integers"),
        ({"n": 0, "start": 2**53 + 1}, ValueError, "start and start \\+ n must be integers"),
        ({"start": "x"}, TypeError, "start must be an integer, got str"),
        ({"start": True}, TypeError, "start must be an integer, got bool"),
        ({"start": 2.0}, TypeError, "start must be an integer, got float"),
        # start + n before base, as positional_encoding_table checks them
        ({"start": 2**53, "base": -1.0}, ValueError, "start and start"),
        ({"base": float("nan")}, ValueError, "base must be finite"),
    ],
)
def test_rope_errors(kwargs, exc, text):
    args = {"n": 4, "head_dim": 8, **kwargs}
    with pytest.raises(exc, match=text):
        cpe.rope_cos_sin(args.pop("n"), args.pop("head_dim"), **args)


def split_table(table: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """RoPE's tables from an encoding table with the sines first (half) or interleaved."""
    half = table.shape[-1] // 2
    if layout == "half":
        s, c = table[:, :half], table[:, half:]
        return np.concatenate([c, c], axis=1), np.concatenate([s, s], axis=1)
    s, c = table[:, 0::2], table[:, 1::2]
    return np.repeat(c, 2, axis=1), np.repeat(s, 2, axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("n", "head_dim", "start"), [(1, 2, 0), (7, 8, -3), (5000, 64, 10**6)])
def test_tables_are_the_encoding_table_rearranged(n, head_dim, start, layout, dtype):
    # rope_cos_sin writes both tables in the kernel (float16: float64 tables
    # rounded once); either way the values are those of the encoding table.
    cos, sin = cpe.rope_cos_sin(n, head_dim, base=500000.0, start=start, layout=layout, dtype=dtype)
    table = cpe.positional_encoding_table(
        n,
        head_dim,
        start=start,
        base=500000.0,
        dtype=dtype,
        layout="sin_cos" if layout == "half" else "interleaved",
    )
    want_cos, want_sin = split_table(table, layout)
    assert cos.dtype == sin.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(cos, want_cos)
    np.testing.assert_array_equal(sin, want_sin)


# Positions that reach each path of the position kernel: products of one to
# four digit rows (kept, or made for the request at head_dim 8192), negated
# sines, digit tables of a dense span across 0 beyond 65536, and a row of
# sines and cosines per position.
POSITION_SETS = {
    "digits": np.random.default_rng(3).integers(-65535, 65536, (4, 25)),
    "one digit row": np.array([0, 1, 255, -7]),
    "dense span across 0": np.arange(-70000, 70000, 100),
    "sparse and huge": np.array([2**50, -(2**45) + 1, 10**12, 3]),
    "real-valued": np.array([[0.5, -1e5 / 3], [2.25, 999.0]]),
    "0-d float": np.array(1234.0),  # a 0-d integer array is a row count
}
POSITION_CASES = [
    *((ids, head_dim) for ids in POSITION_SETS for head_dim in (2, 16, 512)),
    ("digits", 8192),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("ids", "head_dim"), POSITION_CASES)
def test_position_tables_are_the_encoding_rearranged(ids, head_dim, layout, dtype):
    # The kernel writes both tables row by row; the values are those of the
    # encoding of the same positions, whatever path its rows take.
    positions = POSITION_SETS[ids]
    cos, sin = cpe.rope_cos_sin(positions, head_dim, base=500000.0, layout=layout, dtype=dtype)
    table = cpe.positional_encoding(
        positions,
        head_dim,
        base=500000.0,
        dtype=dtype,
        layout="sin_cos" if layout == "half" else "interleaved",
    )
    want_cos, want_sin = split_table(table.reshape(-1, head_dim), layout)
    assert cos.shape == sin.shape == table.shape
    assert cos.dtype == sin.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(cos.reshape(-1, head_dim), want_cos)
    np.testing.assert_array_equal(sin.reshape(-1, head_dim), want_sin)


# ---- out=(cos, sin) ----

OUT_REQUESTS = {
    "table": ({"n": 300, "start": 4090}, (300, 64)),
    "ids": ({"n": np.array([[7, 0, 65535], [3, 10**6, 2]])}, (2, 3, 64)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("request_name", list(OUT_REQUESTS))
def test_out_is_filled_with_the_bits_of_new_tables_and_returned(request_name, layout, dtype):
    kwargs, shape = OUT_REQUESTS[request_name]
    kwargs = {**kwargs, "head_dim": 64, "base": 500000.0, "layout": layout, "dtype": dtype}
    want_cos, want_sin = cpe.rope_cos_sin(**kwargs)
    cos_out, sin_out = np.full(shape, np.nan, dtype), np.full(shape, np.nan, dtype)
    cos, sin = cpe.rope_cos_sin(**kwargs, out=(cos_out, sin_out))
    assert cos is cos_out
    assert sin is sin_out
    assert cos.tobytes() == want_cos.tobytes()
    assert sin.tobytes() == want_sin.tobytes()


def _views_sharing_all_but_one_value(shape):
    owner = np.full(int(np.prod(shape)) + 1, 7.0)
    return owner[:-1].reshape(shape), owner[1:].reshape(shape)


BAD_ROPE_OUTS = [
    (lambda s: np.full(s, 7.0), TypeError, r"out must be a tuple \(cos, sin\).*got ndarray"),
    (lambda s: [np.full(s, 7.0), np.full(s, 7.0)], TypeError, "out must be a tuple.*got list"),
    (lambda s: (np.full(s, 7.0),), TypeError, "out must be a tuple.*got a tuple of 1"),
    (lambda s: (np.full(s, 7.0),) * 3, TypeError, "out must be a tuple.*got a tuple of 3"),
    (
        lambda s: (np.full(s, 7.0), np.full(s, 7.0, np.float32)),
        TypeError,
        r"out\[1\] \(sin\) must have dtype float64",
    ),
    (
        lambda s: (np.full((*s[:-1], 66), 7.0), np.full(s, 7.0)),
        ValueError,
        r"out\[0\] \(cos\) must have shape",
    ),
    (
        lambda s: (np.full(s, 7.0), np.full(s[::-1], 7.0).T),
        ValueError,
        r"out\[1\] \(sin\) must be C-contiguous",
    ),
    (lambda s: (np.full(s, 7.0), [7.0]), TypeError, r"out\[1\] \(sin\) must be a numpy.ndarray"),
    # NumPy's ufuncs allocate for None; a half-given pair would be a surprise.
    (lambda s: (None, np.full(s, 7.0)), TypeError, r"out\[0\] \(cos\) must be an array, got None"),
    (lambda s: (lambda a: (a, a))(np.full(s, 7.0)), ValueError, "must not share memory"),
    (_views_sharing_all_but_one_value, ValueError, "must not share memory"),
]


@pytest.mark.parametrize(("make_out", "exc", "text"), BAD_ROPE_OUTS)
@pytest.mark.parametrize("request_name", list(OUT_REQUESTS))
def test_bad_out_is_rejected_by_name_and_left_untouched(request_name, make_out, exc, text):
    kwargs, shape = OUT_REQUESTS[request_name]
    out = make_out(shape)
    arrays = list(out) if isinstance(out, (tuple, list)) else [out]
    with pytest.raises(exc, match=text):
        cpe.rope_cos_sin(**kwargs, head_dim=64, out=out)
    for array in arrays:
        if array is not None:
            assert (np.asarray(array) == 7.0).all()


def test_read_only_out_is_rejected_and_left_untouched():
    cos_out, sin_out = np.full((4, 8), 7.0), np.full((4, 8), 7.0)
    sin_out.flags.writeable = False
    with pytest.raises(ValueError, match=r"out\[1\] \(sin\) must be writeable"):
        cpe.rope_cos_sin(4, 8, out=(cos_out, sin_out))
    assert (cos_out == 7.0).all()
    assert (sin_out == 7.0).all()


def test_a_bad_position_leaves_out_untouched():
    cos_out, sin_out = np.full((3, 8), 7.0), np.full((3, 8), 7.0)
    with pytest.raises(ValueError, match=r"^n \(the positions\) must be finite"):
        cpe.rope_cos_sin([1.0, 2.0, np.nan], 8, out=(cos_out, sin_out))
    assert (cos_out == 7.0).all()
    assert (sin_out == 7.0).all()


@pytest.mark.parametrize("table", [0, 1])
def test_positions_read_from_out_itself(table):
    # The kernel writes row after row: positions stored in the rows it writes
    # must have been copied first.
    positions = np.array([5.0, 1.0, 70000.0, 3.0])
    want_cos, want_sin = cpe.rope_cos_sin(positions, 8)
    out = (np.zeros((4, 8)), np.zeros((4, 8)))
    out[table].reshape(-1)[:4] = positions
    cos, sin = cpe.rope_cos_sin(out[table].reshape(-1)[:4], 8, out=out)
    np.testing.assert_array_equal(cos, want_cos)
    np.testing.assert_array_equal(sin, want_sin)
