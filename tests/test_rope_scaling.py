"""Scaled RoPE (rope_parameters, inv_freq=) against mpmath; its errors.

The real transformers modules are compared in test_interop.py.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import cpe
import exact

SHORT = list(np.linspace(1.0, 1.5, 32))
LONG = list(np.linspace(1.0, 9.0, 32))
# (rope_parameters, max_position_embeddings, seq_len) for head_dim 64.
SCHEMES = {
    "default": ({}, None, None),
    "default rope_theta": ({"rope_theta": 500000.0}, None, None),
    "mrope alias": ({"type": "mrope", "mrope_section": [16, 8, 8]}, None, None),
    "linear": ({"rope_type": "linear", "factor": 3.0}, None, None),
    "linear old form": ({"type": "linear", "factor": 2.5}, None, None),
    "linear partial": (
        {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
        None,
        None,
    ),
    "dynamic short": ({"rope_type": "dynamic", "factor": 2.0}, 2048, 100),
    "dynamic long": ({"rope_type": "dynamic", "factor": 2.0}, 2048, 10000),
    "yarn": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
        None,
        None,
    ),
    "yarn no truncate": (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "truncate": False,
            "original_max_position_embeddings": 1024,
        },
        None,
        None,
    ),
    "yarn deepseek": (
        {
            "type": "yarn",
            "factor": 40,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096,
            "rope_theta": 10000,
        },
        None,
        None,
    ),
    "yarn factor from lengths": (
        {"rope_type": "yarn", "original_max_position_embeddings": 4096},
        32768,
        None,
    ),
    "longrope short": (
        {
            "rope_type": "longrope",
            "short_factor": SHORT,
            "long_factor": LONG,
            "original_max_position_embeddings": 4096,
        },
        131072,
        4096,
    ),
    "longrope long": (
        {
            "rope_type": "longrope",
            "short_factor": SHORT,
            "long_factor": LONG,
            "original_max_position_embeddings": 4096,
        },
        131072,
        4097,
    ),
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
        None,
        None,
    ),
    "proportional": (
        {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 2.0},
        None,
        None,
    ),
}


def _exact(name, head_dim=64):
    params, mpe, seq_len = SCHEMES[name]
    return exact.rope_scheme(head_dim, params, mpe, seq_len)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_frequencies_are_the_exact_ones_rounded_once(name):
    params, mpe, seq_len = SCHEMES[name]
    inv_freq, attention = cpe.rope_frequencies(
        64, rope_parameters=params, max_position_embeddings=mpe, seq_len=seq_len
    )
    want, want_attention, width = _exact(name)
    assert inv_freq.dtype == np.float64
    assert inv_freq.shape == (width // 2,)
    assert attention == pytest.approx(want_attention, rel=1e-15)
    # Half an ulp: the double-double frequency, rounded to float64 once.
    pairs = zip(inv_freq, want, strict=True)
    err = np.array([float(abs(mpmath.mpf(float(g)) - w)) for g, w in pairs])
    assert np.all(err <= 0.5000001 * np.spacing(np.abs(inv_freq)) + 1e-300), err.max()


@pytest.mark.parametrize(
    "name",
    [
        "linear",
        "dynamic long",
        "yarn deepseek",
        "longrope long",
        "llama3",
        "proportional",
        "linear partial",
    ],
)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_tables_are_exact_at_a_million(name, layout):
    params, mpe, seq_len = SCHEMES[name]
    start = 10**6 - 40
    cos, sin = cpe.rope_cos_sin(
        40,
        64,
        start=start,
        layout=layout,
        rope_parameters=params,
        max_position_embeddings=mpe,
        seq_len=seq_len,
    )
    w, attention, width = _exact(name)
    assert cos.shape == sin.shape == (40, width)
    columns = list(w) * 2 if layout == "half" else [x for x in w for _ in range(2)]
    for row in (0, 17, 39):
        p = start + row
        want_cos = [attention * mpmath.cos(p * x) for x in columns]
        want_sin = [attention * mpmath.sin(p * x) for x in columns]
        # 1e-15 as the 1-D encodings, and one rounding of the product by the factor.
        bound = 1e-15 * attention + 2.3e-16 * attention
        for got, want in ((cos[row], want_cos), (sin[row], want_sin)):
            pairs = zip(got, want, strict=True)
            assert max(abs(mpmath.mpf(float(g)) - v) for g, v in pairs) <= bound


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", ["yarn", "llama3"])
def test_narrow_tables_are_the_float64_values_rounded_once(name, dtype):
    params = SCHEMES[name][0]
    wide = cpe.rope_cos_sin(300, 64, start=5000, rope_parameters=params)
    narrow = cpe.rope_cos_sin(300, 64, start=5000, rope_parameters=params, dtype=dtype)
    for got, want in zip(narrow, wide, strict=True):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("name", ["yarn deepseek", "longrope long", "dynamic long"])
def test_positions_and_tables_give_the_same_bits(name):
    params, mpe, seq_len = SCHEMES[name]
    kwargs = {"rope_parameters": params, "max_position_embeddings": mpe, "seq_len": seq_len}
    table = cpe.rope_cos_sin(200, 64, start=3000, **kwargs)
    ids = np.random.default_rng(1).integers(3000, 3200, (3, 7))
    rows = cpe.rope_cos_sin(ids, 64, **kwargs)
    for got, whole in zip(rows, table, strict=True):
        np.testing.assert_array_equal(got, whole[ids - 3000])
    out = (np.empty_like(table[0]), np.empty_like(table[1]))
    again = cpe.rope_cos_sin(200, 64, start=3000, out=out, **kwargs)
    assert again[0] is out[0]
    for got, want in zip(again, table, strict=True):
        np.testing.assert_array_equal(got, want)


def test_seq_len_defaults_to_the_request():
    params = {
        "rope_type": "longrope",
        "short_factor": SHORT,
        "long_factor": LONG,
        "original_max_position_embeddings": 4096,
    }
    kwargs = {"rope_parameters": params, "max_position_embeddings": 131072}
    for start, seq_len in [(0, 4096), (1, 4097)]:  # start + n against the original length
        default = cpe.rope_cos_sin(4096, 64, start=start, **kwargs)
        given = cpe.rope_cos_sin(4096, 64, start=start, seq_len=seq_len, **kwargs)
        np.testing.assert_array_equal(default[1], given[1])
    short = cpe.rope_cos_sin(4096, 64, start=1, seq_len=4096, **kwargs)
    assert not np.array_equal(short[1], cpe.rope_cos_sin(4096, 64, start=1, **kwargs)[1])
    ids = np.array([[5, 4096]])  # the largest position + 1 = 4097 > 4096: long factors
    np.testing.assert_array_equal(
        cpe.rope_cos_sin(ids, 64, **kwargs)[0], cpe.rope_cos_sin(ids, 64, seq_len=4097, **kwargs)[0]
    )


def test_default_parameters_are_the_unscaled_tables():
    plain = cpe.rope_cos_sin(50, 64, base=500000.0, start=70)
    for params in ({}, {"rope_type": "default"}, {"rope_theta": 500000.0}):
        scaled = cpe.rope_cos_sin(50, 64, start=70, base=500000.0, rope_parameters=params)
        for got, want in zip(scaled, plain, strict=True):
            np.testing.assert_array_equal(got, want)
    # partial rotary: the unscaled table of the rotary width
    part = cpe.rope_cos_sin(50, 64, start=70, rope_parameters={"partial_rotary_factor": 0.5})
    np.testing.assert_array_equal(part[0], cpe.rope_cos_sin(50, 32, start=70)[0])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_given_frequencies_are_taken_as_exact(layout):
    inv_freq = np.array([1.0, 0.3, 1e-3, 0.0])
    cos, sin = cpe.rope_cos_sin(np.array([0, 3, 999999]), 8, inv_freq=list(inv_freq), layout=layout)
    columns = list(inv_freq) * 2 if layout == "half" else list(np.repeat(inv_freq, 2))
    for row, p in enumerate([0, 3, 999999]):
        for k, w in enumerate(columns):
            assert abs(cos[row, k] - mpmath.cos(p * mpmath.mpf(w))) <= 1e-15
            assert abs(sin[row, k] - mpmath.sin(p * mpmath.mpf(w))) <= 1e-15


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"rope_parameters": {"rope_type": "ntk"}}, ValueError, "'llama3'"),
        (
            {"rope_parameters": {"rope_type": "linear"}},
            ValueError,
            "rope_type 'linear' needs the key 'factor'",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "original_max_position_embeddings": 8192,
                }
            },
            ValueError,
            "'llama3' needs the key 'high_freq_factor'",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 0.0}},
            ValueError,
            "rope_parameters['factor'] must be > 0",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": "2"}},
            TypeError,
            "rope_parameters['factor'] must be a real number",
        ),
        (
            {"rope_parameters": {"partial_rotary_factor": 1.5}},
            ValueError,
            "partial_rotary_factor'] must be in (0, 1]",
        ),
        (
            {"rope_parameters": {"partial_rotary_factor": 0.0}},
            ValueError,
            "partial_rotary_factor'] must be in (0, 1]",
        ),
        (
            {"rope_parameters": {"partial_rotary_factor": 0.3}},
            ValueError,
            "rotary_dim = int(head_dim * partial_rotary_factor) = 19",
        ),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "beta_fats": 32}},
            ValueError,
            "unknown keys 'beta_fats'",
        ),
        (
            {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}},
            ValueError,
            "needs max_position_embeddings",
        ),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}},
            ValueError,
            "needs the key 'original_max_position_embeddings'",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 3,
                    "long_factor": [1.0] * 32,
                    "original_max_position_embeddings": 4,
                }
            },
            ValueError,
            "rope_parameters['short_factor'] must have rotary_dim // 2 = 32 entries, got 3",
        ),
        (
            {"rope_parameters": [("rope_type", "linear")]},
            TypeError,
            "rope_parameters must be a mapping",
        ),
        ({"rope_parameters": {"rope_theta": -1.0}}, ValueError, "rope_theta'] must be > 0"),
        (
            {
                "seq_len": -1,
                "rope_parameters": {"rope_type": "dynamic", "factor": 2.0},
                "max_position_embeddings": 10,
            },
            ValueError,
            "seq_len must be >= 0",
        ),
        (
            {
                "max_position_embeddings": 0,
                "rope_parameters": {"rope_type": "dynamic", "factor": 2.0},
            },
            ValueError,
            "max_position_embeddings must be >= 1",
        ),
        # Formulas that divide by log(base), log(length) or an mscale.
        (
            {
                "base": 1.0,
                "rope_parameters": {
                    "rope_type": "yarn",
                    "factor": 2.0,
                    "original_max_position_embeddings": 16,
                },
            },
            ValueError,
            "other than 1",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 32,
                    "long_factor": [1.0] * 32,
                    "factor": 2.0,
                    "original_max_position_embeddings": 1,
                }
            },
            ValueError,
            "original_max_position_embeddings > 1",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "mscale": 1.0,
                    "mscale_all_dim": -1 / (0.1 * 1.3862943611198906),
                    "original_max_position_embeddings": 16,
                }
            },
            ValueError,
            "give the attention factor",
        ),
        # A rope_type of another type, a zero low_freq_factor, a ragged factor list.
        ({"rope_parameters": {"rope_type": np.array(["yarn"])}}, TypeError, "must be a str"),
        (
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 0.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                }
            },
            ValueError,
            "rope_parameters['low_freq_factor'] must be > 0",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "short_factor": [[1.0], [1.0, 2.0]],
                    "long_factor": [1.0] * 32,
                    "original_max_position_embeddings": 16,
                }
            },
            TypeError,
            "rope_parameters['short_factor'] must be a sequence of numbers",
        ),
    ],
)
def test_scheme_errors(kwargs, exc, text):
    with pytest.raises(exc) as info:
        cpe.rope_frequencies(64, **kwargs)
    assert text in str(info.value)
    out = (np.full((4, 64), 7.0), np.full((4, 64), 7.0))
    with pytest.raises(exc) as info:
        cpe.rope_cos_sin(4, 64, out=out, **kwargs)
    assert text in str(info.value)
    assert np.all(out[0] == 7.0)
    assert np.all(out[1] == 7.0)


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"inv_freq": np.ones(3)}, ValueError, "inv_freq must have the shape (head_dim // 2,)"),
        ({"inv_freq": [1.0, np.inf, 0.0, 0.0]}, ValueError, "inv_freq must be finite"),
        ({"inv_freq": ["a", "b", "c", "d"]}, TypeError, "inv_freq must be an array of real"),
        ({"inv_freq": np.ones(4), "rope_parameters": {}}, TypeError, "not both"),
        ({"inv_freq": np.ones(4, complex)}, TypeError, "inv_freq must be an array of real"),
        ({"inv_freq": [True] * 4}, TypeError, "inv_freq must be an array of real"),
        ({"inv_freq": np.ones(4), "seq_len": 3}, TypeError, "cannot be combined with inv_freq"),
    ],
)
def test_inv_freq_errors(kwargs, exc, text):
    with pytest.raises(exc) as info:
        cpe.rope_cos_sin(4, 8, **kwargs)
    assert text in str(info.value)


def test_extreme_but_representable_schemes():
    # A huge factor: frequencies near 1e-301, still exact (no overflow in the splitting).
    inv_freq, _ = cpe.rope_frequencies(8, rope_parameters={"rope_type": "linear", "factor": 1e301})
    want = [float(exact.frequency(j, 8) / mpmath.mpf(1e301)) for j in range(4)]
    np.testing.assert_array_equal(inv_freq, want)
    # truncate None is no truncation, as transformers reads it.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    np.testing.assert_array_equal(
        cpe.rope_frequencies(64, rope_parameters={**yarn, "truncate": None})[0],
        cpe.rope_frequencies(64, rope_parameters={**yarn, "truncate": False})[0],
    )
    # Extreme lengths and betas: the ramp's bounds are formed from logarithms.
    w, _ = cpe.rope_frequencies(
        64, rope_parameters={**yarn, "beta_fast": 1e300, "original_max_position_embeddings": 1e-300}
    )
    assert np.all(np.isfinite(w))
    # proportional may rotate nothing.
    nothing, _ = cpe.rope_frequencies(
        64, rope_parameters={"rope_type": "proportional", "partial_rotary_factor": 0.0}
    )
    np.testing.assert_array_equal(nothing, np.zeros(32))
    # Complex positions too, without a warning from the default seq_len.
    with pytest.raises(TypeError, match="n \\(the positions\\)"):
        cpe.rope_cos_sin(
            np.array([1 + 1j]),
            64,
            rope_parameters={"rope_type": "dynamic", "factor": 2.0},
            max_position_embeddings=16,
        )
    # Non-finite positions are refused as positions, not as a scheme's base.
    with pytest.raises(ValueError, match="n \\(the positions\\) must be finite"):
        cpe.rope_cos_sin(
            [1.0, np.inf],
            64,
            rope_parameters={"rope_type": "dynamic", "factor": 2.0},
            max_position_embeddings=16,
        )


def test_frequencies_follow_the_parameters_whatever_was_computed_before():
    # Scaled frequencies are kept between calls: a changed config (the same dict,
    # mutated) must still give its own values, and a caller's copy stays its own.
    params = dict(SCHEMES["llama3"][0])
    first = cpe.rope_cos_sin(100, 64, start=5000, rope_parameters=params)
    params["factor"] = 4.0
    second = cpe.rope_cos_sin(100, 64, start=5000, rope_parameters=params)
    fresh = cpe.rope_cos_sin(100, 64, start=5000, rope_parameters=dict(params))
    assert not np.array_equal(first[1], second[1])
    np.testing.assert_array_equal(second[1], fresh[1])
    longrope, mpe, _ = SCHEMES["longrope long"]
    factors = list(LONG)
    kwargs = {"max_position_embeddings": mpe, "seq_len": 10**5}
    before = cpe.rope_frequencies(
        64, rope_parameters={**longrope, "long_factor": factors}, **kwargs
    )
    factors[5] = 100.0
    after = cpe.rope_frequencies(64, rope_parameters={**longrope, "long_factor": factors}, **kwargs)
    assert after[0][5] != before[0][5]
    np.testing.assert_array_equal(after[0][6:], before[0][6:])
    after[0][:] = 0.0  # the caller's array, not the kept one
    again = cpe.rope_frequencies(64, rope_parameters={**longrope, "long_factor": factors}, **kwargs)
    assert again[0][0] != 0.0
    # Values that change in place (a 0-d array, an array) are read as they are now.
    factor = np.array(8.0)
    changing = {"rope_type": "linear", "factor": factor}
    before = cpe.rope_cos_sin(20, 64, start=900, rope_parameters=changing)
    factor[...] = 2.0
    now = cpe.rope_cos_sin(20, 64, start=900, rope_parameters=changing)
    want = cpe.rope_cos_sin(
        20, 64, start=900, rope_parameters={"rope_type": "linear", "factor": 2.0}
    )
    assert not np.array_equal(before[1], now[1])
    np.testing.assert_array_equal(now[1], want[1])
    array_factors = np.array(LONG)
    in_place = {**longrope, "long_factor": array_factors}
    before = cpe.rope_frequencies(64, rope_parameters=in_place, **kwargs)[0]
    array_factors[0] = 50.0
    assert cpe.rope_frequencies(64, rope_parameters=in_place, **kwargs)[0][0] != before[0]
    # 0.0 and -0.0 compare equal but give other bits: each is read as given.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    plus = cpe.rope_cos_sin(2, 4, rope_parameters={**yarn, "attention_factor": 0.0})
    minus = cpe.rope_cos_sin(2, 4, rope_parameters={**yarn, "attention_factor": -0.0})
    assert not np.signbit(plus[0]).any()
    assert np.signbit(minus[0]).all()
    # Inputs that cannot be kept are read (and refused) on every call.
    nested: list[object] = []
    nested.append(nested)
    with pytest.raises(TypeError, match="short_factor"):
        cpe.rope_frequencies(
            8,
            rope_parameters={"rope_type": "longrope", "short_factor": nested,
                             "long_factor": [1.0] * 4, "original_max_position_embeddings": 8},
        )  # fmt: skip
    with pytest.raises(TypeError, match="base"):
        cpe.rope_cos_sin(1, 4, base=nested, rope_parameters={"rope_type": "linear", "factor": 2.0})
    # The request's length is part of what dynamic's frequencies are made from.
    dynamic, mpe, _ = SCHEMES["dynamic long"]
    kwargs = {"rope_parameters": dynamic, "max_position_embeddings": mpe}
    short = cpe.rope_cos_sin(10, 64, start=0, **kwargs)  # length 10: the config's base
    long = cpe.rope_cos_sin(10, 64, start=9000, **kwargs)  # length 9010: a larger base
    np.testing.assert_array_equal(
        long[1], cpe.rope_cos_sin(10, 64, start=9000, seq_len=9010, **kwargs)[1]
    )
    np.testing.assert_array_equal(
        short[1], cpe.rope_cos_sin(10, 64, start=0, seq_len=10, **kwargs)[1]
    )
    assert not np.array_equal(
        long[1], cpe.rope_cos_sin(10, 64, start=9000, seq_len=10, **kwargs)[1]
    )


# The long-context configurations the issue names: yarn at factor 32 (a 1M context
# from 32768) and Llama 3.1's llama3, at positions up to 1e6.
LONG_CONTEXT = {
    "yarn factor 32, 1M context": (
        {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32768},
        1_048_576,
        1_000_000,
    ),
    "llama3 (Llama 3.1), theta 500000": (
        {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        131072,
        1_000_000,
    ),
}


@pytest.mark.parametrize("name", list(LONG_CONTEXT))
def test_long_context_tables_are_exact_in_float64_and_float32(name, report_error):
    params, mpe, seq_len = LONG_CONTEXT[name]
    ids = np.array([0, 1, 4095, 131071, 500_000, 999_983, 999_999])
    kwargs = {"rope_parameters": params, "max_position_embeddings": mpe, "seq_len": seq_len}
    wide = cpe.rope_cos_sin(ids, 128, **kwargs)
    narrow = cpe.rope_cos_sin(ids, 128, dtype=np.float32, **kwargs)
    w, attention, _ = exact.rope_scheme(128, params, mpe, seq_len)
    worst64 = worst32 = 0.0
    for row, p in enumerate(ids.tolist()):
        for k in range(128):
            x = p * w[k % 64]
            for table64, table32, want in ((wide[0], narrow[0], mpmath.cos(x)),
                                           (wide[1], narrow[1], mpmath.sin(x))):  # fmt: skip
                want = attention * want
                error64 = float(abs(mpmath.mpf(float(table64[row, k])) - want))
                error32 = float(abs(mpmath.mpf(float(table32[row, k])) - want))
                # float64: 1e-15 and the product's rounding; float32: the float64
                # value rounded once (half a float32 ulp of the value, and its error).
                assert error64 <= 1.3e-15 * attention
                half_ulp = 0.5 * float(np.spacing(np.float32(abs(float(want)))))
                assert error32 <= half_ulp + 1.3e-15 * attention
                worst64, worst32 = max(worst64, error64), max(worst32, error32)
    report_error(f"float64 RoPE {name}, |p| <= 1e6", worst64, 1.3e-15 * attention)
    # Half a float32 ulp: 3.0e-8 below 1, and up to 6.0e-8 * v for values v >= 1
    # (an attention factor > 1), where float32 has no number nearer.
    bound32 = 3.0e-8 if attention <= 1.0 else max(3.0e-8, 6.0e-8 * attention)
    report_error(f"float32 RoPE {name}, |p| <= 1e6", worst32, bound32)
