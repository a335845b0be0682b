"""Bugs found by the property tests, the thread tests and the fuzzer, kept fixed.

Each test is the minimal reproducer of one bug, asserting the behaviour that
replaced it.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
import warnings

import numpy as np
import pytest

import cpe
import reference as ref
from buffers import on_line


def test_subnormal_base_gives_finite_accurate_frequencies():
    # ln(base) overflowed in double-double below ~5.6e-309: [0, 1, nan, nan].
    np.testing.assert_array_equal(cpe.positional_encoding(0, 4, base=5e-309), [0.0, 1.0, 0.0, 1.0])
    # The largest frequency is ~1.2e308: position 1 is refused (angles beyond
    # 2**53), and so is a table that reaches it.
    with pytest.raises(ValueError, match=r"2\*\*53"):
        cpe.positional_encoding(1, 3000, base=5e-309)
    with pytest.raises(ValueError, match=r"2\*\*53"):
        cpe.positional_encoding_table(2, 3000, base=5e-309)
    # Position 0 is exact whatever the frequencies.
    np.testing.assert_array_equal(
        cpe.positional_encoding(0, 3000, base=5e-309), np.tile([0.0, 1.0], 1500)
    )


def test_frequencies_beyond_the_double_range_are_a_clear_error():
    with pytest.raises(ValueError, match="beyond the range of a double"):
        cpe.positional_encoding(1, 4, base=5e-309, freq_shift=1.5)


def test_the_oracle_has_one_frequency_at_widths_2_and_3_whatever_the_shift():
    # The fuzzer's harness judged a refusal on w_0 = base ** (-0 / 0) = nan.
    for D in (2, 3):
        np.testing.assert_array_equal(ref.frequencies(D, 10000.0, freq_shift=1.0), [1.0])
        np.testing.assert_array_equal(
            cpe.positional_encoding(1.0, D, freq_shift=1.0, layout="sin_cos")[:2],
            [np.sin(1.0), np.cos(1.0)],
        )


def test_a_negative_position_has_the_sign_of_its_zero_sines_in_every_call_form():
    # Found in review: a sine below the float32 range (3e-50 here) rounded to +0
    # when one position was negated after rounding, to -0 in an array or a table.
    one = cpe.positional_encoding(-3, 4, base=1e100, dtype=np.float32)
    ids = cpe.positional_encoding([-3, 5], 4, base=1e100, dtype=np.float32)
    table = cpe.positional_encoding_table(9, 4, start=-3, base=1e100, dtype=np.float32)
    assert one.tobytes() == ids[0].tobytes() == table[0].tobytes()
    assert np.signbit(one[2])


def test_an_empty_output_costs_no_frequencies():
    tracemalloc.start()
    try:
        result = cpe.positional_encoding_table(0, 2**24)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.shape == (0, 2**24)
    assert peak < 1 << 20, f"an empty (0, 2**24) table allocated {peak / 2**20:.0f} MiB"
    assert cpe.positional_encoding([], 2**40).shape == (0, 2**40)


@pytest.mark.parametrize("spec", ["f8,,", ("f8", -1)])  # np.dtype: SyntaxError, ValueError
def test_every_unreadable_dtype_is_a_type_error_naming_dtype(spec):
    with pytest.raises(TypeError, match="dtype"):
        cpe.positional_encoding(1, 2, dtype=spec)


def test_matrix_out_is_filled():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        out = np.matrix(np.full((2, 4), 7.0))
    assert cpe.positional_encoding_table(2, 4, out=out) is out
    np.testing.assert_array_equal(np.asarray(out), cpe.positional_encoding_table(2, 4))


def test_long_double_positions_beyond_float64_raise_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="position"):
            cpe.positional_encoding(np.array([np.longdouble("1e400")]), 4)


def test_float32_signalling_nan_positions_raise_without_a_warning():
    # Converting a float32 signalling NaN to float64 raises the "invalid" flag.
    snan = np.frombuffer(b"\x01\x00\x80\x7f", np.float32)
    assert np.isnan(snan[0])
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        for call in (
            lambda: cpe.positional_encoding(snan, 4),
            lambda: cpe.positional_encoding([snan[0], np.float32(1.0)], 4),
            lambda: cpe.rope_cos_sin(snan, 4),
        ):
            with pytest.raises(ValueError, match=r"(position|n \(the positions\)) must be finite"):
                call()


def test_positions_at_numpys_dimension_limit_are_named():
    for ndim in (64, 32):
        try:
            position = np.zeros((1,) * ndim)
        except ValueError:
            continue
        with pytest.raises(ValueError, match="position"):
            cpe.positional_encoding(position, 2)
        return
    pytest.fail("NumPy allows neither 64 nor 32 dimensions")


def test_rope_position_ids_of_one_dimension_below_numpys_limit():
    # The two tables came from one array of one more dimension, which NumPy
    # refused for ids of 63 dimensions (31 under NumPy 1).
    for ndim in (64, 32):
        try:
            np.zeros((1,) * ndim)
        except ValueError:
            continue
        ids = np.arange(3).reshape((1,) * (ndim - 2) + (3,))
        cos, sin = cpe.rope_cos_sin(ids, 4)
        assert cos.shape == sin.shape == (*ids.shape, 4)
        table_cos, table_sin = cpe.rope_cos_sin(3, 4)
        np.testing.assert_array_equal(cos.reshape(3, 4), table_cos)
        np.testing.assert_array_equal(sin.reshape(3, 4), table_sin)
        return
    pytest.fail("NumPy allows neither 64 nor 32 dimensions")


def test_positions_are_not_scanned_or_copied_before_the_output_is_checked():
    positions = np.broadcast_to(np.int64(0), (2048, 2048))  # 8 bytes of memory, 4M positions
    out = np.full((4, 4), 7.0)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="out must have shape"):
            cpe.positional_encoding(positions, 4, out=out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, 7.0)
    assert peak < 4 << 20, f"a rejected call allocated {peak / 2**20:.0f} MiB first"
    # Too large to make at all: rejected at once, without scanning 2**62 positions.
    with pytest.raises(ValueError, match="too large"):
        cpe.positional_encoding(np.broadcast_to(np.int8(0), (2**31, 2**31)), 4)


# ---- found by the property tests once they covered the whole API ----


@pytest.mark.parametrize(
    "call",
    [
        lambda: cpe.sincos_2d(2, 2, 8, layout=np.array(["mae", "timm"])),
        lambda: cpe.rope_cos_sin(2, 4, layout=np.array(["half", "x"])),
    ],
)
def test_a_layout_array_is_rejected_by_name(call):
    with pytest.raises(ValueError, match="layout must be one of"):
        call()


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"freq_shift": 3.99999}, "freq_shift"),
        ({"scale": 5e-324}, "scale"),
        ({"base": 0.1, "scale": 1e308}, "scale"),
    ],
)
def test_frequencies_out_of_range_name_what_set_them(kwargs, names):
    with pytest.raises(ValueError, match=names):
        cpe.positional_encoding(1, 8, **kwargs)


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (
            lambda: cpe.sincos_2d(3, 3, 8, base_size=1e300, interpolation_scale=1e-200),
            "base_size and interpolation_scale",
        ),
        (
            lambda: cpe.sincos_3d(3, 3, 3, 16, temporal_interpolation_scale=1e-308),
            "temporal_interpolation_scale",
        ),
        # Once named sincos_2d's "interpolation_scale", after writing the time part.
        (
            lambda: cpe.sincos_3d(2, 1, 4, 16, spatial_interpolation_scale=1e-308),
            "h, w and spatial_interpolation_scale",
        ),
    ],
)
def test_grid_coordinates_out_of_range_name_the_scales_without_warning(call, names):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=names):
            call()


@pytest.mark.parametrize(
    "scales",
    [
        {"spatial_interpolation_scale": 1e-308},
        {"temporal_interpolation_scale": 1e-308},
    ],
)
def test_sincos_3d_checks_both_axes_before_writing_out(scales):
    out = np.full((4, 6, 16), 7.0)
    with pytest.raises(ValueError, match="interpolation_scale"):
        cpe.sincos_3d(4, 2, 3, 16, out=out, **scales)
    np.testing.assert_array_equal(out, 7.0)


def test_an_empty_grid_does_not_encode_its_other_side():
    assert cpe.sincos_2d(2**54, 0, 8).shape == (0, 8)
    assert cpe.sincos_2d(0, 2**40, 8, extra_tokens=2).tolist() == [[0.0] * 8] * 2
    assert cpe.sincos_3d(0, 2**20, 2**20, 16).shape == (0, 2**40, 16)


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: cpe.positional_encoding([], 2**62), "position and D"),
        (lambda: cpe.rope_cos_sin(0, 2**62), "n and head_dim"),
        (lambda: cpe.rope_cos_sin(np.zeros(0), 2**62), r"n \(the positions\) and head_dim"),
        (lambda: cpe.sincos_3d(0, 2**40, 2**40, 16), "t, h, w and D"),
    ],
)
def test_an_empty_output_with_a_huge_extent_is_refused_by_name(call, names):
    with pytest.raises(ValueError, match=names):
        call()


def test_sincos_2d_fills_a_matrix_out():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        out = np.full((2, 4), 7.0).view(np.matrix)
    assert cpe.sincos_2d(2, 1, 4, out=out) is out
    np.testing.assert_array_equal(np.asarray(out), cpe.sincos_2d(2, 1, 4))


@pytest.mark.parametrize("n", ["4", None, [1, None], np.array([np.nan])])
def test_rope_position_id_errors_name_n(n):
    with pytest.raises((TypeError, ValueError), match=r"^n \(the positions\)"):
        cpe.rope_cos_sin(n, 4)


# ---- found by a review of the SIMD kernels ----


def test_digit_rows_beyond_the_range_of_the_request_are_not_an_error():
    # 64 rows at scale 1e14: every position times frequency is within 2**53, but
    # the digit-level row of 61440 is not; it is never read, and must not be refused.
    assert np.isfinite(cpe.positional_encoding_table(64, 4, scale=1e14)).all()
    assert np.isfinite(cpe.positional_encoding(np.arange(64), 4, scale=1e14)).all()


def test_an_overflowing_single_position_is_refused_on_the_first_call_too():
    # The first single position of an encoding takes its own path: it must check
    # the range as the kernel does, or the first call returns what later ones refuse.
    for _ in range(2):
        with pytest.raises(ValueError, match=r"2\*\*53"):
            cpe.positional_encoding(17, 2, scale=2.0**53 / 16)


RACING_POSITIONS = """
import gc, sys
import numpy as np
import cpe
positions = np.arange(70.0)  # integers below 65536: the digit-level path
cpe.positional_encoding_table(2, 8, base=4321.0)  # the encoding is cached, its levels not
calls = [0]
class Finalizer:  # stands for another thread writing the positions during the call
    def __init__(self):
        self.cycle = self
    def __del__(self):
        calls[0] += 1
        if calls[0] == int(sys.argv[1]):
            positions[:] = 6 * 65536.0 + 257.0  # digits beyond the levels
        else:
            Finalizer()
Finalizer()
gc.set_threshold(1)
cpe.positional_encoding(positions, 8, base=4321.0)
"""


def test_positions_changed_during_a_call_never_crash():
    # The digit rows to make were read from the positions a second time, after an
    # allocation that can run other code: positions changed in between wrote past
    # the level table (segfault). They are now read once, in one pass.
    for when in range(1, 11):
        result = subprocess.run(
            [sys.executable, "-c", RACING_POSITIONS, str(when)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, (when, result.stderr[-2000:])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64_bit_integer_positions_up_to_2_53_are_exact(dtype):
    # Integers are checked only when some converted double reaches 2**53: those
    # at 2**53 pass, those past it do not, whatever their neighbours.
    edge = np.array([2**53, 3], dtype)
    np.testing.assert_array_equal(
        cpe.positional_encoding(edge, 6)[0], cpe.positional_encoding(2**53, 6)
    )
    with pytest.raises(ValueError, match="2\\*\\*53"):
        cpe.positional_encoding(np.array([3, 2**53 + 1], dtype), 6)
    if dtype is np.int64:
        negative = cpe.positional_encoding(np.array([-(2**53)]), 6)[0]
        np.testing.assert_array_equal(negative, cpe.positional_encoding(-(2**53), 6))


ORIGIN_ROWS = [
    # (call, index of the row of position 0, the definition at position 0)
    (
        lambda: cpe.positional_encoding_table(10, 8, start=-5, dtype=np.float32),
        5,
        lambda: ref.positional_encoding(0, 8),
    ),
    (
        lambda: cpe.positional_encoding_table(3000, 9, start=-1500, convention="fairseq"),
        1500,
        lambda: ref.positional_encoding(0, 9, convention="fairseq"),
    ),
    (  # streamed (32 MiB, mapped); a start that is not a multiple of radix**2
        lambda: cpe.positional_encoding_table(
            2**19,
            16,
            start=-(2**18 + 12345),
            dtype=np.float32,
            out=on_line((2**19, 16), np.float32, 0),
        ),
        2**18 + 12345,
        lambda: ref.positional_encoding(0, 16),
    ),
    (  # ids beyond the cached levels: digits of the kernel's own, from -70000
        lambda: cpe.positional_encoding(np.arange(-70000, 70000), 8, layout="cos_sin"),
        70000,
        lambda: ref.positional_encoding(0, 8, layout="cos_sin"),
    ),
    (
        lambda: np.stack(cpe.rope_cos_sin(10, 8, start=-5)),
        (slice(None), 5),
        lambda: np.stack([np.ones(8), np.zeros(8)]),
    ),
    (
        lambda: np.stack(cpe.rope_cos_sin(3000, 8, start=-1500, layout="interleaved")),
        (slice(None), 1500),
        lambda: np.stack([np.ones(8), np.zeros(8)]),
    ),
]


@pytest.mark.parametrize(("call", "index", "single"), ORIGIN_ROWS)
def test_position_0_is_exact_in_tables_and_arrays_that_cross_it(call, index, single):
    # Rows p = start + d built by angle addition from a negative start gave
    # sin(0) as ~1e-16 (within the bound, but not the exact 0 a single position gives).
    np.testing.assert_array_equal(call()[index], single())


def test_sequences_of_numpy_scalars_and_0d_arrays_are_positions():
    # The scan for bools and big integers in lists lets every real number through.
    mixed = [np.float32(1.5), np.int64(3), np.array(2.0), np.array(7), 4, 5.5, 6]
    expected = cpe.positional_encoding(np.array([1.5, 3, 2, 7, 4, 5.5, 6]), 8)
    np.testing.assert_array_equal(cpe.positional_encoding(mixed, 8), expected)


def test_importing_and_using_cpe_never_imports_torch():
    # torch's dtypes are read by name, so that cpe stays as light as NumPy.
    import subprocess
    import sys

    code = (
        "import sys, cpe; cpe.positional_encoding(3, 8, dtype='float32'); "
        "cpe.rope_cos_sin(4, 8); cpe.sincos_2d(2, 2, 8); assert 'torch' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---- sizes and arguments refused by name, on every path ----


@pytest.mark.parametrize(
    "rope_parameters", [None, {"rope_type": "linear", "factor": 2.0}], ids=["default", "linear"]
)
def test_frequencies_too_many_to_allocate_are_refused_by_name(rope_parameters):
    # Refused where the frequencies are made, by the argument's name, with or
    # without a scaling scheme (NumPy's own refusal names no argument).
    with pytest.raises(ValueError, match=r"^head_dim: its 2305843009213693952 frequencies"):
        cpe.rope_frequencies(2**62, rope_parameters=rope_parameters)


@pytest.mark.parametrize("n", [4, np.int64(4), np.array(4)], ids=["int", "int64", "0-d"])
@pytest.mark.parametrize(
    "rope_parameters",
    [None, {"rope_type": "default", "mrope_section": [1, 1, 2]}],
    ids=["plain", "mrope"],
)
def test_a_count_of_rows_with_start_none_is_refused(n, rope_parameters):
    # A count is a table of rows from start: start=None is not "no start".
    with pytest.raises(TypeError, match=r"^start must be an integer, got NoneType"):
        cpe.rope_cos_sin(n, 8, start=None, rope_parameters=rope_parameters)


def test_a_frequency_ratio_near_the_largest_double_is_finite():
    # ratio = base ** (-1 / den) between e**709 and log(DBL_MAX) = 709.78 is a
    # finite double, and so are the frequencies it makes here.
    import math

    import mpmath

    freq_shift = 2 - math.log(2) / 709.5  # ratio = 0.5 ** (-1 / den), about e**709.5
    row = cpe.positional_encoding(1e-5, 4, base=0.5, freq_shift=freq_shift, scale=1e-300)
    with mpmath.workdps(50):
        den = mpmath.mpf(4 // 2 - freq_shift)  # (the den cpe is given: 2 - freq_shift)
        angle = mpmath.mpf(1e-5) * mpmath.mpf(1e-300) * mpmath.mpf(0.5) ** (-1 / den)
        assert abs(row[0] - mpmath.mpf(1e-5) * mpmath.mpf(1e-300)) < 1e-320
        assert row[1] == 1.0
        assert abs(row[2] - mpmath.sin(angle)) < 1e-15
        assert abs(row[3] - mpmath.cos(angle)) < 1e-15


def test_a_position_whose_angles_overflow_is_refused_without_a_warning():
    # Naming what takes the angles beyond 2**53 multiplies the frequencies by the
    # position, which overflows for 1.7e308: inf is beyond too, silently.
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"^base=0.5 gives frequencies up to"):
            cpe.rope_cos_sin(np.float64(1.7e308), 32, base=0.5, rope_parameters=llama3)
