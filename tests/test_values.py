"""Values, shapes and dtypes against the definition and the plain-NumPy oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cpe
import reference as _reference


# The oracle rounds w_j before multiplying: |error| <= ~1e-16 * |p| * 8.
def tolerance(max_position: float) -> float:
    return 1e-15 * max(1.0, max_position) * 8


def test_origin_is_sin0_cos0():
    np.testing.assert_array_equal(cpe.positional_encoding(0, 4), [0.0, 1.0, 0.0, 1.0])


def test_definition_written_out_by_hand():
    # D = 4: w_0 = 1, w_1 = 10000 ** (-2/4) = 0.01
    p = 3
    expected = [math.sin(3), math.cos(3), math.sin(0.03), math.cos(0.03)]
    np.testing.assert_allclose(cpe.positional_encoding(p, 4), expected, rtol=0, atol=1e-16)


def test_odd_columns_use_the_previous_frequency_not_the_next():
    # The np.roll(div_term, -1) variant would use w_{j+1} for cos column 2j+1.
    D, p = 6, 50
    row = cpe.positional_encoding(p, D)
    w = [10000.0 ** (-2 * j / D) for j in range(3)]
    for j in range(3):
        assert row[2 * j + 1] == pytest.approx(math.cos(p * w[j]), abs=1e-15)
        assert abs(row[2 * j + 1] - math.cos(p * w[(j + 1) % 3])) > 1e-3


@pytest.mark.parametrize("D", [1, 3, 5, 9, 101])
def test_odd_width_ends_with_a_sine(D):
    p = 17
    row = cpe.positional_encoding(p, D)
    w_last = 10000.0 ** (-2 * (D // 2) / D)
    assert row[-1] == pytest.approx(math.sin(p * w_last), abs=1e-15)


@pytest.mark.parametrize("D", [1, 2, 3, 4, 7, 64, 255, 512, 1000])
@pytest.mark.parametrize("base", [10000.0, 10.0, 500000.0])
def test_matches_oracle_for_arrays(D, base):
    rng = np.random.default_rng(D)
    positions = rng.integers(-5000, 5000, size=(3, 5))
    got = cpe.positional_encoding(positions, D, base=base)
    assert got.shape == (3, 5, D)
    np.testing.assert_allclose(
        got, _reference.positional_encoding(positions, D, base=base), rtol=0, atol=tolerance(5000)
    )


@pytest.mark.parametrize(
    ("n", "D", "start"),
    [(0, 4, 0), (1, 1, 0), (16, 8, 3), (17, 9, -20), (1000, 64, 0), (4099, 130, 77)],
)
def test_table_matches_oracle(n, D, start):
    got = cpe.positional_encoding_table(n, D, start=start)
    assert got.shape == (n, D)
    expected = _reference.positional_encoding_table(n, D, start=start)
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance(abs(start) + n))


@pytest.mark.parametrize(("n", "D", "start"), [(5, 6, 0), (300, 33, -150), (2000, 512, 999_000)])
def test_table_rows_equal_single_positions(n, D, start):
    table = cpe.positional_encoding_table(n, D, start=start)
    singles = cpe.positional_encoding(np.arange(start, start + n), D)
    # Both paths are within 1e-15 of the exact value (see test_accuracy).
    np.testing.assert_allclose(table, singles, rtol=0, atol=2e-15)


@pytest.mark.parametrize(
    "dtype",
    [
        *(np.float32, "float32", np.dtype("f4"), np.float16, "float16", np.float64, float, "f8"),
        *("float", "double", "single", "half", "d", "f", "e", "f4", "f2", np.dtype("f2")),
    ],
)
def test_dtypes_are_rounded_once_from_float64(dtype):
    dt = np.dtype(dtype)
    single = cpe.positional_encoding(1234, 50, dtype=dtype)
    assert single.dtype == dt
    np.testing.assert_array_equal(single, cpe.positional_encoding(1234, 50).astype(dt))
    positions = np.arange(-40, 2000, 37)
    got = cpe.positional_encoding(positions, 50, dtype=dtype)
    assert got.dtype == dt
    np.testing.assert_array_equal(got, cpe.positional_encoding(positions, 50).astype(dt))
    table = cpe.positional_encoding_table(500, 50, start=-40, dtype=dtype)
    assert table.dtype == dt
    np.testing.assert_array_equal(
        table, cpe.positional_encoding_table(500, 50, start=-40).astype(dt)
    )


@pytest.mark.parametrize(
    "position",
    [
        5,
        np.int8(5),
        np.int64(5),
        np.uint16(5),
        5.0,
        np.float32(5.0),
        np.float16(5.0),
        np.array(5),
        [5],
        [[5]],
        (5,),
        np.array([5], dtype=">i4"),
        np.array([5.0], dtype=">f8"),
    ],
)
def test_position_kinds_agree(position):
    got = cpe.positional_encoding(position, 8)
    assert got.shape == (*np.shape(position), 8)
    np.testing.assert_array_equal(got.reshape(-1, 8)[0], cpe.positional_encoding(5, 8))


NUMPY_SCALAR_TYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


@pytest.mark.parametrize("kind", NUMPY_SCALAR_TYPES, ids=lambda kind: kind.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_numpy_scalar_positions_are_the_numbers_they_hold(kind, dtype):
    # NumPy scalars take the scalar path (as the Python number they hold): the same
    # values as that number, and as the same position in a 0-d array, which takes
    # the array path.
    info = np.iinfo(kind) if np.issubdtype(kind, np.integer) else np.finfo(kind)
    values = [0, 1, 7, -1, -300, 2047, 65535, 10**6, -(10**6), int(info.max), int(info.min)]
    if np.issubdtype(kind, np.floating):
        values += [0.5, -2.75, 1000.125]
    lowest, highest = int(info.min), int(info.max)
    for value in sorted(v for v in set(values) if lowest <= v <= highest and abs(v) <= 10**6):
        position = kind(value)
        number = position.item()
        got = cpe.positional_encoding(position, 96, dtype=dtype)
        assert got.dtype == dtype
        assert got.shape == (96,)
        np.testing.assert_array_equal(got, cpe.positional_encoding(number, 96, dtype=dtype))
        np.testing.assert_array_equal(
            got, cpe.positional_encoding(np.array(position), 96, dtype=dtype)
        )
        out = np.full(96, np.nan, dtype=dtype)
        assert cpe.positional_encoding(position, 96, dtype=dtype, out=out) is out
        np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize(
    "position", [np.uint64(2**53 + 1), np.int64(-(2**53) - 1), np.uint64(2**64 - 1)]
)
def test_numpy_integer_positions_beyond_2_53_are_rejected(position):
    with pytest.raises(ValueError, match=f"position must be an integer .*, got {position}"):
        cpe.positional_encoding(position, 8)


@pytest.mark.parametrize("base", [10000, 2, 3, 10**6, 2**53, 2**53 + 1, 10**20])
@pytest.mark.parametrize("scale", [1, 3, -2, 0, 2**35])
def test_int_base_and_scale_are_the_floats_they_equal(base, scale):
    for position in (0, 5, -77, 4097, 123456, 2.5):
        for dtype in (np.float64, np.float32):
            got = cpe.positional_encoding(position, 40, base=base, scale=scale, dtype=dtype)
            expected = cpe.positional_encoding(
                position, 40, base=float(base), scale=float(scale), dtype=dtype
            )
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["<f8", ">f8", "<i8", ">i4", "<f4"])
def test_misaligned_and_byte_swapped_positions(dtype):
    # Positions one byte past their buffer's start, in either byte order: read as
    # the same numbers.
    values = np.array([0, 1, -5, 4097, 123456], dtype=dtype)
    raw = np.zeros(values.nbytes + 1, np.uint8)
    shifted = raw[1:].view(dtype)
    shifted[...] = values
    assert not shifted.flags.aligned or np.dtype(dtype).itemsize == 1
    expected = cpe.positional_encoding([0, 1, -5, 4097, 123456], 24)
    np.testing.assert_array_equal(cpe.positional_encoding(shifted, 24), expected)
    np.testing.assert_array_equal(cpe.positional_encoding(values, 24), expected)


def test_non_contiguous_positions():
    base = np.arange(40.0).reshape(8, 5)
    view = base[::2, ::-2]
    np.testing.assert_array_equal(
        cpe.positional_encoding(view, 12), cpe.positional_encoding(view.copy(), 12)
    )


def test_empty_positions():
    assert cpe.positional_encoding([], 6).shape == (0, 6)
    assert cpe.positional_encoding(np.zeros((2, 0)), 6).shape == (2, 0, 6)


def test_real_positions_are_not_rounded_to_integers():
    a = cpe.positional_encoding(998.39, 16)
    np.testing.assert_allclose(a, _reference.positional_encoding(998.39, 16), rtol=0, atol=1e-12)
    assert not np.array_equal(a, cpe.positional_encoding(998, 16))


def test_negative_positions_are_odd_in_sine_even_in_cosine():
    pos = cpe.positional_encoding(1234, 10)
    neg = cpe.positional_encoding(-1234, 10)
    np.testing.assert_array_equal(neg[0::2], -pos[0::2])
    np.testing.assert_array_equal(neg[1::2], pos[1::2])


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_out_is_filled_and_returned(dtype):
    out = np.full((3, 10), np.nan, dtype=dtype)
    result = cpe.positional_encoding([1, 2, 3], 10, dtype=dtype, out=out)
    assert result is out
    np.testing.assert_array_equal(out, cpe.positional_encoding([1, 2, 3], 10, dtype=dtype))
    table_out = np.full((4, 10), np.nan, dtype=dtype)
    assert cpe.positional_encoding_table(4, 10, start=1, dtype=dtype, out=table_out) is table_out
    np.testing.assert_array_equal(
        table_out, cpe.positional_encoding_table(4, 10, start=1, dtype=dtype)
    )


def test_out_for_a_scalar_position():
    out = np.empty(6)
    assert cpe.positional_encoding(2, 6, out=out) is out
    np.testing.assert_array_equal(out, cpe.positional_encoding(2, 6))


def test_positions_overlapping_out_are_read_before_writing():
    buf = np.zeros((4, 4))
    buf[:, 0] = [1, 2, 3, 4]
    positions = buf[:, 0]
    expected = cpe.positional_encoding(positions.copy(), 1)
    target = buf[:, :1]
    # target is not C-contiguous here; use a contiguous overlap instead
    flat = np.zeros(4)
    flat[:] = [1, 2, 3, 4]
    result = cpe.positional_encoding(flat, 1, out=flat.reshape(4, 1))
    np.testing.assert_array_equal(result, expected)
    assert target.shape == (4, 1)


def test_results_do_not_alias_the_frequency_cache():
    a = cpe.positional_encoding(3, 8)
    a[:] = 42.0
    np.testing.assert_array_equal(cpe.positional_encoding(0, 8), [0, 1, 0, 1, 0, 1, 0, 1])


def test_many_widths_and_bases_stay_correct_past_the_cache_budget():
    # More distinct (D, base) than the frequency cache holds: evicted entries
    # must be recomputed, not served stale.
    for D in range(4000, 4100, 3):
        row = cpe.positional_encoding(7, D, base=9000.0 + D)
        np.testing.assert_allclose(
            row, _reference.positional_encoding(7, D, base=9000.0 + D), rtol=0, atol=1e-13
        )


@pytest.mark.parametrize("p", [2.0**25, 2.0**33 + 0.5, 1e12, -3e15, 2.0**53])
def test_huge_angles_stay_on_the_unit_circle(p):
    # Beyond |p * w| ~ 2**32 the low part of the angle is no longer tiny; the
    # values must still be sines and cosines of (nearly) the same angle.
    row = cpe.positional_encoding([p], 8, base=10.0)[0]
    assert np.all(np.abs(row) <= 1.0)
    np.testing.assert_allclose(row[0::2] ** 2 + row[1::2] ** 2, 1.0, rtol=0, atol=1e-15)


def test_shifted_interleaved_is_not_confused_with_the_paper_encoding():
    # D=5, freq_shift=-0.5 has the paper's exponent denominator (2.5) but two
    # frequencies and a zero column instead of three frequencies.
    paper = cpe.positional_encoding(3, 5)
    shifted = cpe.positional_encoding(3, 5, freq_shift=-0.5)
    assert shifted[-1] == 0.0
    assert paper[-1] != 0.0
    np.testing.assert_array_equal(cpe.positional_encoding(3, 5), paper)


def test_frequency_cache_stays_within_its_budget():
    from cpe._core import _cache_snapshot

    for D in range(1, 3000, 7):
        cpe.positional_encoding(1, D, base=1000.0 + D)
        cpe.positional_encoding_table(100, D, base=1000.0 + D)
    snap = _cache_snapshot()
    assert 0 < snap["encoding_bytes"] <= snap["encoding_budget"]
    assert 0 < snap["level_bytes"] <= snap["level_budget"]
    assert snap["encodings"]
    assert snap["levels"]


def test_digit_levels_start_on_a_cache_line():
    # Rows read from a table off a cache line would split a line on every 64-byte
    # load (see cpe._core._new_output): every kept level table starts on one.
    from cpe._core import _cache_snapshot

    widths = (6, 130, 512, 1030, 4096)
    for D in widths * 2:  # levels are made by an encoding's second request
        cpe.positional_encoding(np.arange(100), D, base=3000.0 + D)
    levels = _cache_snapshot()["levels"]
    tables = [levels[(D, (D + 1) // 2, 3000.0 + D, D / 2, 1.0)] for D in widths]
    assert [table.ctypes.data % 64 for table in tables] == [0] * len(tables)


def test_an_encoding_used_once_makes_no_digit_levels_and_the_same_bits():
    # A new base costs only the rows its request needs; the table of levels comes
    # with the second request, and the bits do not change with it.
    import threading

    from cpe._core import _cache_snapshot

    # A base of this thread's own: the test also runs in several threads at once.
    base = 2345.25 + (threading.get_ident() % 100003) / 1024
    key = (512, 256, base, 256.0, 1.0)  # (width, n_freq, base, den, scale)
    first = cpe.positional_encoding(4321, 512, base=base)
    assert key not in _cache_snapshot()["levels"]
    second = cpe.positional_encoding(4321, 512, base=base)
    assert key in _cache_snapshot()["levels"]
    third = cpe.positional_encoding(4321, 512, base=base)  # from the kept rows
    assert first.tobytes() == second.tobytes() == third.tobytes()


@pytest.mark.parametrize("order", [1, -1])
def test_equal_arguments_share_one_encoding_whichever_comes_first(order):
    # base=int and base=float, scale=0.0 and scale=-0.0 (== equates them) are one
    # encoding with one cache entry, holding the same frequencies in either order.
    import threading

    from cpe._core import _cache_snapshot

    # This thread's and this order's own, an integer
    base = 4567 + 2 * (threading.get_ident() % 100003) + (order < 0)
    calls = [
        lambda: cpe.positional_encoding(4321, 64, base=base),
        lambda: cpe.positional_encoding(4321, 64, base=float(base)),
        lambda: cpe.positional_encoding(-4321, 64, base=float(base), scale=0.0),
        lambda: cpe.positional_encoding(-4321, 64, base=base, scale=-0.0),
    ][::order]
    values = [call().tobytes() for call in calls * 2]
    assert values[:4] == values[4:]
    assert values[0] == values[1] != values[2] == values[3]  # (calls in pairs of equals)
    found = sorted(
        (e.scale, bool(np.signbit(e.scale)))
        for e in _cache_snapshot()["encodings"]
        if e.base == base and e.width == 64
    )
    assert found == [(0.0, False), (1.0, False)]


def test_every_layout_of_the_same_frequencies_shares_one_encoding_and_its_levels():
    # The layout is a parameter of the fill loop, not of the encoding: the
    # paper's frequencies in any layout, with freq_shift=0 at an even width, as
    # RoPE's and a grid axis's, are one cache entry with one table of levels.
    import threading

    from cpe._core import _cache_snapshot

    base = 3456.25 + (threading.get_ident() % 100003) / 1024  # this thread's own
    calls = [
        lambda: cpe.positional_encoding(4321, 512, base=base),
        lambda: cpe.positional_encoding(4321, 512, base=base, layout="sin_cos"),
        lambda: cpe.positional_encoding(4321, 512, base=base, layout="cos_sin"),
        lambda: cpe.positional_encoding(4321, 512, base=base, freq_shift=0),
        lambda: cpe.rope_cos_sin(4322, 512, base=base),
    ]
    for call in calls * 2:
        call()
    snap = _cache_snapshot()
    found = [
        (e.width, e.n_freq, e.base, e.den, e.scale) for e in snap["encodings"] if e.base == base
    ]
    assert found == [(512, 256, base, 256.0, 1.0)]
    assert (512, 256, base, 256.0, 1.0) in snap["levels"]


DETERMINISM_REQUESTS = [
    "cpe.positional_encoding(12345, 512)",
    "cpe.positional_encoding(np.arange(40), 64)",
    "cpe.positional_encoding(np.arange(3000, 0, -7), 64)",
    "cpe.positional_encoding_table(100, 96, start=5)",
    "cpe.positional_encoding_table(20, 96, start=999_000)",
    "cpe.positional_encoding_table(5000, 32, dtype=np.float32)",
]


def test_the_same_request_gives_the_same_bits_whatever_the_cache_holds():
    """A fresh process (empty caches) and this one (warm caches) agree bit for bit."""
    import hashlib
    import subprocess
    import sys

    script = (
        "import hashlib, sys\nimport numpy as np\nimport cpe\n"
        "for e in sys.argv[1:]:\n"
        "    print(hashlib.sha256(eval(e).tobytes()).hexdigest())\n"
    )
    namespace = {"cpe": cpe, "np": np}
    for expression in DETERMINISM_REQUESTS * 3:  # warm every cache first
        eval(expression, namespace)
    here = [hashlib.sha256(eval(e, namespace).tobytes()).hexdigest() for e in DETERMINISM_REQUESTS]
    fresh = subprocess.run(
        [sys.executable, "-c", script, *DETERMINISM_REQUESTS],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert here == fresh


def test_float16_tables_are_the_float64_ones_rounded_once():
    # NumPy rounds double to half once: an independent reference for the engine's
    # narrowing, in the vector loops and their ends, near float16's largest values
    # and among its subnormals (RoPE's attention factor scales the values).
    def yarn(factor):
        return {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                "attention_factor": factor}  # fmt: skip

    def rope(factor):
        return lambda dt: cpe.rope_cos_sin(
            np.arange(0, 10**6, 331), 66, rope_parameters=yarn(factor), dtype=dt
        )

    tables = [lambda dt: [cpe.positional_encoding_table(3001, 130, start=-1500, dtype=dt)]]
    tables += [rope(factor) for factor in (1.0, 64000.0, 1e-6, 3e-8)]
    for make in tables:
        for got, wide in zip(make(np.float16), make(np.float64), strict=True):
            np.testing.assert_array_equal(
                got.view(np.uint16), wide.astype(np.float16).view(np.uint16)
            )
