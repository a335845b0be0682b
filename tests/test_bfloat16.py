"""bfloat16 outputs (ml_dtypes' NumPy dtype) and positions (torch.bfloat16 tensors: test_interop).

A bfloat16 value is cpe's float64 value rounded once to the nearest bfloat16, ties
to even: checked against an exact rounding in rationals, on crafted values where
rounding through float32 would round twice, and against mpmath (half an ulp plus
the float64 bound). Without ml_dtypes the tests that need it skip, and the
interop CI stage installs it.
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import cpe
from exact import error
from interop import WITHOUT_ML_DTYPES, require

F64_BOUND = 1e-15


@pytest.fixture(scope="module")
def bf16():
    return np.dtype(require("ml_dtypes").bfloat16)


def nearest_bfloat16(x: float) -> float:
    """x rounded to bfloat16 in exact rationals: 8 significant bits, or multiples of
    2**-133 below 2**-126 (subnormals), ties to even; infinity from 2**128 on."""
    if x == 0.0:
        return x
    exponent = math.frexp(x)[1]  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    quantum = Fraction(2) ** max(exponent - 8, -133)
    value = round(Fraction(x) / quantum) * quantum  # round(): ties to even
    if abs(value) >= 2**128:
        return math.copysign(math.inf, x)
    return math.copysign(float(value), x)  # (what rounds to zero keeps its sign)


def assert_rounded_once(got: np.ndarray, exact64: np.ndarray) -> None:
    want = np.array([nearest_bfloat16(x) for x in exact64.ravel().tolist()])
    np.testing.assert_array_equal(got.astype(np.float64).ravel(), want)


def _yarn(factor: float) -> dict:
    return {"rope_type": "yarn", "factor": 1.0, "attention_factor": factor}


def crafted() -> list[float]:
    """Halfway points between bfloat16 neighbours, and doubles beside them by one
    bit that float32 drops (its first, 2**-24 of the binade, a middle one, the
    last), at several scales; and values that overflow bfloat16 or are
    subnormal in it."""
    # (mantissa * (1 + 2**-8), in [1, 2), is halfway to the next bfloat16,
    # mantissa * (1 + 2**-7); an offset of 2**-k sets bit 52 - k of the double)
    return [
        (mantissa * (1 + 2**-8) + offset) * scale
        for scale in (1.0, 2.0**-20, 2.0**40, 3.0)
        for mantissa in (1.0, 1.0 + 2**-7, 1.5, 2.0 - 2**-7)
        for offset in (0.0, 2.0**-24, -(2.0**-24), 2.0**-30, -(2.0**-30), 2.0**-52, -(2.0**-52))
    ] + [
        1e39, 3.4e38, 3.3895e38, 3.3896e38, 3.3895313892515355e38,  # beyond bfloat16's range
        1e-40, 9.18e-41, 5e-324, 2.0**-133, 2.0**-134, 1.5 * 2.0**-134, 2.0**-126 * 0.99,
    ]  # fmt: skip


def test_the_one_rounding_is_to_nearest_even_from_float64(bf16):
    # A RoPE table at position 0 is the attention factor times cos(0) = 1: any
    # double, exactly, so each crafted value goes through the rounding as it is.
    # Rows of 16 values (16 cosines): the vector stores' loops, not their ends.
    for x in crafted():
        if math.isinf(nearest_bfloat16(x)):  # a factor beyond bfloat16: refused by name
            with pytest.raises(ValueError, match="beyond the range of bfloat16"):
                cpe.rope_cos_sin(
                    1, 16, rope_parameters=_yarn(x), max_position_embeddings=8, dtype="bfloat16"
                )
            continue
        cos, _ = cpe.rope_cos_sin(
            1, 16, rope_parameters=_yarn(x), max_position_embeddings=8, dtype="bfloat16"
        )
        assert cos.dtype == bf16
        assert cos.astype(np.float64).tolist() == [[nearest_bfloat16(x)] * 16], x
    # Through float32 it would be 1.0 (1 + 2**-8 is a bfloat16 halfway point).
    x = 1 + 2**-8 + 2**-30
    assert nearest_bfloat16(x) == 1 + 2**-7
    assert nearest_bfloat16(float(np.float32(x))) == 1.0


CALLS = [
    lambda dt: cpe.positional_encoding(1017, 64, dtype=dt),
    lambda dt: cpe.positional_encoding(np.array([[3, -7], [10**6, 0]]), 33, dtype=dt),
    lambda dt: cpe.positional_encoding(np.linspace(-50, 50, 7), 16, dtype=dt, convention="fairseq"),
    lambda dt: cpe.positional_encoding_table(40, 512, start=99_000, dtype=dt, layout="sin_cos"),
    lambda dt: cpe.positional_encoding_table(300, 32, start=-5, dtype=dt, scale=0.25),
    lambda dt: cpe.rope_cos_sin(50, 64, start=8000, dtype=dt),
    lambda dt: cpe.rope_cos_sin(np.arange(6).reshape(2, 3), 16, layout="interleaved", dtype=dt),
    lambda dt: cpe.rope_cos_sin(
        20, 32, rope_parameters={"rope_type": "yarn", "factor": 4.0},
        max_position_embeddings=4096, dtype=dt,
    ),
    lambda dt: cpe.sincos_2d(3, 5, 32, dtype=dt, extra_tokens=1),
    lambda dt: cpe.sincos_3d(2, 3, 2, 64, dtype=dt),
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(CALLS)))
def test_every_function_rounds_its_float64_values_once(bf16, index):
    got, exact = CALLS[index]("bfloat16"), CALLS[index](np.float64)
    for got_part, exact_part in zip(*((got, exact) if type(got) is tuple else ((got,), (exact,))),
                                    strict=True):  # fmt: skip
        assert got_part.dtype == bf16
        assert_rounded_once(got_part, exact_part)


def test_bfloat16_within_half_an_ulp_of_mpmath(bf16, report_error):
    rng = np.random.default_rng(16)
    D = 64
    positions = np.array([0, 1, -1, 10**6, -(10**6), 355, *rng.integers(-(10**6), 10**6, 40)])
    rows = cpe.positional_encoding(positions, D, dtype="bfloat16").astype(np.float64)
    table = cpe.positional_encoding_table(50, D, start=10**6 - 50, dtype=bf16).astype(np.float64)
    checks = [(p, row) for p, row in zip(positions.tolist(), rows, strict=True)]
    checks += [(10**6 - 50 + i, table[i]) for i in range(0, 50, 7)]
    for p, row in checks:
        for k in sorted({0, 1, 2, 31, 62, 63, *rng.integers(0, D, 6).tolist()}):
            ulp = 2.0 ** (math.frexp(abs(row[k]))[1] - 8) if row[k] else 2.0**-133
            report_error("bfloat16: error beyond half an ulp", error(row[k], p, D, k) - ulp / 2,
                         F64_BOUND)  # fmt: skip


def test_every_way_of_naming_bfloat16_is_the_one_dtype(bf16):
    ml_dtypes = require("ml_dtypes")
    names = ["bfloat16", ml_dtypes.bfloat16, bf16, np.dtype("bfloat16")]
    tables = [cpe.positional_encoding_table(3, 8, start=5, dtype=name) for name in names]
    for table in tables:
        assert table.dtype == bf16
        np.testing.assert_array_equal(table.view(np.uint16), tables[0].view(np.uint16))


def test_bfloat16_positions_are_their_float32_values(bf16):
    values = np.array([0.0, 1.5, -3.25, 1024.0, 65280.0, 0.1])
    as_bf16 = values.astype(bf16)
    want = cpe.positional_encoding(as_bf16.astype(np.float32), 16)
    np.testing.assert_array_equal(cpe.positional_encoding(as_bf16, 16), want)
    np.testing.assert_array_equal(cpe.positional_encoding(as_bf16[3], 16), want[3])


def test_a_rejected_bfloat16_out_is_left_untouched(bf16):
    out = np.full((3, 8), 7.0, dtype=bf16)
    with pytest.raises(ValueError, match="finite"):
        cpe.positional_encoding(np.array([1.0, np.nan, 2.0]), 8, dtype="bfloat16", out=out)
    with pytest.raises(TypeError, match=r"out must have dtype float32 .*got bfloat16"):
        cpe.positional_encoding(np.arange(3), 8, dtype=np.float32, out=out)
    assert (out.astype(np.float64) == 7.0).all()
    assert cpe.positional_encoding(np.arange(3), 8, dtype=bf16, out=out) is out
    assert_rounded_once(out, cpe.positional_encoding(np.arange(3), 8))


def test_without_ml_dtypes_bfloat16_says_what_to_install():
    script = (
        WITHOUT_ML_DTYPES
        + """import cpe
try:
    cpe.positional_encoding(3, 8, dtype="bfloat16")
except ImportError as exc:
    print(exc)
print(cpe.positional_encoding(0, 4, dtype="float16"))
"""
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)  # fmt: skip
    first, second = run.stdout.splitlines()
    assert first == (
        "dtype='bfloat16' needs the ml_dtypes package, which gives NumPy its bfloat16 dtype: "
        "pip install ml_dtypes"
    )
    assert second == "[0. 1. 0. 1.]"
