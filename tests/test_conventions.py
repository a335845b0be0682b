"""Every convention in use, from the same kernels, against independent formulas.

``tests/reference.py`` holds each convention written from its published formula; the
README's table of conventions is parsed here and every row is executed.
"""

from __future__ import annotations

import pathlib
import re
import types

import numpy as np
import pytest

import cpe
import reference as ref

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def close(got, expected, max_angle):
    # The reference formulas round w_j to a double: ~1e-16 * |angle| radians of error.
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15 * max(1.0, max_angle) * 8)


@pytest.mark.parametrize("D", [2, 3, 4, 5, 64, 127])
def test_paper_and_distilbert(D):
    close(cpe.positional_encoding_table(50, D), ref.paper_table(50, D), 50)
    close(cpe.positional_encoding_table(50, D, convention="paper"), ref.paper_table(50, D), 50)


@pytest.mark.parametrize("D", [1, 2, 3, 4, 5, 64, 127])
def test_marian(D):
    close(cpe.positional_encoding_table(40, D, convention="marian"), ref.marian_table(40, D), 40)


@pytest.mark.parametrize("D", [4, 5, 6, 7, 64, 127])
def test_fairseq(D):
    close(cpe.positional_encoding_table(70, D, convention="fairseq"), ref.fairseq_table(70, D), 70)


@pytest.mark.parametrize("D", [1, 2, 3, 4, 5, 64, 127])
@pytest.mark.parametrize(
    ("min_ts", "max_ts", "start"), [(1.0, 1e4, 0), (2.0, 5e3, 7), (0.5, 1e5, -3)]
)
def test_tensor2tensor(D, min_ts, max_ts, start):
    got = cpe.positional_encoding_table(
        30, D, start=start, base=max_ts / min_ts, scale=min_ts, convention="tensor2tensor"
    )
    close(got, ref.tensor2tensor_timing_signal(30, D, min_ts, max_ts, start), 40 * min_ts)


@pytest.mark.parametrize("D", [4, 64, 384])
def test_whisper(D):
    close(
        cpe.positional_encoding_table(60, D, convention="whisper"), ref.whisper_sinusoids(60, D), 60
    )


TIMESTEPS = np.array([0.0, 1.0, 17.5, 250.25, 998.39, 999.0])


@pytest.mark.parametrize("D", [4, 5, 32, 33, 320])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shift", [0, 1, 0.5])
@pytest.mark.parametrize(("scale", "max_period"), [(1.0, 10000.0), (1000.0, 10000.0), (1.0, 500.0)])
def test_diffusers_get_timestep_embedding(D, flip, shift, scale, max_period):
    got = cpe.positional_encoding(
        TIMESTEPS,
        D,
        layout="cos_sin" if flip else "sin_cos",
        freq_shift=shift,
        scale=scale,
        base=max_period,
    )
    expected = ref.diffusers_timestep_embedding(TIMESTEPS, D, flip, shift, scale, max_period)
    close(got, expected, 1000 * scale)


def test_diffusers_preset_is_its_default():
    close(
        cpe.positional_encoding(TIMESTEPS, 64, convention="diffusers"),
        ref.diffusers_timestep_embedding(TIMESTEPS, 64),
        1000,
    )


@pytest.mark.parametrize("D", [2, 3, 64, 320, 321])
def test_adm_and_stable_diffusion(D):
    close(
        cpe.positional_encoding(TIMESTEPS, D, convention="adm"),
        ref.adm_timestep_embedding(TIMESTEPS, D),
        1000,
    )


@pytest.mark.parametrize("layout", ["interleaved", "sin_cos", "cos_sin"])
@pytest.mark.parametrize("freq_shift", [None, 0.0, 1.0, -2.5])
@pytest.mark.parametrize("D", [3, 4, 7, 10, 65])
@pytest.mark.parametrize("scale", [1.0, 0.25, -3.0])
def test_every_layout_and_frequency_choice(layout, freq_shift, D, scale):
    kwargs = {"layout": layout, "freq_shift": freq_shift, "scale": scale, "base": 700.0}
    positions = np.arange(-20, 300, 7)
    if freq_shift is not None and D // 2 > 1 and D // 2 - freq_shift <= 0:
        with pytest.raises(ValueError, match="freq_shift"):
            cpe.positional_encoding(positions, D, **kwargs)
        return
    expected = ref.encoding(positions, D, **kwargs)
    close(cpe.positional_encoding(positions, D, **kwargs), expected, 300 * abs(scale))
    # tables (the digit-table path) and float32 agree too
    table = cpe.positional_encoding_table(320, D, start=-20, **kwargs)
    close(table[::7], expected, 300 * abs(scale))
    single = cpe.positional_encoding(positions, D, dtype=np.float32, **kwargs)
    np.testing.assert_array_equal(
        single, cpe.positional_encoding(positions, D, **kwargs).astype(np.float32)
    )
    # One position at a time (the scalar path): the rows of the array's call,
    # which multiplies the same digit rows; a real position against the oracle.
    rows = cpe.positional_encoding(positions, D, **kwargs)
    for i in (0, 3, len(positions) - 1):
        np.testing.assert_array_equal(
            cpe.positional_encoding(int(positions[i]), D, **kwargs), rows[i]
        )
    close(
        cpe.positional_encoding(12.375, D, **kwargs),
        ref.encoding(12.375, D, **kwargs),
        13 * abs(scale),
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"convention": "vaswani2"}, ValueError, "convention must be one of"),
        ({"convention": 3}, ValueError, "convention must be one of"),
        ({"convention": "fairseq", "layout": "sin_cos"}, ValueError, "either convention or layout"),
        ({"convention": "adm", "freq_shift": 0}, ValueError, "either convention or layout"),
        ({"layout": "blocked"}, ValueError, "layout must be one of"),
        ({"layout": 1}, ValueError, "layout must be one of"),
        ({"freq_shift": 4}, ValueError, "freq_shift=4.0 needs D // 2 - freq_shift > 0"),
        ({"freq_shift": 4.5}, ValueError, "freq_shift"),
        ({"freq_shift": True}, TypeError, "freq_shift must be a real number"),
        ({"freq_shift": np.nan}, ValueError, "freq_shift must be finite"),
        ({"freq_shift": "1"}, TypeError, "freq_shift must be a real number"),
        ({"scale": np.inf}, ValueError, "scale must be finite"),
        ({"scale": None}, TypeError, "scale must be a real number"),
        ({"scale": False}, TypeError, "scale must be a real number"),
    ],
)
def test_bad_convention_arguments(kwargs, exc, text):
    out = np.full((3, 8), 7.0)
    with pytest.raises(exc, match=text):
        cpe.positional_encoding([1, 2, 3], 8, out=out, **kwargs)
    with pytest.raises(exc, match=text):
        cpe.positional_encoding_table(3, 8, out=out, **kwargs)
    np.testing.assert_array_equal(out, 7.0)
    # One position takes the scalar path (with out= and without).
    one = np.full(8, 7.0)
    for position in (5, 2.5, np.int64(5)):
        with pytest.raises(exc, match=text):
            cpe.positional_encoding(position, 8, **kwargs)
        with pytest.raises(exc, match=text):
            cpe.positional_encoding(position, 8, out=one, **kwargs)
    np.testing.assert_array_equal(one, 7.0)


@pytest.mark.parametrize("convention", ["fairseq", "tensor2tensor", "whisper", "diffusers", "adm"])
@pytest.mark.parametrize("D", [1, 2, 3])
def test_shifted_conventions_below_four_columns(convention, D):
    # One frequency at most, w_0 = 1, as tensor2tensor's guarded formula gives
    # (fairseq divides by zero here, Whisper and diffusers give NaN); D = 1 is
    # the zero column of tensor2tensor, fairseq, diffusers and ADM.
    p = np.arange(-3.0, 40.0)
    got = cpe.positional_encoding(p, D, convention=convention)
    expected = np.zeros((p.size, D))
    if D >= 2:
        first, second = (np.cos(p), np.sin(p)) if convention == "adm" else (np.sin(p), np.cos(p))
        expected[:, 0], expected[:, 1] = first, second
    table = cpe.positional_encoding_table(p.size, D, start=-3, convention=convention)
    for result in (got, table):
        np.testing.assert_allclose(result, expected, rtol=0, atol=1e-15)
        assert np.all(result[:, 2:] == 0)


# ---- the README's table, row by row ----

ORIGINALS = {
    "create_sinusoidal_embeddings": ref.paper_table,
    "MarianSinusoidalPositionalEmbedding": ref.marian_table,
    "SinusoidalPositionalEmbedding": types.SimpleNamespace(get_embedding=ref.fairseq_table),
    "get_timing_signal_1d": ref.tensor2tensor_timing_signal,
    "sinusoids": ref.whisper_sinusoids,
    "get_timestep_embedding": ref.diffusers_timestep_embedding,
    "timestep_embedding": ref.adm_timestep_embedding,
}

BINDINGS = [
    {
        "n": 50,
        "D": 64,
        "t": TIMESTEPS,
        "flip_sin_to_cos": False,
        "downscale_freq_shift": 1,
        "scale": 1.0,
        "max_period": 10000.0,
        "min_timescale": 1.0,
        "max_timescale": 1.0e4,
        "start_index": 0,
    },
    {
        "n": 9,
        "D": 12,
        "t": TIMESTEPS,
        "flip_sin_to_cos": True,
        "downscale_freq_shift": 0,
        "scale": 3.0,
        "max_period": 5000.0,
        "min_timescale": 2.0,
        "max_timescale": 1.0e3,
        "start_index": 5,
    },
]


def readme_rows() -> list[tuple[str, str]]:
    section = README.read_text().split("## Conventions", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        codes = re.findall(r"`([^`]+)`", line)
        if line.startswith("|") and len(codes) >= 2 and codes[-1].startswith("cpe."):
            rows.append((codes[-2], codes[-1]))
    return rows


@pytest.mark.skipif(
    not README.exists(), reason="README.md is not beside the tests (installed elsewhere)"
)
def test_readme_conventions_table_rows_reproduce_the_originals():
    rows = readme_rows()
    assert {original.split("(")[0].split(".")[0] for original, _ in rows} == set(ORIGINALS)
    for original, call in rows:
        for binding in BINDINGS:
            namespace = {"cpe": cpe, "np": np, **ORIGINALS, **binding}
            expected = eval(original, namespace)
            got = eval(call, namespace)
            close(got, expected, 1000 * binding["scale"])
