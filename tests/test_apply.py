"""apply_rope: values, the one rounding, invariance, in place, errors.

The reference rotation is written here from the definition (x * cos +
rotate_half(x) * sin, or the interleaved pairs), in float64 with cpe's float64
tables, whose own accuracy test_rope and test_rope_scaling check against mpmath;
test_apply_accuracy_against_mpmath checks the rotation itself against mpmath.
"""

from __future__ import annotations

import math
import warnings

import hypothesis
import hypothesis.strategies as st
import mpmath
import numpy as np
import pytest

import apply_contract
import cpe
from exact import frequency
from interop import require
from test_properties import HypothesisChooser

RNG = np.random.default_rng(20261205)

LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str = "half") -> np.ndarray:
    """The rotation of the rows of x (float64) by tables of rotary_dim <= x.shape[-1]
    columns, as a model applies them; columns past the tables pass through."""
    d = cos.shape[-1]
    rotary, rest = x[..., :d], x[..., d:]
    turned = np.empty_like(rotary)
    if layout == "half":
        turned[..., : d // 2] = -rotary[..., d // 2 :]
        turned[..., d // 2 :] = rotary[..., : d // 2]
    else:
        turned[..., 0::2] = -rotary[..., 1::2]
        turned[..., 1::2] = rotary[..., 0::2]
    return np.concatenate(
        [rotary * cos + turned * sin, np.broadcast_to(rest, rotary.shape[:-1] + rest.shape[-1:])],
        axis=-1,
    )


def values(shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ---- values: the definition with cpe's tables, bit for bit in float64 ----


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "keywords",
    [
        {},
        {"base": 500000.0},
        {"rope_parameters": LLAMA3},
        {"rope_parameters": YARN},  # an attention factor
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}},
        {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 64},
        {"inv_freq": 1.0 / 7.0 ** np.arange(16)},
    ],
    ids=["default", "base", "llama3", "yarn", "partial", "dynamic", "inv_freq"],
)
def test_rotation_is_the_definition_with_the_float64_tables(layout, keywords):
    x = values((2, 3, 40, 32))
    start = 70000
    cos, sin = cpe.rope_cos_sin(40, 32, start=start, layout=layout, **keywords)
    got = cpe.apply_rope(x, start=start, layout=layout, **keywords)
    np.testing.assert_array_equal(got, rotate(x, cos, sin, layout))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_positions_broadcast_against_the_rows(layout):
    x = values((2, 4, 9, 16))
    ids = RNG.integers(0, 10**6, size=(2, 1, 9))  # transformers' position_ids[:, None]
    cos, sin = cpe.rope_cos_sin(ids, 16, layout=layout)
    np.testing.assert_array_equal(
        cpe.apply_rope(x, ids, layout=layout), rotate(x, cos, sin, layout)
    )
    reals = RNG.uniform(-1e5, 1e5, size=9)  # real positions, one per token
    cos, sin = cpe.rope_cos_sin(reals, 16, layout=layout)
    np.testing.assert_array_equal(
        cpe.apply_rope(x, reals, layout=layout), rotate(x, cos, sin, layout)
    )
    one = cpe.apply_rope(x, np.float64(12345.5), layout=layout)  # one position for every row
    cos, sin = cpe.rope_cos_sin(np.array([12345.5]), 16, layout=layout)
    np.testing.assert_array_equal(one, rotate(x, cos, sin, layout))


def test_both_attention_layouts_without_a_copy():
    q = values((2, 8, 33, 64))  # (batch, heads, seq, head_dim)
    q_bshd = np.ascontiguousarray(q.transpose(0, 2, 1, 3))  # (batch, seq, heads, head_dim)
    want = cpe.apply_rope(q, start=5)
    got = cpe.apply_rope(q_bshd, start=5, seq_axis=1, out=q_bshd)
    assert got is q_bshd
    np.testing.assert_array_equal(q_bshd.transpose(0, 2, 1, 3), want)
    # 1-D positions along seq_axis, and the same positions broadcast by NumPy's rules
    ids = np.arange(5, 38)
    np.testing.assert_array_equal(cpe.apply_rope(q, ids), want)
    bshd = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(cpe.apply_rope(bshd, ids, seq_axis=1).transpose(0, 2, 1, 3), want)
    np.testing.assert_array_equal(cpe.apply_rope(bshd, ids[:, None]).transpose(0, 2, 1, 3), want)


def test_views_of_a_fused_projection_are_rotated_in_place():
    qkv = values((1, 7, 3, 4, 32))  # (batch, seq, q/k/v, heads, head_dim)
    before = qkv.copy()
    q, k = qkv[:, :, 0], qkv[:, :, 1]  # strided views, rows contiguous
    got = cpe.apply_rope((q, k), start=11, seq_axis=1, out=(q, k))
    assert got[0] is q
    assert got[1] is k
    want = cpe.apply_rope((before[:, :, 0], before[:, :, 1]), start=11, seq_axis=1)
    np.testing.assert_array_equal(qkv[:, :, 0], want[0])
    np.testing.assert_array_equal(qkv[:, :, 1], want[1])
    np.testing.assert_array_equal(qkv[:, :, 2], before[:, :, 2])  # v untouched


def test_rows_that_are_not_contiguous_are_read():
    x = values((3, 5, 32))[..., ::2]  # rows of stride 2: read through a copy
    want = cpe.apply_rope(np.ascontiguousarray(x))
    np.testing.assert_array_equal(cpe.apply_rope(x), want)


@pytest.mark.parametrize("interleaved", [False, True])
def test_multimodal_sections_rotate_with_their_axes(interleaved):
    section = [6, 5, 5] if interleaved else [2, 7, 7]
    params = {"rope_type": "default", "mrope_section": section, "mrope_interleaved": interleaved}
    thw = RNG.integers(0, 200, size=(3, 2, 1, 11))  # (3, batch, 1, seq) against (batch, heads, seq)
    x = values((2, 3, 11, 32))
    cos, sin = cpe.rope_cos_sin(thw, 32, rope_parameters=params)
    np.testing.assert_array_equal(
        cpe.apply_rope(x, thw, rope_parameters=params), rotate(x, cos, sin)
    )
    # an integer sequence: the same position on every axis, the one-axis table
    cos, sin = cpe.rope_cos_sin(11, 32, start=4)
    np.testing.assert_array_equal(
        cpe.apply_rope(x, start=4, rope_parameters=params), rotate(x, cos, sin)
    )


def test_axial_positions_rotate_the_pairs_of_their_axes():
    ids = RNG.integers(0, 64, size=(21, 3))  # Flux: (tokens, axes)
    x = values((1, 21, 2, 32))  # (batch, tokens, heads, head_dim)
    cos, sin = cpe.rope_cos_sin(ids, 32, axes_dim=(8, 12, 12), layout="interleaved")
    got = cpe.apply_rope(x, ids[:, None, :], axes_dim=(8, 12, 12), layout="interleaved")
    np.testing.assert_array_equal(got, rotate(x, cos[:, None], sin[:, None], "interleaved"))
    # Points of two axes, (batch, tokens): each row rotated by its own point's angles.
    ids = RNG.integers(0, 64, size=(2, 21, 3))
    x = values((2, 21, 2, 32))
    cos, sin = cpe.rope_cos_sin(ids, 32, axes_dim=(8, 12, 12), layout="interleaved")
    got = cpe.apply_rope(x, ids[:, :, None, :], axes_dim=(8, 12, 12), layout="interleaved")
    np.testing.assert_array_equal(got, rotate(x, cos[:, :, None], sin[:, :, None], "interleaved"))


# ---- the one rounding ----


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_dtypes_are_the_float64_rotation_rounded_once(dtype):
    x = values((2, 3, 17, 64), dtype)
    for keywords in ({"start": 131072}, {"start": 10**6 - 17, "rope_parameters": LLAMA3}):
        wide = cpe.apply_rope(x.astype(np.float64), **keywords)
        got = cpe.apply_rope(x, **keywords)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, wide.astype(dtype))  # NumPy rounds double once


def test_bfloat16_is_the_float64_rotation_rounded_once():
    bf16 = require("ml_dtypes").bfloat16
    from test_bfloat16 import assert_rounded_once

    x = values((2, 9, 32)).astype(bf16)
    got = cpe.apply_rope(x, start=99991, rope_parameters=YARN)
    assert got.dtype == bf16
    assert_rounded_once(
        got, cpe.apply_rope(x.astype(np.float64), start=99991, rope_parameters=YARN)
    )


def test_accuracy_against_mpmath(report_error):
    """Each value within its stated bound of the exact rotation of the given inputs:
    float64 within 1.25e-15 (|x1| + |x2|); float32 within half an ulp plus 2**-50
    (|x1| + |x2|)."""
    head_dim = 64
    positions = np.array([0, 1, 7, 4095, 131071, 131072, 500009, 10**6 - 1, 10**6])
    x64 = values((len(positions), head_dim))
    x32 = values((len(positions), head_dim), np.float32)
    for layout in ("half", "interleaved"):
        got64 = cpe.apply_rope(x64, positions, layout=layout)
        got32 = cpe.apply_rope(x32, positions, layout=layout)
        for row, p in enumerate(positions.tolist()):
            for j in range(0, head_dim // 2, 3):
                a, b = (j, j + head_dim // 2) if layout == "half" else (2 * j, 2 * j + 1)
                angle = mpmath.mpf(p) * frequency(j, head_dim)
                c, s = mpmath.cos(angle), mpmath.sin(angle)
                for x, got, name in ((x64, got64, "float64"), (x32, got32, "float32")):
                    x1, x2 = mpmath.mpf(float(x[row, a])), mpmath.mpf(float(x[row, b]))
                    magnitude = abs(float(x[row, a])) + abs(float(x[row, b]))
                    for column, exact in ((a, x1 * c - x2 * s), (b, x2 * c + x1 * s)):
                        err = float(abs(mpmath.mpf(float(got[row, column])) - exact))
                        if name == "float64":
                            bound = 1.25e-15 * magnitude
                        else:
                            half_ulp = float(np.spacing(np.float32(abs(float(exact))))) / 2
                            bound = half_ulp + 2.0**-50 * magnitude
                        report_error(f"apply_rope {name} (relative to its bound)", err / bound, 1.0)


# ---- one value per element ----


def test_an_element_depends_on_its_own_pair_and_position_only():
    x = values((4, 6, 50, 32), np.float32)
    positions = RNG.integers(0, 2**20, size=(4, 1, 50))
    whole = cpe.apply_rope(x, positions, rope_parameters=LLAMA3)
    for b in range(4):  # one batch at a time, then one head, then one token
        np.testing.assert_array_equal(
            cpe.apply_rope(x[b], positions[b], rope_parameters=LLAMA3), whole[b]
        )
    np.testing.assert_array_equal(
        cpe.apply_rope(x[1, 2], positions[1, 0], rope_parameters=LLAMA3), whole[1, 2]
    )
    token = cpe.apply_rope(x[3, :, 17:18], positions[3, :, 17:18], rope_parameters=LLAMA3)
    np.testing.assert_array_equal(token, whole[3, :, 17:18])
    # a table's positions from start, or the same positions given
    seq = cpe.apply_rope(x, start=123456)
    np.testing.assert_array_equal(seq, cpe.apply_rope(x, np.arange(123456, 123506)))


def test_workers_and_tuples_change_no_bit():
    q = values((1, 8, 2048, 64), np.float32)
    k = values((1, 2, 2048, 64), np.float32)
    alone = (cpe.apply_rope(q, start=3), cpe.apply_rope(k, start=3))
    for workers in (1, 2, 3):
        pair = cpe.apply_rope((q, k), start=3, workers=workers)
        np.testing.assert_array_equal(pair[0], alone[0])
        np.testing.assert_array_equal(pair[1], alone[1])


def test_inverse_is_the_rotation_by_the_negated_angle():
    x = values((3, 12, 32))
    positions = RNG.integers(-(10**6), 10**6, size=12)
    np.testing.assert_array_equal(
        cpe.apply_rope(x, positions, inverse=True), cpe.apply_rope(x, -positions)
    )
    there_and_back = cpe.apply_rope(cpe.apply_rope(x, positions), positions, inverse=True)
    np.testing.assert_allclose(there_and_back, x, rtol=0, atol=1e-14)


# ---- torch tensors, in place ----


# ---- against the packages users run ----


def test_llama_cpp_style_interleaved_rotation():
    # ggml's NORMAL mode: theta_j = p * base**(-2j/d) rotates (x[2j], x[2j+1]),
    # written here in plain float64 NumPy from that formula
    x = values((6, 32))
    p = np.arange(100, 106, dtype=np.float64)[:, None]
    theta = p * 10000.0 ** (-np.arange(16) * 2.0 / 32)
    x0, x1 = x[:, 0::2], x[:, 1::2]
    want = np.empty_like(x)
    want[:, 0::2] = x0 * np.cos(theta) - x1 * np.sin(theta)
    want[:, 1::2] = x0 * np.sin(theta) + x1 * np.cos(theta)
    got = cpe.apply_rope(x, start=100, layout="interleaved")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# ---- bad input: a clear error, x and out untouched ----


def _refused(call, error, match, *arrays):
    before = [np.array(a, copy=True) for a in arrays]
    with pytest.raises(error, match=match):
        call()
    for array, saved in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(array, saved)


def test_bad_arguments_are_refused_by_name_with_nothing_written():
    x = values((2, 3, 5, 8))
    k = values((2, 1, 5, 8))
    out = np.zeros_like(x)
    cases = [
        (lambda: cpe.apply_rope(values((2, 7))), ValueError, "even length"),
        (
            lambda: cpe.apply_rope((x, values((2, 1, 5, 6)))),
            ValueError,
            r"x\[1\] must have rows of 8",
        ),
        (lambda: cpe.apply_rope(x, np.arange(4)), ValueError, "do not broadcast.*seq_axis"),
        (  # the usual mistake: (batch, seq) ids against (batch, heads, seq)
            lambda: cpe.apply_rope(x, np.zeros((2, 5))),
            ValueError,
            r"do not broadcast .*ids\[:, None\]",
        ),
        (
            lambda: cpe.apply_rope(x, np.arange(4), seq_axis=1),
            ValueError,
            r"4 positions along seq_axis=1, but that axis of x.shape\[:-1\] = \(2, 3, 5\) has 3",
        ),
        (lambda: cpe.apply_rope(x, seq_axis=-1), ValueError, "seq_axis must be an axis"),
        (lambda: cpe.apply_rope(x, seq_axis=3), ValueError, "seq_axis must be an axis"),
        (lambda: cpe.apply_rope(x, np.zeros((2, 5)), seq_axis=2), TypeError, "seq_axis places 1-D"),
        (lambda: cpe.apply_rope((x, values((2, 1, 4, 8)))), ValueError, "along seq_axis"),
        (
            lambda: cpe.apply_rope(x, out=out.astype(np.float32)),
            TypeError,
            "out must have the dtype",
        ),
        (lambda: cpe.apply_rope(x, out=out[:1]), ValueError, "out must have the shape"),
        (lambda: cpe.apply_rope(x, out=x[::-1]), ValueError, "shares memory with x"),
        (lambda: cpe.apply_rope(x, out=(out,)), TypeError, "out must be an array"),
        (
            lambda: cpe.apply_rope((x, k), out=(out, out[:, :1])),
            ValueError,
            "shares memory with out",
        ),
        (lambda: cpe.apply_rope((x, k), out=out), TypeError, "tuple of 2 arrays"),
        (lambda: cpe.apply_rope(x, np.full(5, np.nan)), ValueError, "positions must be finite"),
        (
            lambda: cpe.apply_rope(x, np.full(5, 1e300)),
            ValueError,
            "positions: position \\* frequency",
        ),
        (lambda: cpe.apply_rope(x, start=2**60), ValueError, "start"),
        (lambda: cpe.apply_rope(x, np.arange(5), start=3), ValueError, "start must be 0"),
        (lambda: cpe.apply_rope(x, inverse=1), TypeError, "inverse must be a bool"),
        (lambda: cpe.apply_rope(x, layout="neox"), ValueError, "layout"),
        (
            lambda: cpe.apply_rope(x, np.zeros((5, 3)), axes_dim=(2, 2, 4)),
            ValueError,
            'layout="interleaved"',
        ),
        (
            lambda: cpe.apply_rope(x, np.arange(5), rope_parameters={"mrope_section": [1, 1, 2]}),
            ValueError,
            "leading axis of 3",
        ),
        (lambda: cpe.apply_rope(x.astype(np.int64)), TypeError, "x must have dtype"),
        (lambda: cpe.apply_rope(np.float64(1.0)), ValueError, "at least one dimension"),
        (
            lambda: cpe.apply_rope(x, out=np.zeros((2, 3, 5, 16))[..., ::2]),
            ValueError,
            "last axis contiguous",
        ),
        (lambda: cpe.apply_rope(x, out=np.broadcast_to(out, out.shape)), ValueError, "writeable"),
    ]
    for call, error, match in cases:
        _refused(call, error, match, x, k, out)
    readonly = x.copy()
    readonly.flags.writeable = False
    _refused(
        lambda: cpe.apply_rope(readonly, out=readonly),
        ValueError,
        r"out \(x itself\) must be writeable",
        readonly,
    )
    aliased = np.lib.stride_tricks.as_strided(out, shape=(4, 8), strides=(8, 8), writeable=True)
    _refused(lambda: cpe.apply_rope(values((4, 8)), out=aliased), ValueError, "share memory", out)


# ---- a Rope parsed once: the functions are its methods ----

LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 16,
    "long_factor": [2.0] * 16,
    "original_max_position_embeddings": 64,
}
ROPES = [
    {},
    {"base": 500000.0, "layout": "interleaved"},
    {"rope_parameters": LLAMA3},
    {"rope_parameters": YARN},
    {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 64},
    {"rope_parameters": LONGROPE, "max_position_embeddings": 256},
    {"inv_freq": 1.0 / 3.0 ** np.arange(16)},
]


@pytest.mark.parametrize("keywords", ROPES, ids=range(len(ROPES)))
def test_a_rope_reused_across_calls_gives_what_a_fresh_parse_gives(keywords):
    # The functions parse the keywords at each call; one Rope serves every call
    # here, so what it keeps (its scheme, its axes; dynamic schemes made again
    # for each length) must not depend on the calls before.
    rope = cpe.Rope(32, **keywords)
    x = values((2, 2, 100, 32), np.float32)
    for n, start in ((100, 0), (100, 3000), (30, 7)):  # (lengths that dynamic schemes adapt to)
        for got, want in zip(
            rope.cos_sin(n, start=start, dtype=np.float32),
            cpe.rope_cos_sin(n, 32, start=start, dtype=np.float32, **keywords),
            strict=True,
        ):
            np.testing.assert_array_equal(got, want)
        part = x[:, :, :n]
        np.testing.assert_array_equal(
            rope.apply(part, start=start), cpe.apply_rope(part, start=start, **keywords)
        )


def test_a_multi_axis_rope_gives_what_the_functions_give():
    # A Rope keeps its axes after the first table with rows; the calls before
    # and after must not change what it gives.
    mrope = {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}}
    mrope_pairs = {**mrope, "layout": "interleaved"}
    axial = {"axes_dim": (4, 6, 6), "layout": "interleaved"}
    x = values((1, 9, 16))
    for keywords, shape in ((mrope, (3, 1, 9)), (mrope_pairs, (3, 1, 9)), (axial, (9, 3))):
        rope = cpe.Rope(16, **keywords)
        empty = np.zeros((3, 1, 0) if len(shape) == 3 else (0, 3), np.int64)
        for positions in (empty, RNG.integers(0, 50, size=shape), RNG.integers(-9, 9, size=shape)):
            for got, want in zip(
                rope.cos_sin(positions), cpe.rope_cos_sin(positions, 16, **keywords), strict=True
            ):
                np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(
            rope.apply(x, positions), cpe.apply_rope(x, positions, **keywords)
        )


def test_a_rope_reads_its_config_once():
    params = dict(LLAMA3)
    rope = cpe.Rope(32, rope_parameters=params)
    want = cpe.rope_cos_sin(8, 32, start=90000, rope_parameters=LLAMA3)
    params["factor"] = 2.0  # the caller's mapping changed after it was read
    for got, expected in zip(rope.cos_sin(8, start=90000), want, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_rope_refuses_rows_of_another_width():
    rope = cpe.Rope(16)
    x = values((3, 8))
    _refused(lambda: rope.apply(x), ValueError, "head_dim = 16", x)
    with pytest.raises(ValueError, match="head_dim must be even"):
        cpe.Rope(15)
    with pytest.raises(TypeError, match="rope_parameters must be a mapping"):
        cpe.Rope(16, rope_parameters=[("rope_type", "linear")])


# ---- the sinusoidal encoding added ----


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize(
    "keywords",
    [{}, {"convention": "fairseq"}, {"layout": "sin_cos", "base": 500.0, "scale": 0.5}],
    ids=["paper", "fairseq", "sin_cos"],
)
def test_added_encoding_is_the_float64_sum_rounded_once(dtype, keywords):
    x = values((3, 40, 33), dtype)  # (batch, seq, D), D odd
    for x_scale in (1.0, math.sqrt(33)):
        got = cpe.add_positional_encoding(x, start=500, x_scale=x_scale, **keywords)
        table = cpe.positional_encoding_table(40, 33, start=500, **keywords)
        want = (x.astype(np.float64) * x_scale + table).astype(dtype)
        np.testing.assert_array_equal(got, want)
    positions = RNG.uniform(0, 1e6, size=(3, 40))  # real positions, one per token
    want = (x.astype(np.float64) + cpe.positional_encoding(positions, 33, **keywords)).astype(dtype)
    np.testing.assert_array_equal(cpe.add_positional_encoding(x, positions, **keywords), want)


def test_added_encoding_in_place_and_by_parts():
    x = values((4, 300, 64), np.float32)
    want = cpe.add_positional_encoding(x, start=7)
    got = cpe.add_positional_encoding(x, start=7, out=x, workers=2)
    assert got is x
    np.testing.assert_array_equal(x, want)
    seq_first = values((300, 4, 64))  # (seq, batch, D): fairseq's layout
    np.testing.assert_array_equal(
        cpe.add_positional_encoding(seq_first, seq_axis=0),
        seq_first + cpe.positional_encoding_table(300, 64)[:, None],
    )


def test_added_encoding_refuses_bad_arguments_with_nothing_written():
    x = values((2, 5, 8))
    out = np.zeros_like(x)
    cases = [
        (lambda: cpe.add_positional_encoding(x, x_scale=math.nan), ValueError, "x_scale"),
        (lambda: cpe.add_positional_encoding(x, base=-1.0), ValueError, "base"),
        (lambda: cpe.add_positional_encoding(x, convention="bert"), ValueError, "convention"),
        (lambda: cpe.add_positional_encoding(x, np.arange(4)), ValueError, "do not broadcast"),
        (lambda: cpe.add_positional_encoding(x, np.arange(5), start=1), ValueError, "start must"),
        (lambda: cpe.add_positional_encoding(x, out=x[:, ::-1]), ValueError, "shares memory"),
        (lambda: cpe.add_positional_encoding(x, np.full(5, np.inf)), ValueError, "finite"),
    ]
    for call, error, match in cases:
        _refused(call, error, match, x, out)


@pytest.mark.parametrize(
    "keywords",
    [{}, {"convention": "fairseq"}, {"layout": "sin_cos", "base": 500.0, "freq_shift": 1.0}],
    ids=["paper", "fairseq", "sin_cos"],
)
def test_a_sinusoidal_encoding_gives_what_the_functions_give(keywords):
    # One parsed encoding serves every call: the same bits as the functions, which
    # read the keywords at each call, whatever the calls before.
    encoding = cpe.Sinusoidal(33, **keywords)
    x = values((2, 40, 33), np.float32)
    for start in (0, 90000, 7):
        np.testing.assert_array_equal(
            encoding.add(x, start=start, x_scale=2.0),
            cpe.add_positional_encoding(x, start=start, x_scale=2.0, **keywords),
        )
        np.testing.assert_array_equal(
            encoding.table(40, start=start, dtype=np.float32),
            cpe.positional_encoding_table(40, 33, start=start, dtype=np.float32, **keywords),
        )
        positions = RNG.uniform(-1e6, 1e6, size=(3, 5))
        np.testing.assert_array_equal(
            encoding.encode(positions), cpe.positional_encoding(positions, 33, **keywords)
        )


def test_a_sinusoidal_encoding_checks_its_keywords_once_and_its_rows():
    with pytest.raises(ValueError, match="D must be"):
        cpe.Sinusoidal(0)
    with pytest.raises(ValueError, match="base"):
        cpe.Sinusoidal(8, base=-1.0)
    with pytest.raises(ValueError, match="convention"):
        cpe.Sinusoidal(8, convention="bert")
    with pytest.raises(TypeError, match="freq_shift"):
        cpe.Sinusoidal(8, freq_shift="1")
    encoding = cpe.Sinusoidal(16)
    x = values((3, 8))
    _refused(lambda: encoding.add(x), ValueError, "D = 16", x)


# ---- transformers' per-layer rope_parameters (Gemma 3) ----

GEMMA3 = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
}


def test_per_layer_rope_parameters_take_a_layer_type():
    x = values((1, 2, 9, 32))
    for layer_type, one in GEMMA3.items():
        for got, want in zip(
            cpe.rope_cos_sin(9, 32, start=5, rope_parameters=GEMMA3, layer_type=layer_type),
            cpe.rope_cos_sin(9, 32, start=5, rope_parameters=one),
            strict=True,
        ):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(
            cpe.apply_rope(x, start=5, rope_parameters=GEMMA3, layer_type=layer_type),
            cpe.apply_rope(x, start=5, rope_parameters=one),
        )
        rope = cpe.Rope(32, rope_parameters=GEMMA3, layer_type=layer_type)
        np.testing.assert_array_equal(
            rope.apply(x, start=5), cpe.apply_rope(x, start=5, rope_parameters=one)
        )
        w, _ = cpe.rope_frequencies(32, rope_parameters=GEMMA3, layer_type=layer_type)
        np.testing.assert_array_equal(w, cpe.rope_frequencies(32, rope_parameters=one)[0])


def test_a_layer_type_is_asked_for_and_checked():
    with pytest.raises(ValueError, match="pass layer_type= to choose one"):
        cpe.rope_cos_sin(4, 32, rope_parameters=GEMMA3)
    with pytest.raises(ValueError, match="'global' is not a layer type"):
        cpe.Rope(32, rope_parameters=GEMMA3, layer_type="global")
    with pytest.raises(ValueError, match="one layer's"):
        cpe.rope_frequencies(
            32, rope_parameters=GEMMA3["full_attention"], layer_type="full_attention"
        )
    with pytest.raises(ValueError, match="not given"):
        cpe.apply_rope(values((2, 32)), layer_type="full_attention")
    with pytest.raises(TypeError, match="layer_type must be a str"):
        cpe.rope_cos_sin(4, 32, rope_parameters=GEMMA3, layer_type=0)


def test_float16_and_bfloat16_are_rounded_once_at_their_edges():
    # Values across the formats' ranges, subnormals, overflow and NaN included,
    # through the addition (x * x_scale + e) and the rotation: each the float64
    # result rounded once (NumPy rounds double to half once; bfloat16 as exact
    # rationals, see test_bfloat16).
    rng = np.random.default_rng(7)
    magnitudes = 2.0 ** rng.uniform(-30, 18, size=(4, 40))
    wide = np.where(rng.random((4, 40)) < 0.5, -magnitudes, magnitudes)
    wide[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    with np.errstate(over="ignore"):  # (beyond float16: infinity, as intended)
        x16 = wide.astype(np.float16)
    for x_scale in (1.0, 3.0, 1e-3):
        exact = x16.astype(np.float64) * x_scale + cpe.positional_encoding_table(4, 40)
        with np.errstate(over="ignore", invalid="ignore"):
            want = exact.astype(np.float16)
        got = cpe.add_positional_encoding(x16, x_scale=x_scale)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    rotated = cpe.apply_rope(x16[:, None, :], start=11)
    with np.errstate(over="ignore", invalid="ignore"):
        want = cpe.apply_rope(x16[:, None, :].astype(np.float64), start=11).astype(np.float16)
    np.testing.assert_array_equal(rotated.view(np.uint16), want.view(np.uint16))
    bf16 = require("ml_dtypes").bfloat16
    from test_bfloat16 import nearest_bfloat16

    finite = np.nan_to_num(wide, nan=1.0, posinf=3e38, neginf=-3e38).astype(bf16)
    for x_scale in (1.0, 3.0):
        got = cpe.add_positional_encoding(finite, x_scale=x_scale)
        exact = finite.astype(np.float64) * x_scale + cpe.positional_encoding_table(4, 40)
        want = [nearest_bfloat16(v) for v in exact.ravel().tolist()]
        np.testing.assert_array_equal(got.astype(np.float64).ravel(), want)
    nan = cpe.add_positional_encoding(np.array([np.nan, -np.nan], dtype=bf16))
    assert np.isnan(nan.astype(np.float64)).all()


def every_pattern(dtype) -> np.ndarray:
    """Every bit pattern of a 16-bit dtype (NaNs, infinities, subnormals), in rows
    of 13 pairs: the kernels' vector loops and their scalar ends."""
    return (np.arange(2521 * 26) % 65536).astype(np.uint16).view(dtype).reshape(2521, 26)


def sixteen_bit_results(x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(cpe's result, the float64 result) of rotations and an addition of x."""
    with np.errstate(invalid="ignore"):  # (ml_dtypes warns of signaling NaNs)
        wide = x.astype(np.float64)
    pairs = [
        (
            cpe.apply_rope(x, start=99991, layout=layout),
            cpe.apply_rope(wide, start=99991, layout=layout),
        )
        for layout in ("half", "interleaved")
    ]
    pairs.append(
        (
            cpe.add_positional_encoding(x, start=7, x_scale=0.75),
            cpe.add_positional_encoding(wide, start=7, x_scale=0.75),
        )
    )
    return pairs


def assert_same_bits_or_quiet_nans(got: np.ndarray, want: np.ndarray, quiet: int) -> None:
    """The same bits (signed zeros included), except that a NaN may be any quiet
    NaN: which of a pair's NaNs an operation passes on is the compiler's choice
    (it may swap the operands of an addition), so payloads are not promised."""
    with np.errstate(invalid="ignore"):
        nan = np.isnan(want.astype(np.float64)).ravel()
    got, want = got.view(np.uint16).ravel(), want.view(np.uint16).ravel()
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert ((got[nan] & quiet) == quiet).all()


def test_every_float16_pattern_is_rounded_once():
    for got, wide in sixteen_bit_results(every_pattern(np.float16)):
        with np.errstate(over="ignore", invalid="ignore"):
            want = wide.astype(np.float16)  # NumPy rounds double to half once
        assert_same_bits_or_quiet_nans(got, want, 0x7E00)


def test_every_bfloat16_pattern_is_rounded_once():
    bf16 = require("ml_dtypes").bfloat16
    from test_bfloat16 import nearest_bfloat16

    for got, wide in sixteen_bit_results(every_pattern(bf16)):
        want = [v if not math.isfinite(v) else nearest_bfloat16(v) for v in wide.ravel().tolist()]
        assert_same_bits_or_quiet_nans(got, np.array(want).astype(bf16), 0x7FC0)


# ---- found by a review: empty arrays, names in errors, views ----


def test_empty_arrays_are_returned_at_once():
    x = np.zeros((2, 0, 5, 8))
    assert cpe.apply_rope(x, out=x) is x  # (NumPy gives empty arrays zero strides)
    assert cpe.add_positional_encoding(x, out=x) is x
    long_and_empty = np.empty((2**40, 0, 8)).reshape(2**40, 0, 8)
    assert cpe.apply_rope(long_and_empty, seq_axis=0).shape == (2**40, 0, 8)


def test_errors_name_what_was_given():
    x = values((2, 5, 8))
    with pytest.raises(ValueError, match="start must be 0 when positions are given"):
        cpe.apply_rope(x, np.zeros(5), start=3)
    with pytest.raises(ValueError, match=r"x's rows \(its last axis\) must have an even length"):
        cpe.apply_rope(np.ones((5, 0)))
    with pytest.raises(ValueError, match=r"x's rows \(its last axis\) must have one value"):
        cpe.add_positional_encoding(np.ones((5, 0)))
    # (frequencies beyond the paper's are named with the position beyond their reach)
    with pytest.raises(
        ValueError, match=r"^inv_freq gives frequencies up to 8: .*got 4\.5036e\+15"
    ):
        cpe.apply_rope(values((4, 8)), start=2**52, inv_freq=np.full(4, 8.0))
    with pytest.raises(ValueError, match=r"positions of shape \(3, 4\) do not broadcast"):
        cpe.apply_rope(x, np.zeros((3, 4)), rope_parameters={"mrope_section": [1, 1, 2]})
    with pytest.raises(TypeError, match="must not be a masked array"):
        cpe.apply_rope(np.ma.masked_array(values((2, 8))))
    with pytest.raises(ValueError, match="axes_dim gives 8 axes at most, got 9"):
        cpe.apply_rope(values((2, 18)), np.zeros((2, 9)), axes_dim=(2,) * 9, layout="interleaved")


def test_in_place_through_a_view_that_steps_differently_along_an_axis_of_one():
    x = values((3, 1, 8))
    want = cpe.apply_rope(x, start=4)
    view = np.lib.stride_tricks.as_strided(x, shape=(3, 1, 8), strides=(64, 999, 8))
    assert cpe.apply_rope(x, start=4, out=view) is view
    np.testing.assert_array_equal(x, want)


def test_inverse_is_the_transpose_with_an_attention_factor():
    x = values((1, 2, 6, 16))
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    factor = cpe.rope_frequencies(16, rope_parameters=yarn)[1]
    back = cpe.apply_rope(cpe.apply_rope(x, rope_parameters=yarn), rope_parameters=yarn,
                          inverse=True)  # fmt: skip
    np.testing.assert_allclose(back, factor**2 * x, rtol=1e-14, atol=1e-14)
    # <R x, y> = <x, R^T y>: the backward pass
    y = values(x.shape)
    forward = np.sum(cpe.apply_rope(x, rope_parameters=yarn) * y)
    backward = np.sum(x * cpe.apply_rope(y, rope_parameters=yarn, inverse=True))
    assert forward == pytest.approx(backward, rel=1e-13)


# ---- the contract, on arbitrary calls (tests/apply_contract.py; the fuzzer too) ----


@pytest.mark.parametrize("mode", ["valid", "one_bad"])
@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(data=st.data())
def test_arbitrary_calls_keep_the_contract(mode, data):
    call = apply_contract.draw_apply(HypothesisChooser(data), mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning may escape
        apply_contract.check(call, mode)


def test_the_contract_compares_an_accepted_hostile_call_in_place_with_x_before():
    # A hostile argument cpe accepts (nested-list positions) with out=x: x holds the
    # result afterwards, so the reference must be computed from x as it was.
    x = values((1, 2, 1, 2))
    call = apply_contract.ApplyCall(
        "apply_rope", x,
        {"layout": "half", "inverse": True, "base": 5e5, "out": x, "positions": [[0.5], [1]]},
        blame="positions", arrays=[x],
    )  # fmt: skip
    want = apply_contract.reference(call)
    assert apply_contract.check(call, "one_bad") is None
    np.testing.assert_array_equal(x, want)
