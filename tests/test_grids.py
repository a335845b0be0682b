"""2-D and 3-D grid encodings against the formulas of MAE, diffusers and timm."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import cpe
import reference as ref
from buffers import fresh, on_line


def close(got, expected, max_angle):
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15 * max(1.0, max_angle) * 8)


@pytest.mark.parametrize("size", [1, 2, 7, 14])
@pytest.mark.parametrize("D", [4, 16, 768])
@pytest.mark.parametrize("cls_token", [False, True])
def test_mae(size, D, cls_token):
    got = cpe.sincos_2d(size, size, D, extra_tokens=int(cls_token))
    close(got, ref.mae_2d(D, size, cls_token), size)


@pytest.mark.parametrize(("h", "w"), [(3, 5), (5, 3), (1, 9), (16, 24)])
@pytest.mark.parametrize("extra", [0, 1, 4])
@pytest.mark.parametrize(("interp", "base_size"), [(1.0, 16), (2.0, 16), (0.5, 32)])
def test_diffusers_2d_non_square(h, w, extra, interp, base_size):
    got = cpe.sincos_2d(
        h, w, 64, extra_tokens=extra, base_size=base_size, interpolation_scale=interp
    )
    expected = ref.diffusers_2d(
        64,
        (h, w),
        cls_token=extra > 0,
        extra_tokens=extra,
        interpolation_scale=interp,
        base_size=base_size,
    )
    close(got, expected, 2 * base_size / interp)


@pytest.mark.parametrize(("h", "w"), [(3, 5), (8, 8), (2, 11)])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("temperature", [10000.0, 100.0])
def test_timm_layouts(h, w, interleave, temperature):
    layout = "timm_interleaved" if interleave else "timm"
    got = cpe.sincos_2d(h, w, 32, layout=layout, base=temperature)
    close(got, ref.timm_2d((h, w), 32, temperature, interleave), max(h, w))


@pytest.mark.parametrize(("t", "h", "w"), [(1, 1, 1), (4, 3, 5), (13, 6, 4)])
@pytest.mark.parametrize("D", [16, 64, 1152])
@pytest.mark.parametrize(("ts", "ss"), [(1.0, 1.0), (2.0, 0.5)])
def test_diffusers_3d(t, h, w, D, ts, ss):
    got = cpe.sincos_3d(t, h, w, D, temporal_interpolation_scale=ts, spatial_interpolation_scale=ss)
    expected = ref.diffusers_3d(
        D, (w, h), t, spatial_interpolation_scale=ss, temporal_interpolation_scale=ts
    )
    assert got.shape == expected.shape == (t, h * w, D)
    close(got, expected, 2 * max(t, h, w))


def test_grid_values_against_mpmath(report_error):
    mpmath.mp.dps = 50
    D, h, w = 64, 300, 400
    pe = cpe.sincos_2d(h, w, D, dtype=np.float32)
    rng = np.random.default_rng(3)
    q = D // 4
    for token in rng.integers(0, h * w, 40).tolist():
        row, col = divmod(token, w)
        for k in rng.integers(0, D, 8).tolist():
            block, j = divmod(k, q)
            coordinate = col if block < 2 else row
            angle = mpmath.mpf(coordinate) * mpmath.power(10000, -mpmath.mpf(j) / q)
            exact = mpmath.sin(angle) if block % 2 == 0 else mpmath.cos(angle)
            report_error(
                "float32 grid (2-D)", float(abs(mpmath.mpf(float(pe[token, k])) - exact)), 3.0e-8
            )


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_grid_out_and_dtypes(dtype):
    expected = cpe.sincos_2d(4, 6, 16, extra_tokens=2).astype(dtype)
    out = np.full((26, 16), 7, dtype=dtype)
    assert cpe.sincos_2d(4, 6, 16, extra_tokens=2, dtype=dtype, out=out) is out
    np.testing.assert_array_equal(out, expected)
    out3 = np.full((2, 24, 16), 7, dtype=dtype)
    assert cpe.sincos_3d(2, 4, 6, 16, dtype=dtype, out=out3) is out3
    np.testing.assert_array_equal(out3, cpe.sincos_3d(2, 4, 6, 16).astype(dtype))


def test_empty_grids():
    assert cpe.sincos_2d(0, 5, 8).shape == (0, 8)
    assert cpe.sincos_2d(0, 0, 8, extra_tokens=1).tolist() == [[0.0] * 8]
    assert cpe.sincos_3d(0, 2, 2, 16).shape == (0, 4, 16)


@pytest.mark.parametrize(
    ("call", "exc", "text"),
    [
        (lambda o: cpe.sincos_2d(2, 2, 6, out=o), ValueError, "D must be a multiple of 4"),
        (
            lambda o: cpe.sincos_2d(2, 2, 8, layout="vit", out=o),
            ValueError,
            "layout must be one of",
        ),
        (lambda o: cpe.sincos_2d(-1, 2, 8, out=o), ValueError, "grid_h must be >= 0"),
        (lambda o: cpe.sincos_2d(2, 2.0, 8, out=o), TypeError, "grid_w must be an integer"),
        (lambda o: cpe.sincos_2d(2, 2, 8, extra_tokens=-1, out=o), ValueError, "extra_tokens"),
        (lambda o: cpe.sincos_2d(2, 2, 8, base_size=0, out=o), ValueError, "base_size must be > 0"),
        (
            lambda o: cpe.sincos_2d(2, 2, 8, interpolation_scale=np.nan, out=o),
            ValueError,
            "interpolation_scale",
        ),
        (lambda o: cpe.sincos_2d(2, 2, 8, base=-1, out=o), ValueError, "base must be > 0"),
        (lambda o: cpe.sincos_2d(2, 2, 8, dtype=int, out=o), TypeError, "dtype"),
        (lambda o: cpe.sincos_2d(2, 3, 8, out=o), ValueError, "out must have shape"),
        (lambda o: cpe.sincos_3d(1, 2, 2, 8, out=o), ValueError, "D must be a multiple of 16"),
        (
            lambda o: cpe.sincos_3d(1, 2, 2, 16, spatial_interpolation_scale=0, out=o),
            ValueError,
            "spatial_interpolation_scale",
        ),
        (lambda o: cpe.sincos_3d(True, 2, 2, 16, out=o), TypeError, "t must be an integer"),
    ],
)
def test_grid_errors_leave_out_untouched(call, exc, text):
    out = np.full((4, 8), 7.0)
    with pytest.raises(exc, match=text):
        call(out)
    np.testing.assert_array_equal(out, 7.0)


# Grids of 16 MiB and more are copied with streaming stores into mapped memory
# when every token row starts on a 16-byte boundary; 8 bytes past one, or into
# memory nothing has written yet ("fresh"), they take the plain copies.
@pytest.mark.parametrize("offset", [0, 8, "fresh"])
@pytest.mark.parametrize("layout", ["mae", "timm", "timm_interleaved"])
def test_big_grids(layout, offset):
    shape = (64 * 64, 1024)
    out = fresh(shape, np.float64) if offset == "fresh" else on_line(shape, np.float64, offset)
    assert cpe.sincos_2d(64, 64, 1024, layout=layout, out=out) is out
    if layout == "mae":
        expected = ref.mae_2d(1024, 64)
    else:
        expected = ref.timm_2d((64, 64), 1024, 10000.0, layout == "timm_interleaved")
    close(out, expected, 64)


@pytest.mark.parametrize("offset", [0, 8])
def test_big_grids_float32_and_3d(offset):
    out = on_line((64 * 64, 1024), np.float32, offset)  # 16 MiB
    cpe.sincos_2d(64, 64, 1024, dtype=np.float32, out=out)
    np.testing.assert_allclose(out, ref.mae_2d(1024, 64), rtol=0, atol=6e-8)
    out3 = on_line((4, 32 * 32, 1024), np.float64, offset)  # 32 MiB
    cpe.sincos_3d(4, 32, 32, 1024, out=out3)
    close(out3, ref.diffusers_3d(1024, (32, 32), 4), 64)


@pytest.mark.parametrize(
    ("rows", "segments"),
    [
        (5, [(0, 0, 0, 8)]),  # out has 6 rows, not 2 * 3
        (6, [(2, 0, 0, 8)]),  # no third source
        (6, [(0, -8, 0, 8)]),
        (6, [(0, 8, 0, 16)]),  # past the end of a source row
        (6, [(1, 0, 24, 16)]),  # past the end of an output row
        (6, [(0, 2**62, 0, 2**62)]),  # whose sum overflows
        (6, [(0, 0, 0, 8)] * 9),
    ],
)
def test_tile_rows_rejects_segments_outside_the_rows(rows, segments):
    # The grids' token copies check their segments (cpe._engine._tile_rows is
    # reachable from Python): an error, and nothing written.
    from cpe._engine import _tile_rows

    out = np.full((rows, 32), 7, np.uint8)
    with pytest.raises(ValueError, match=r"rows|segments"):
        _tile_rows(out, np.zeros((2, 16), np.uint8), np.zeros((3, 16), np.uint8), segments)
    np.testing.assert_array_equal(out, 7)
