"""cpe against the real functions of other packages, when they are installed.

Those packages compute in float32 (or round float64 tables to float32), so the
tolerance is float32's: a few ulp of the angle. cpe's own accuracy is checked
against mpmath in test_accuracy.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import cpe
from interop import require


def close_to_float32_code(got, theirs, max_angle):
    np.testing.assert_allclose(got, theirs, rtol=0, atol=2.4e-7 * max(1.0, max_angle) * 4)


@pytest.fixture(scope="module")
def torch():
    torch = require("torch")
    torch.set_num_threads(1)
    return torch


@pytest.mark.parametrize("D", [4, 5, 64, 321])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shift", [0, 1])
# float32 angles beyond ~1e4 carry errors of 1e-3 rad and more, which would make
# the comparison too loose to fail: keep scale * t modest.
@pytest.mark.parametrize(("scale", "max_period"), [(1, 10000), (3, 10000), (1, 777)])
def test_diffusers_get_timestep_embedding(torch, D, flip, shift, scale, max_period):
    embeddings = require("diffusers.models.embeddings")
    t = np.array([0.0, 1.0, 17.0, 250.5, 998.39, 999.0])
    theirs = embeddings.get_timestep_embedding(
        torch.tensor(t), D, flip_sin_to_cos=flip, downscale_freq_shift=shift, scale=scale, max_period=max_period
    ).numpy()
    got = cpe.positional_encoding(
        t, D, layout="cos_sin" if flip else "sin_cos", freq_shift=shift, scale=scale, base=max_period
    )
    close_to_float32_code(got, theirs, 1000 * scale)


@pytest.mark.parametrize("D", [4, 5, 64, 127])
def test_transformers_fairseq_style_get_embedding(torch, D):
    m2m = require("transformers.models.m2m_100.modeling_m2m_100")
    theirs = m2m.M2M100SinusoidalPositionalEmbedding.get_embedding(300, D).numpy()
    close_to_float32_code(cpe.positional_encoding_table(300, D, convention="fairseq"), theirs, 300)


@pytest.mark.parametrize("D", [1, 4, 5, 64, 127])
def test_transformers_marian(torch, D):
    marian = require("transformers.models.marian.modeling_marian")
    theirs = marian.MarianSinusoidalPositionalEmbedding(200, D).create_weight().numpy()
    close_to_float32_code(cpe.positional_encoding_table(200, D, convention="marian"), theirs, 200)


@pytest.mark.parametrize("D", [2, 5, 64, 128])
def test_transformers_distilbert(torch, D):
    distilbert = require("transformers.models.distilbert.modeling_distilbert")
    out = torch.empty(150, D)
    distilbert._create_sinusoidal_embeddings(n_pos=150, dim=D, out=out)
    close_to_float32_code(cpe.positional_encoding_table(150, D), out.numpy(), 150)
