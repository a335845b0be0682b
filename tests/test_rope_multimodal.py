"""Multimodal RoPE (mrope_section), axial RoPE (axes_dim) and vit-pytorch's 2-D grid
(freq_shift=1): against mpmath, bit-identical to the 1-D calls, and their errors.

The real transformers (Qwen2-VL, Qwen3-VL) and diffusers (Flux) modules are
compared in test_interop.py.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import cpe
import exact

YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}


def _axis_of(j: int, sections: list[int], interleaved: bool) -> int:
    """The axis of frequency ``j``, from the description of transformers' recomposition."""
    if not interleaved:  # three runs: T, then H, then W
        return 0 if j < sections[0] else 1 if j < sections[0] + sections[1] else 2
    if j % 3 == 1 and j < 3 * sections[1]:
        return 1
    if j % 3 == 2 and j < 3 * sections[2]:
        return 2
    return 0


MROPE = [
    ([8, 12, 12], False),  # Qwen2-VL's proportions, head_dim 64
    ([12, 10, 10], True),  # Qwen3-VL's
    ([32, 0, 0], False),  # every frequency on the temporal axis
]


def _ids(shape, low=0, high=10**6, seed=0):
    return np.random.default_rng(seed).integers(low, high, (3, *shape))


@pytest.mark.parametrize(("sections", "interleaved"), MROPE)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scheme", [{}, YARN], ids=["default", "yarn"])
def test_multimodal_is_exact_at_a_million(sections, interleaved, layout, scheme):
    params = {**scheme, "mrope_section": sections, "mrope_interleaved": interleaved}
    ids = _ids((2, 3), 10**6 - 1000, 10**6)
    cos, sin = cpe.rope_cos_sin(ids, 64, rope_parameters=params, layout=layout)
    assert cos.shape == sin.shape == (2, 3, 64)
    w, attention, _ = exact.rope_scheme(64, scheme, seq_len=float(ids.max()) + 1)
    columns = list(range(32)) * 2 if layout == "half" else [j for j in range(32) for _ in "cs"]
    bound = 1e-15 * attention + 2.3e-16 * attention
    for b, s in [(0, 0), (1, 2)]:
        for k, j in enumerate(columns):
            p = int(ids[_axis_of(j, sections, interleaved), b, s])
            assert abs(cos[b, s, k] - attention * mpmath.cos(p * w[j])) <= bound
            assert abs(sin[b, s, k] - attention * mpmath.sin(p * w[j])) <= bound


@pytest.mark.parametrize(("sections", "interleaved"), MROPE)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("scheme", [{}, YARN], ids=["default", "yarn"])
def test_multimodal_columns_are_the_1d_columns(sections, interleaved, layout, dtype, scheme):
    params = {**scheme, "mrope_section": sections, "mrope_interleaved": interleaved}
    ids = _ids((4, 5), 0, 70000, seed=3)
    kwargs = {"layout": layout, "dtype": dtype, "seq_len": 70000}
    cos, sin = cpe.rope_cos_sin(ids, 64, rope_parameters=params, **kwargs)
    assert cos.dtype == sin.dtype == dtype
    plain = [cpe.rope_cos_sin(ids[axis], 64, rope_parameters=scheme, **kwargs) for axis in range(3)]
    for k in range(64):
        j = k % 32 if layout == "half" else k // 2
        axis = _axis_of(j, sections, interleaved)
        np.testing.assert_array_equal(cos[..., k], plain[axis][0][..., k])
        np.testing.assert_array_equal(sin[..., k], plain[axis][1][..., k])
    # out= is filled with the same values, and returned.
    out = (np.full(cos.shape, 7, dtype), np.full(sin.shape, 7, dtype))
    got = cpe.rope_cos_sin(ids, 64, rope_parameters=params, out=out, **kwargs)
    assert got[0] is out[0]
    assert got[1] is out[1]
    np.testing.assert_array_equal(out[0], cos)
    np.testing.assert_array_equal(out[1], sin)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_wide_interleaved_sections_are_the_plain_table(layout):
    # Each section is one request of its own frequencies, whatever its columns:
    # split into runs of equally spaced columns, a run of 15 frequencies got
    # digit levels of another shape than its section of 96, and 30 columns of
    # the table differed from the plain table's by an ulp.
    params = {"mrope_section": [96, 80, 80], "mrope_interleaved": True}
    text = np.broadcast_to(np.arange(0, 70000, 7), (3, 1, 10000))
    cos, sin = cpe.rope_cos_sin(text, 512, rope_parameters=params, layout=layout)
    plain = cpe.rope_cos_sin(np.arange(0, 70000, 7), 512, layout=layout)
    np.testing.assert_array_equal(cos[0], plain[0])
    np.testing.assert_array_equal(sin[0], plain[1])


def test_multimodal_text_positions_are_the_plain_table():
    params = {"mrope_section": [8, 12, 12]}
    text = np.broadcast_to(np.arange(100, 140), (3, 1, 40))
    cos, sin = cpe.rope_cos_sin(text, 64, rope_parameters=params)
    plain = cpe.rope_cos_sin(40, 64, start=100)
    np.testing.assert_array_equal(cos[0], plain[0])
    np.testing.assert_array_equal(sin[0], plain[1])
    # A count: the same position on every axis.
    table = cpe.rope_cos_sin(40, 64, start=100, rope_parameters=params)
    np.testing.assert_array_equal(table[1], plain[1])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_axial_blocks_are_the_1d_tables(layout, dtype):
    axes_dim = (4, 14, 14)
    ids = np.random.default_rng(5).integers(0, 5000, (2, 9, 3))
    cos, sin = cpe.rope_cos_sin(ids, 32, axes_dim=axes_dim, layout=layout, dtype=dtype, base=500)
    assert cos.shape == sin.shape == (2, 9, 32)
    first = 0
    for axis, width in enumerate(axes_dim):
        want = cpe.rope_cos_sin(ids[..., axis], width, layout=layout, dtype=dtype, base=500)
        np.testing.assert_array_equal(cos[..., first : first + width], want[0])
        np.testing.assert_array_equal(sin[..., first : first + width], want[1])
        first += width


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_axes_whose_positions_repeat_are_the_1d_tables(layout, dtype):
    # A row walks only the axes whose position changed since the row before (a
    # row depends on its position alone): runs of one position, -0.0 after 0.0,
    # fractions and negatives, in one part and in two (of 10 MiB).
    column = np.array([0.0, -0.0, 0.0, 5, 5, 5, -5, -5, 2.5, 2.5, 0, 7, 7, 1e5, 1e5, -0.0])
    ids = np.stack([np.repeat(column, 3), np.tile(column, 3), np.arange(48) % 4 - 2.0], -1)
    ids = np.tile(ids, (3500, 1))
    axes_dim = (8, 16, 8)
    want = [cpe.rope_cos_sin(ids[:, axis].copy(), width, layout=layout, dtype=dtype)
            for axis, width in enumerate(axes_dim)]  # fmt: skip
    for workers in (1, 2):
        cos, sin = cpe.rope_cos_sin(ids, 32, axes_dim=axes_dim, layout=layout, dtype=dtype,
                                    workers=workers)  # fmt: skip
        np.testing.assert_array_equal(cos, np.concatenate([c for c, _ in want], axis=-1))
        np.testing.assert_array_equal(sin, np.concatenate([s for _, s in want], axis=-1))


def test_axial_is_exact_at_a_million():
    ids = np.array([[999_999, 3, 777_777], [0, 1, 2]])
    cos, sin = cpe.rope_cos_sin(ids, 20, axes_dim=[4, 8, 8], layout="interleaved", base=1e4)
    k = 0
    for axis, width in enumerate([4, 8, 8]):
        for m in range(width):
            w = exact.frequency(m // 2, width)
            for row in range(2):
                p = int(ids[row, axis])
                assert abs(cos[row, k] - mpmath.cos(p * w)) <= 1e-15
                assert abs(sin[row, k] - mpmath.sin(p * w)) <= 1e-15
            k += 1


@pytest.mark.parametrize(
    ("n", "kwargs", "exc", "text"),
    [
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [8, 12, 11]}},
            ValueError,
            "rope_parameters['mrope_section'] must sum to the tables' 32 frequencies",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [16, 16]}},
            TypeError,
            "mrope_section'] must be a sequence of three integers",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": "abc"}},
            TypeError,
            "mrope_section'] must be a sequence of three integers",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [8.5, 12, 11.5]}},
            TypeError,
            "mrope_section'][0]",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [-8, 20, 20]}},
            ValueError,
            "mrope_section'][0]",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [4, 14, 14], "mrope_interleaved": True}},
            ValueError,
            "cannot be interleaved over 32 frequencies",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [12, 10, 10], "mrope_interleaved": 1}},
            TypeError,
            "rope_parameters['mrope_interleaved'] must be a bool",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_interleaved": True}},
            ValueError,
            "'mrope_interleaved'] needs rope_parameters['mrope_section']",
        ),
        (
            np.zeros((2, 5), int),
            {"rope_parameters": {"mrope_section": [8, 12, 12]}},
            ValueError,
            "must have a leading axis of 3 (temporal, height, width)",
        ),
        (
            3.0,
            {"rope_parameters": {"mrope_section": [8, 12, 12]}},
            ValueError,
            "must have a leading axis of 3",
        ),
        (
            _ids((2,)),
            {"rope_parameters": {"mrope_section": [8, 12, 12], "partial_rotary_factor": 0.5}},
            ValueError,
            (
                "must sum to the tables' 16 frequencies (rotary_dim / 2; head_dim / 2 for "
                "'proportional'), got [8, 12, 12] (sum 32)"
            ),
        ),
        # Every position is checked as the one-axis table checks it, on every axis.
        (
            np.array([[1.0, 2.0], [np.nan, 0.0], [3.0, 4.0]]),
            {"rope_parameters": {"mrope_section": [32, 0, 0]}},
            ValueError,
            "n (the positions) must be finite",
        ),
        (
            np.array([[1], [2**62], [3]]),
            {"rope_parameters": {"mrope_section": [32, 0, 0]}},
            ValueError,
            "n (the positions) must be integers of magnitude <= 2**53",
        ),
        (
            np.array([[1.0], [1.0], [2.0**60]]),
            {"rope_parameters": {"mrope_section": [8, 12, 12]}},
            ValueError,
            "position * frequency must be at most 2**53",
        ),
        (
            _ids((2,)),
            {
                "rope_parameters": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.5,
                    "mrope_section": [4, 6, 6],
                }
            },
            ValueError,
            "must sum to the tables' 32 frequencies (rotary_dim / 2; head_dim / 2 for",
        ),
        (np.zeros((5, 3)), {"axes_dim": (16, 8, 4)}, ValueError, "head_dim must be the sum"),
        (np.zeros((5, 3)), {"axes_dim": (30, 1, 1)}, ValueError, "axes_dim[1] must be >= 2"),
        (np.zeros((5, 3)), {"axes_dim": (30, 3, -1)}, ValueError, "axes_dim[2] must be >= 2"),
        (np.zeros((5, 3)), {"axes_dim": (20, 5, 7)}, ValueError, "axes_dim must hold even"),
        (np.zeros((5, 3)), {"axes_dim": ()}, ValueError, "axes_dim must give at least one"),
        (np.zeros((5, 3)), {"axes_dim": 32}, TypeError, "axes_dim must be a sequence"),
        (np.zeros((5, 3)), {"axes_dim": [[16, 16]]}, TypeError, "axes_dim must be a sequence"),
        (np.zeros((5, 3)), {"axes_dim": [[16], [8, 8]]}, TypeError, "axes_dim must be a sequence"),
        (np.zeros((5, 3)), {"axes_dim": "16"}, TypeError, "axes_dim must be a sequence"),
        (np.zeros((5, 3)), {"axes_dim": (16.0, 8, 8)}, TypeError, "axes_dim[0]"),
        (np.zeros((5, 2)), {"axes_dim": (16, 8, 8)}, ValueError, "last axis of len(axes_dim)"),
        (5, {"axes_dim": (16, 8, 8)}, TypeError, "n must be an array of positions of shape"),
        (
            np.zeros((5, 3)),
            {"axes_dim": (16, 8, 8), "rope_parameters": {}},
            TypeError,
            "cannot be combined with rope_parameters",
        ),
        (np.zeros((5, 3)), {"axes_dim": (16, 8, 8), "start": 2}, ValueError, "start must be 0"),
        (
            np.full((5, 3), np.nan),
            {"axes_dim": (16, 8, 8)},
            ValueError,
            "n (the positions)",
        ),
        (
            np.zeros((5, 3), bool),
            {"axes_dim": (16, 8, 8)},
            TypeError,
            "n (the positions) must be a real number",
        ),
        (np.zeros((5, 3)), {"axes_dim": (16, 8, 8), "base": -1.0}, ValueError, "base"),
    ],
)
def test_errors_name_the_argument_and_leave_out_untouched(n, kwargs, exc, text):
    head_dim = 32 if "axes_dim" in kwargs else 64
    with pytest.raises(exc) as info:
        cpe.rope_cos_sin(n, head_dim, **kwargs)
    assert text in str(info.value)
    shape = np.shape(n)[:-1] if "axes_dim" in kwargs else np.shape(n)[1:]
    out = (np.full((*shape, head_dim), 7.0), np.full((*shape, head_dim), 7.0))
    with pytest.raises(exc):
        cpe.rope_cos_sin(n, head_dim, out=out, **kwargs)
    assert np.all(out[0] == 7.0)
    assert np.all(out[1] == 7.0)


def test_a_too_large_output_is_named_by_its_own_shape():
    ids = np.broadcast_to(np.zeros(1, int), (3, 2**58))
    with pytest.raises(ValueError, match=r"\(2, 288230376151711744, 64\) is too large"):
        cpe.rope_cos_sin(ids, 64, rope_parameters={"mrope_section": [8, 12, 12]})
    axial = np.broadcast_to(np.zeros(1), (2**58, 3))
    with pytest.raises(ValueError, match=r"\(2, 288230376151711744, 32\) is too large"):
        cpe.rope_cos_sin(axial, 32, axes_dim=(16, 8, 8))


def test_empty_ids_of_any_width_are_made_at_once():
    # Nothing is made per frequency for an empty request (as without mrope_section).
    cos, sin = cpe.rope_cos_sin(
        np.zeros((3, 0), int), 2 * 10**8, rope_parameters={"mrope_section": [10**8, 0, 0]}
    )
    assert cos.shape == sin.shape == (0, 2 * 10**8)


def test_wrong_out_is_refused_before_anything_is_computed():
    ids = _ids((4,))
    params = {"mrope_section": [8, 12, 12]}
    out = (np.full((4, 64), 7.0), np.full((4, 63), 7.0))
    with pytest.raises(ValueError, match="out"):
        cpe.rope_cos_sin(ids, 64, rope_parameters=params, out=out)
    assert np.all(out[0] == 7.0)
    out = (np.full((4, 32), 7.0), np.full((4, 32), 7.0, np.float32))
    with pytest.raises((TypeError, ValueError), match="out"):
        cpe.rope_cos_sin(np.zeros((4, 3)), 32, axes_dim=(16, 8, 8), out=out)
    assert np.all(out[0] == 7.0)


# ---- vit-pytorch's 2-D grid: sincos_2d(freq_shift=1) ----


@pytest.mark.parametrize("layout", ["mae", "timm", "timm_interleaved"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_grid_halves_are_the_1d_encodings_with_the_shift(layout, dtype):
    grid = cpe.sincos_2d(5, 7, 32, freq_shift=1, layout=layout, dtype=dtype)
    h = cpe.positional_encoding(np.arange(5), 16, layout="sin_cos", freq_shift=1, dtype=dtype)
    w = cpe.positional_encoding(np.arange(7), 16, layout="sin_cos", freq_shift=1, dtype=dtype)
    tokens = grid.reshape(5, 7, 32)
    if layout == "mae":
        np.testing.assert_array_equal(tokens[:, :, :16], np.broadcast_to(w, (5, 7, 16)))
        np.testing.assert_array_equal(tokens[:, :, 16:], np.broadcast_to(h[:, None], (5, 7, 16)))
    elif layout == "timm_interleaved":
        np.testing.assert_array_equal(tokens[:, :, :16], np.broadcast_to(h[:, None], (5, 7, 16)))
    else:  # [sin(h) | sin(w) | cos(h) | cos(w)]
        np.testing.assert_array_equal(tokens[:, :, 8:16], np.broadcast_to(w[:, :8], (5, 7, 8)))
    # The default is the shift 0, and differs.
    assert not np.array_equal(grid, cpe.sincos_2d(5, 7, 32, layout=layout, dtype=dtype))
    for default in (0, None):
        np.testing.assert_array_equal(
            cpe.sincos_2d(5, 7, 32, layout=layout, freq_shift=default),
            cpe.sincos_2d(5, 7, 32, layout=layout),
        )


def test_grid_shift_frequencies_are_exact():
    grid = cpe.sincos_2d(1, 3000, 24, freq_shift=1, base=100.0)  # q = 6: w_j = 100 ** (-j / 5)
    for c in (1, 2999):
        for j in range(6):
            w = mpmath.mpf(100) ** (-mpmath.mpf(j) / 5)
            assert abs(grid[c, j] - mpmath.sin(c * w)) <= 1e-15
            assert abs(grid[c, 6 + j] - mpmath.cos(c * w)) <= 1e-15
    # D = 4: one frequency, 1, as in the 1-D functions.
    np.testing.assert_array_equal(
        cpe.sincos_2d(2, 2, 4, freq_shift=1), cpe.sincos_2d(2, 2, 4, freq_shift=0)
    )


@pytest.mark.parametrize(
    ("freq_shift", "exc", "text"),
    [
        (2, ValueError, "freq_shift=2.0 needs D // 4 - freq_shift > 0 for a 2-D encoding, got D=8"),
        (5.0, ValueError, "D // 4 - freq_shift > 0"),
        (np.nan, ValueError, "freq_shift"),
        ("1", TypeError, "freq_shift"),
    ],
)
def test_grid_shift_errors(freq_shift, exc, text):
    out = np.full((9, 8), 7.0)
    with pytest.raises(exc) as info:
        cpe.sincos_2d(3, 3, 8, freq_shift=freq_shift, out=out)
    assert text in str(info.value)
    assert np.all(out == 7.0)


def test_a_leading_axis_of_one_is_the_same_positions_on_every_axis():
    # transformers' text ids of one sequence, (1, seq): unambiguous, as (3, seq)
    # stays three axes. The same position on every axis is the plain table.
    params = {"rope_parameters": {"mrope_section": [4, 6, 6]}}
    ids = np.arange(100, 120)[None]
    three = cpe.rope_cos_sin(np.broadcast_to(ids, (3, 20)), 32, **params)
    plain = cpe.rope_cos_sin(20, 32, start=100)
    for got, want, table in zip(cpe.rope_cos_sin(ids, 32, **params), three, plain, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, table)
    x = np.random.default_rng(3).standard_normal((2, 4, 20, 32))
    np.testing.assert_array_equal(
        cpe.apply_rope(x, ids, **params), cpe.apply_rope(x, start=100, **params)
    )


def test_the_layouts_of_one_multi_axis_encoding_are_kept_apart():
    # The axes of a multi-axis table are kept for every call of the same encoding:
    # one layout's, made first, must not serve the other. Within each block of
    # columns that rotates as one (the whole row; each axis of axes_dim), the
    # interleaved columns 2m and 2m + 1 hold "half"'s columns m and m + width / 2.
    # The bases are new to this process, so the first call makes its axes. (Axial
    # RoPE's axes differ by layout, and fail this when shared; sections in runs
    # have the same axes in both, and are checked alongside.)
    base = 1000.0 + np.random.default_rng().random()
    mrope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": base}
    ids = np.array([[[0, 1, 2, 9]], [[0, 4, 4, 9]], [[0, 5, 6, 9]]])
    requests = {
        (16,): lambda layout: cpe.rope_cos_sin(ids, 16, rope_parameters=mrope, layout=layout),
        (4, 6, 6): lambda layout: cpe.rope_cos_sin(
            ids[:, 0].T, 16, axes_dim=(4, 6, 6), base=base + 1, layout=layout
        ),
    }
    for blocks, request in requests.items():
        offsets = np.cumsum([0, *blocks[:-1]])
        columns = [o + m + r * (w // 2) for o, w in zip(offsets, blocks, strict=True)
                   for m in range(w // 2) for r in (0, 1)]  # fmt: skip
        for first, second in (("half", "interleaved"), ("interleaved", "half")):
            made = request(first)
            kept = request(second)
            half, interleaved = (made, kept) if first == "half" else (kept, made)
            for h, i in zip(half, interleaved, strict=True):
                np.testing.assert_array_equal(i, h[..., columns])
