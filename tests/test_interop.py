"""cpe against the real functions of other packages, when they are installed.

Those packages compute in float32 (or round float64 tables to float32), so the
tolerance is float32's: a few ulp of the angle. cpe's own accuracy is checked
against mpmath in test_accuracy.py.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import cpe
from interop import require
from test_apply import GEMMA3, LLAMA3, RNG


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
        torch.tensor(t),
        D,
        flip_sin_to_cos=flip,
        downscale_freq_shift=shift,
        scale=scale,
        max_period=max_period,
    ).numpy()
    got = cpe.positional_encoding(
        t,
        D,
        layout="cos_sin" if flip else "sin_cos",
        freq_shift=shift,
        scale=scale,
        base=max_period,
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


# ---- grids ----


@pytest.mark.parametrize(("h", "w"), [(4, 4), (3, 5), (16, 24)])
@pytest.mark.parametrize(
    ("extra", "interp", "base_size"), [(0, 1.0, 16), (1, 2.0, 16), (4, 1.0, 8)]
)
def test_diffusers_get_2d_sincos_pos_embed(torch, h, w, extra, interp, base_size):
    embeddings = require("diffusers.models.embeddings")
    theirs = embeddings.get_2d_sincos_pos_embed(
        64,
        (h, w),
        cls_token=extra > 0,
        extra_tokens=extra,
        interpolation_scale=interp,
        base_size=base_size,
    ).numpy()
    got = cpe.sincos_2d(
        h, w, 64, extra_tokens=extra, base_size=base_size, interpolation_scale=interp
    )
    close_to_float32_code(got, theirs, 2 * base_size / interp)


@pytest.mark.parametrize(("t", "h", "w"), [(3, 4, 5), (8, 6, 6)])
def test_diffusers_get_3d_sincos_pos_embed(torch, t, h, w):
    embeddings = require("diffusers.models.embeddings")
    theirs = embeddings.get_3d_sincos_pos_embed(64, (w, h), t, 1.5, 2.0).numpy()
    got = cpe.sincos_3d(
        t, h, w, 64, spatial_interpolation_scale=1.5, temporal_interpolation_scale=2.0
    )
    close_to_float32_code(got, theirs, max(t, h, w))


def timm_sincos_module(torch):
    """timm's pos_embed_sincos.py, loaded without importing timm (which needs torchvision)."""
    import importlib
    import importlib.util
    import pathlib
    import sys
    import types

    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        require("timm")  # skips, or fails when interop is required
    layers = pathlib.Path(spec.origin).parent / "layers"
    package = types.ModuleType("_timm_layers")
    package.__path__ = [str(layers)]
    fx = types.ModuleType("_timm_layers._fx")
    fx.register_notrace_function = lambda function: function
    sys.modules.setdefault("_timm_layers", package)
    sys.modules.setdefault("_timm_layers._fx", fx)
    return importlib.import_module("_timm_layers.pos_embed_sincos")


@pytest.mark.parametrize(("h", "w"), [(4, 4), (3, 7)])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_timm_build_sincos2d_pos_embed(torch, h, w, interleave, reverse):
    timm = timm_sincos_module(torch)
    theirs = timm.build_sincos2d_pos_embed(
        [h, w],
        dim=32,
        temperature=1000.0,
        reverse_coord=reverse,
        interleave_sin_cos=interleave,
        dtype=torch.float64,
    ).numpy()
    # reverse_coord swaps the roles of the two axes, token order included.
    rows, columns = (w, h) if reverse else (h, w)
    got = cpe.sincos_2d(
        rows, columns, 32, base=1000.0, layout="timm_interleaved" if interleave else "timm"
    )
    close_to_float32_code(got, theirs, max(h, w))


# ---- rotary tables ----


@pytest.mark.parametrize(("head_dim", "theta"), [(64, 10000.0), (128, 500000.0)])
def test_transformers_llama_rotary_embedding(torch, head_dim, theta):
    llama = require("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        rope_theta=theta,
        max_position_embeddings=8192,
    )
    rotary = llama.LlamaRotaryEmbedding(config)
    position_ids = torch.tensor([[0, 1, 2, 100, 4095, 8191]])
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 6, head_dim), position_ids)
    cos, sin = cpe.rope_cos_sin(position_ids.numpy(), head_dim, base=theta)
    close_to_float32_code(cos, theirs_cos.numpy(), 8191)
    close_to_float32_code(sin, theirs_sin.numpy(), 8191)


# Scaled RoPE as the models' configs hold it. transformers computes in float32, so
# positions stay below 256, where its error is a few 1e-5 (the bound: 1e-4).
SCALED_LLAMA = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024},
    "llama3 (Llama 3.1)": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
        "rope_theta": 500000.0,
    },
    "old rope_scaling form": {"type": "linear", "factor": 2.0},
}


@pytest.mark.parametrize("name", list(SCALED_LLAMA))
def test_transformers_llama_scaled_rotary_embedding(torch, name):
    llama = require("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    params = dict(SCALED_LLAMA[name])
    config = LlamaConfig(
        hidden_size=512,
        num_attention_heads=4,
        max_position_embeddings=8192,
        rope_parameters=dict(params),
    )
    rotary = llama.LlamaRotaryEmbedding(config)
    position_ids = torch.tensor([[0, 1, 2, 100, 200, 255]])
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 6, 128), position_ids)
    cos, sin = cpe.rope_cos_sin(
        position_ids.numpy(), 128, rope_parameters=params, max_position_embeddings=8192
    )
    np.testing.assert_allclose(cos, theirs_cos.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin.numpy(), rtol=0, atol=1e-4)
    inv_freq, factor = cpe.rope_frequencies(
        128, rope_parameters=params, max_position_embeddings=8192
    )
    np.testing.assert_allclose(inv_freq, rotary.inv_freq.double().numpy(), rtol=2.4e-7)
    assert factor == pytest.approx(rotary.attention_scaling, rel=1e-12, abs=0)


def test_transformers_dynamic_beyond_max_position_embeddings(torch):
    llama = require("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    params = {"rope_type": "dynamic", "factor": 2.0}
    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=64,
        rope_parameters=dict(params),
    )
    rotary = llama.LlamaRotaryEmbedding(config)
    position_ids = torch.arange(200)[None]  # seq_len 200 > 64: a new base
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 200, 64), position_ids)
    cos, sin = cpe.rope_cos_sin(200, 64, rope_parameters=params, max_position_embeddings=64)
    np.testing.assert_allclose(cos, theirs_cos[0].numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin[0].numpy(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("seq", [100, 5000])
def test_transformers_phi3_longrope(torch, seq):
    phi3 = require("transformers.models.phi3.modeling_phi3")
    from transformers import Phi3Config

    rng = np.random.default_rng(3)
    params = {
        "rope_type": "longrope",
        "short_factor": list(1 + rng.random(16)),
        "long_factor": list(1 + 8 * rng.random(16)),
        "original_max_position_embeddings": 4096,
    }
    config = Phi3Config(
        hidden_size=128,
        num_attention_heads=4,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_parameters=dict(params),
    )
    rotary = phi3.Phi3RotaryEmbedding(config)
    position_ids = torch.tensor([[0, 1, 50, 255, seq - 1]])
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 5, 32), position_ids)
    # positions above 255 only choose the factors here: compare the low ones.
    cos, sin = cpe.rope_cos_sin(
        position_ids.numpy(), 32, rope_parameters=params, max_position_embeddings=131072
    )
    np.testing.assert_allclose(cos[..., :4, :], theirs_cos.numpy()[..., :4, :], rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin[..., :4, :], theirs_sin.numpy()[..., :4, :], rtol=0, atol=1e-4)
    exact = cpe.rope_cos_sin(
        position_ids.numpy(),
        32,
        rope_parameters=params,
        max_position_embeddings=131072,
        dtype=np.float64,
    )
    np.testing.assert_allclose(
        exact[0][0, -1], theirs_cos.numpy()[0, -1], rtol=0, atol=2.4e-7 * seq * 4
    )
    # (after the call, the module holds the frequencies of the length it has seen)
    inv_freq, factor = cpe.rope_frequencies(
        32, rope_parameters=params, max_position_embeddings=131072, seq_len=seq
    )
    np.testing.assert_allclose(inv_freq, rotary.inv_freq.double().numpy(), rtol=2.4e-7)
    assert factor == pytest.approx(rotary.attention_scaling, rel=1e-12, abs=0)


def test_transformers_deepseek_v3_yarn(torch):
    deepseek = require("transformers.models.deepseek_v3.modeling_deepseek_v3")
    from transformers import DeepseekV3Config

    # DeepSeek-V3's own rope_scaling (its qk_rope_head_dim is 64).
    params = {
        "type": "yarn",
        "factor": 40,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    }
    config = DeepseekV3Config(
        hidden_size=256,
        num_attention_heads=4,
        qk_rope_head_dim=64,
        max_position_embeddings=163840,
        rope_parameters=dict(params),
        rope_theta=10000.0,
    )
    rotary = deepseek.DeepseekV3RotaryEmbedding(config)
    position_ids = torch.tensor([[0, 1, 7, 128, 255]])
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 5, 64), position_ids)
    cos, sin = cpe.rope_cos_sin(
        position_ids.numpy(), 64, rope_parameters=params, max_position_embeddings=163840
    )
    np.testing.assert_allclose(cos, theirs_cos.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin.numpy(), rtol=0, atol=1e-4)
    inv_freq, factor = cpe.rope_frequencies(
        64, rope_parameters=params, max_position_embeddings=163840
    )
    np.testing.assert_allclose(inv_freq, rotary.inv_freq.double().numpy(), rtol=2.4e-7)
    assert factor == pytest.approx(rotary.attention_scaling, rel=1e-12, abs=0)


def test_transformers_float32_tables_lose_long_positions_and_cpe_does_not(torch):
    # The premise, measured on the real module: float32 angles p * inv_freq
    # lose the position at long context; cpe's float32 tables stay within half a
    # float32 ulp (test_rope_scaling checks them against mpmath).
    llama = require("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    params = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = LlamaConfig(
        hidden_size=512, num_attention_heads=4, max_position_embeddings=131072,
        rope_parameters=dict(params),
    )  # fmt: skip
    rotary = llama.LlamaRotaryEmbedding(config)
    ids = torch.tensor([[131071, 999999]])
    theirs_cos, _ = rotary(torch.zeros(1, 2, 128), ids)
    kwargs = {"rope_parameters": params, "max_position_embeddings": 131072}
    exact_cos, _ = cpe.rope_cos_sin(ids.numpy(), 128, **kwargs)
    cos32, _ = cpe.rope_cos_sin(ids.numpy(), 128, dtype=np.float32, **kwargs)
    theirs_error = np.abs(theirs_cos.numpy() - exact_cos).max(axis=-1)[0]
    assert theirs_error[0] > 1e-3  # 3.4e-3 at 131071
    assert theirs_error[1] > 1e-2  # 4.7e-2 at 999999
    assert np.abs(cos32 - exact_cos).max() <= 3.0e-8


@pytest.mark.parametrize("name", ["float64", "float32", "float16"])
def test_torch_dtypes_name_the_numpy_dtypes(torch, name):
    as_torch, as_numpy = getattr(torch, name), np.dtype(name)
    table = cpe.positional_encoding_table(5, 8, start=3, dtype=as_torch)
    assert table.dtype == as_numpy
    np.testing.assert_array_equal(table, cpe.positional_encoding_table(5, 8, start=3, dtype=name))
    cos, _ = cpe.rope_cos_sin(4, 8, dtype=as_torch)
    assert cos.dtype == as_numpy
    assert cpe.sincos_2d(2, 2, 8, dtype=as_torch).dtype == as_numpy
    with pytest.raises(
        TypeError, match=r"dtype must be float64, float32, float16 or bfloat16, got torch\.int64"
    ):
        cpe.positional_encoding(3, 8, dtype=torch.int64)


def _calls(torch):
    """(call, the shape of its output) for every public function, float32."""
    f32 = np.float32
    return [
        (lambda out: cpe.positional_encoding(7, 16, dtype=f32, out=out), (16,)),
        (lambda out: cpe.positional_encoding(np.arange(6), 16, dtype=f32, out=out), (6, 16)),
        (lambda out: cpe.positional_encoding_table(6, 16, start=9, dtype=f32, out=out), (6, 16)),
        (lambda out: cpe.sincos_2d(2, 3, 16, dtype=f32, out=out), (6, 16)),
        (lambda out: cpe.sincos_3d(2, 1, 3, 32, dtype=f32, out=out), (2, 3, 32)),
    ]


def test_torch_tensors_as_out_are_filled_and_returned(torch):
    for call, shape in _calls(torch):
        tensor = torch.full(shape, 7.0)
        assert call(tensor) is tensor
        np.testing.assert_array_equal(tensor.numpy(), call(None))
    cos, sin = torch.empty(5, 8), torch.empty(5, 8)
    got = cpe.rope_cos_sin(5, 8, start=3, dtype=np.float32, out=(cos, sin))
    assert got[0] is cos
    assert got[1] is sin
    want = cpe.rope_cos_sin(5, 8, start=3, dtype=np.float32)
    np.testing.assert_array_equal(sin.numpy(), want[1])
    ids = torch.tensor([[3, 1], [4, 1], [5, 9]])
    multimodal = (torch.empty(2, 8, dtype=torch.float64), torch.empty(2, 8, dtype=torch.float64))
    params = {"mrope_section": [2, 1, 1]}
    assert cpe.rope_cos_sin(ids, 8, rope_parameters=params, out=multimodal) is multimodal
    np.testing.assert_array_equal(
        multimodal[0].numpy(), cpe.rope_cos_sin(ids.numpy(), 8, rope_parameters=params)[0]
    )


def test_torch_tensors_that_cannot_be_written_are_refused_untouched(torch):
    require("ml_dtypes")  # a bfloat16 tensor's dtype is read as ml_dtypes' bfloat16
    call, shape = _calls(torch)[2]
    wrong = {
        "requires grad": (torch.full(shape, 7.0, requires_grad=True), TypeError, "require grad"),
        "not contiguous": (torch.full(shape[::-1], 7.0).t(), ValueError, "C-contiguous"),
        "other dtype": (torch.full(shape, 7.0, dtype=torch.float64), TypeError, "dtype float32"),
        "other shape": (torch.full((3, 16), 7.0), ValueError, "shape (6, 16)"),
        "bfloat16": (torch.full(shape, 7.0, dtype=torch.bfloat16), TypeError, "dtype float32"),
    }
    for name, (tensor, error, text) in wrong.items():
        with pytest.raises(error, match=re.escape(text)):
            call(tensor)
        assert bool((tensor.detach() == 7.0).all()), name


def test_a_tensor_whose_dlpack_export_is_other_memory_is_refused_untouched(torch):
    # A tensor subclass that exports another tensor's memory: cpe would fill (or
    # read) memory other than the tensor's. Its data_ptr() says where it starts.
    elsewhere = torch.full((4, 8), 5.0, dtype=torch.float64)

    class Elsewhere(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            return elsewhere.__dlpack__(*args, **kwargs)

    tensor = torch.full((4, 8), 7.0, dtype=torch.float64).as_subclass(Elsewhere)
    calls = [
        lambda: cpe.positional_encoding_table(4, 8, out=tensor),
        lambda: cpe.apply_rope(tensor, out=tensor),
        lambda: cpe.apply_rope(tensor),
        lambda: cpe.add_positional_encoding(np.ones((4, 8)), out=tensor),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="DLPack export is not its own memory"):
            call()
    assert bool((tensor == 7.0).all())
    assert bool((elsewhere == 5.0).all())


def test_unversioned_dlpack_exports_are_refused_untouched(torch):
    # NumPy shares an unversioned (pre-1.0) DLPack export read-only, as it cannot
    # say whether the memory may be written (older torch exports only those).
    class Unversioned:
        def __init__(self, tensor):
            self.tensor = tensor

        def __dlpack__(self, stream=None):
            return torch.utils.dlpack.to_dlpack(self.tensor)

        def __dlpack_device__(self):
            return self.tensor.__dlpack_device__()

    tensor = torch.full((4, 8), 7.0, dtype=torch.float64)
    if np.from_dlpack(Unversioned(tensor)).flags.writeable:
        pytest.skip(f"NumPy {np.__version__} shares unversioned DLPack writable")
    with pytest.raises(TypeError, match=r"shares the memory of (this Unversioned|every DLPack)"):
        cpe.positional_encoding_table(4, 8, out=Unversioned(tensor))
    assert bool((tensor == 7.0).all())


def test_autograd_sees_what_cpe_writes_into_a_tensor(torch):
    # A tensor that autograd saved for the backward pass, then refilled by cpe:
    # as after an in-place torch operation, backward refuses the stale values.
    weights = torch.ones(5, 8, dtype=torch.float64, requires_grad=True)
    saved = torch.zeros(5, 8, dtype=torch.float64)
    loss = (weights * saved).sum()
    cpe.positional_encoding(np.arange(5), 8, out=saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    cos, sin = torch.zeros(3, 8), torch.zeros(3, 8)
    loss = (weights[:3].float() * sin).sum()
    cpe.rope_cos_sin(3, 8, dtype=np.float32, out=(cos, sin))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_lazily_negated_views_are_refused_untouched(torch):
    negated = torch.zeros(1, dtype=torch.complex128).conj().imag  # reads as -(its memory)
    assert negated.is_neg()
    with pytest.raises(TypeError, match="lazily negated or conjugated view"):
        cpe.positional_encoding(1.0, 1, out=negated)
    assert float(negated[0]) == 0.0


def test_lazily_negated_bfloat16_views_are_refused_untouched(torch):
    # bfloat16 is shared as its int16 bits, a view torch refuses for these views
    # with an error of its own: cpe's comes first, for inputs and outputs alike.
    neg_view = getattr(torch, "_neg_view", None)  # (bfloat16 has no complex to .conj().imag)
    if neg_view is None:
        pytest.skip(f"torch {torch.__version__} has no _neg_view")
    memory = torch.full((2, 3, 8), 0.5, dtype=torch.bfloat16)
    negated = neg_view(memory)  # reads as -(its memory)
    assert negated.is_neg()
    calls = [
        lambda: cpe.apply_rope(negated),
        lambda: cpe.apply_rope(negated, out=negated),
        lambda: cpe.add_positional_encoding(negated, out=negated),
        lambda: cpe.positional_encoding_table(3, 8, dtype=torch.bfloat16, out=negated[0]),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="lazily negated or conjugated view"):
            call()
    assert bool((memory == 0.5).all())


def test_frequencies_that_require_grad_are_read_as_values(torch):
    inv_freq = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64, requires_grad=True)
    np.testing.assert_array_equal(
        cpe.rope_cos_sin(4, 8, inv_freq=inv_freq)[1],
        cpe.rope_cos_sin(4, 8, inv_freq=[1.0, 0.5, 0.25, 0.125])[1],
    )


def test_position_tensors_that_require_grad_are_read_as_values(torch):
    ids = torch.tensor([[0.0, 5.0, 17.5]], requires_grad=True)
    np.testing.assert_array_equal(
        cpe.positional_encoding(ids, 8), cpe.positional_encoding([[0.0, 5.0, 17.5]], 8)
    )
    cos, _ = cpe.rope_cos_sin(
        ids, 8, rope_parameters={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8
    )
    want, _ = cpe.rope_cos_sin(
        ids.detach().numpy(), 8, rope_parameters={"rope_type": "dynamic", "factor": 2.0},
        max_position_embeddings=8,
    )  # fmt: skip
    np.testing.assert_array_equal(cos, want)
    assert ids.grad is None


# ---- multimodal and axial RoPE ----


def _same_frequencies(rotary, head_dim, params):
    """The module's frequencies within float32 rounding, its factor to 1e-12."""
    inv_freq, factor = cpe.rope_frequencies(head_dim, rope_parameters=params)
    np.testing.assert_allclose(inv_freq, rotary.inv_freq.double().numpy(), rtol=2.4e-7)
    assert factor == pytest.approx(rotary.attention_scaling, rel=1e-12, abs=0)


def _thw_ids(torch, batch, seq, seed):
    """Position ids (3, batch, seq) as Qwen-VL's get_rope_index gives them: text
    positions on every axis, then a grid of image tokens."""
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.integers(0, 250, (3, batch, seq)))


@pytest.mark.parametrize("theta", [10000.0, 1000000.0])
def test_transformers_qwen2_vl_multimodal_rotary_embedding(torch, theta):
    qwen2_vl = require("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    params = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": theta}
    config = Qwen2VLTextConfig(hidden_size=512, num_attention_heads=4, rope_parameters=params)
    rotary = qwen2_vl.Qwen2VLRotaryEmbedding(config)
    ids = _thw_ids(torch, 2, 9, seed=1)
    theirs_cos, theirs_sin = rotary(torch.zeros(2, 9, 128), ids)
    cos, sin = cpe.rope_cos_sin(ids.numpy(), 128, rope_parameters=config.rope_parameters)
    assert cos.shape == tuple(theirs_cos.shape) == (2, 9, 128)
    np.testing.assert_allclose(cos, theirs_cos.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin.numpy(), rtol=0, atol=1e-4)
    _same_frequencies(rotary, 128, config.rope_parameters)


def test_transformers_qwen2_vl_text_ids_of_one_sequence(torch):
    # transformers takes text ids of shape (batch, seq) and expands them to the
    # three axes; cpe takes those of one sequence, (1, seq), as they are.
    qwen2_vl = require("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    params = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1e6}
    config = Qwen2VLTextConfig(hidden_size=512, num_attention_heads=4, rope_parameters=params)
    rotary = qwen2_vl.Qwen2VLRotaryEmbedding(config)
    ids = torch.arange(40, 77)[None]  # (1, seq)
    theirs_cos, theirs_sin = rotary(torch.zeros(1, 37, 128), ids)
    cos, sin = cpe.rope_cos_sin(ids.numpy(), 128, rope_parameters=config.rope_parameters)
    assert cos.shape == tuple(theirs_cos.shape[1:]) == (37, 128)
    np.testing.assert_allclose(cos, theirs_cos.numpy()[0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin.numpy()[0], rtol=0, atol=1e-4)


def test_transformers_qwen3_vl_interleaved_multimodal_rotary_embedding(torch):
    qwen3_vl = require("transformers.models.qwen3_vl.modeling_qwen3_vl")
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

    params = {
        "rope_type": "default",
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
        "rope_theta": 5000000.0,
    }
    config = Qwen3VLTextConfig(
        hidden_size=512, num_attention_heads=4, head_dim=128, rope_parameters=params
    )
    rotary = qwen3_vl.Qwen3VLTextRotaryEmbedding(config)
    ids = _thw_ids(torch, 2, 9, seed=2)
    theirs_cos, theirs_sin = rotary(torch.zeros(2, 9, 128), ids)
    cos, sin = cpe.rope_cos_sin(ids.numpy(), 128, rope_parameters=config.rope_parameters)
    np.testing.assert_allclose(cos, theirs_cos.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(sin, theirs_sin.numpy(), rtol=0, atol=1e-4)
    _same_frequencies(rotary, 128, config.rope_parameters)
    # The sections' layout gives other tables: the interleaving is read.
    runs = {**params, "mrope_interleaved": False}
    sections = cpe.rope_cos_sin(ids.numpy(), 128, rope_parameters=runs)
    assert np.abs(sections[1] - theirs_sin.numpy()).max() > 1e-2


def test_diffusers_flux_pos_embed(torch):
    flux = require("diffusers.models.transformers.transformer_flux")
    embed = flux.FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])
    # Flux's ids: (tokens, 3), text tokens at 0, image tokens at (0, row, column).
    rows, columns = np.meshgrid(np.arange(12), np.arange(10), indexing="ij")
    image = np.stack([np.zeros(120, int), rows.ravel(), columns.ravel()], axis=-1)
    ids = np.concatenate([np.zeros((8, 3), int), image])
    theirs_cos, theirs_sin = embed(torch.tensor(ids))
    cos, sin = cpe.rope_cos_sin(
        ids, 128, axes_dim=(16, 56, 56), layout="interleaved", dtype=np.float32
    )
    # diffusers computes in float64 and rounds to float32: a few float32 ulp.
    np.testing.assert_allclose(cos, theirs_cos.numpy(), rtol=0, atol=1.2e-7)
    np.testing.assert_allclose(sin, theirs_sin.numpy(), rtol=0, atol=1.2e-7)


def vit_pytorch_simple_vit(torch):
    """vit-pytorch's simple_vit.py, loaded alone (the package imports torchvision)."""
    import importlib.util

    require("einops")
    spec = importlib.util.find_spec("vit_pytorch")
    if spec is None or not spec.submodule_search_locations:
        require("vit_pytorch")  # skips, or fails when interop is required
    location = next(iter(spec.submodule_search_locations)) + "/simple_vit.py"
    module_spec = importlib.util.spec_from_file_location("_vit_pytorch_simple_vit", location)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("h", "w", "dim"), [(4, 4, 32), (7, 3, 64), (14, 14, 384)])
def test_vit_pytorch_posemb_sincos_2d(torch, h, w, dim):
    simple_vit = vit_pytorch_simple_vit(torch)
    theirs = simple_vit.posemb_sincos_2d(h, w, dim, dtype=torch.float64).numpy()
    close_to_float32_code(cpe.sincos_2d(h, w, dim, freq_shift=1), theirs, max(h, w))


def test_transformers_gptj_interleaved(torch):
    gptj = require("transformers.models.gptj.modeling_gptj")
    theirs = gptj.create_sinusoidal_positions(512, 64)
    sin_half, cos_half = torch.chunk(theirs, 2, dim=-1)
    cos, sin = cpe.rope_cos_sin(512, 64, layout="interleaved")
    close_to_float32_code(cos, torch.repeat_interleave(cos_half, 2, dim=-1).numpy(), 512)
    close_to_float32_code(sin, torch.repeat_interleave(sin_half, 2, dim=-1).numpy(), 512)


def run_readme_examples(kind):
    """The README's examples in ```python-<kind> blocks, as doctests."""
    import doctest
    import pathlib

    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    if not readme.exists():
        pytest.skip("README.md is not beside the tests (installed elsewhere)")
    require("ml_dtypes")  # for the bfloat16 examples
    blocks = re.findall(rf"```python-{kind}\n(.*?)```", readme.read_text(), flags=re.DOTALL)
    assert blocks
    test = doctest.DocTestParser().get_doctest(
        "\n".join(blocks), {"cpe": cpe, "np": np}, "README", "README.md", 0
    )
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0
    assert runner.tries > 0


def test_readme_torch_examples(torch):
    run_readme_examples("torch")


def test_readme_transformers_examples(torch):
    # A tiny random Llama whose logits come closer to the float64 reference with
    # cpe's tables than with its own.
    require("transformers")
    run_readme_examples("transformers")


# ---- bfloat16 tensors (tests/test_bfloat16.py has the NumPy side) ----


def test_torch_bfloat16_tensors_are_filled_directly(torch):
    bf16 = np.dtype(require("ml_dtypes").bfloat16)
    for dtype in (torch.bfloat16, "bfloat16"):
        tensor = torch.full((6, 16), 7.0, dtype=torch.bfloat16)
        assert cpe.positional_encoding_table(6, 16, start=9, dtype=dtype, out=tensor) is tensor
        want = cpe.positional_encoding_table(6, 16, start=9, dtype=bf16)
        np.testing.assert_array_equal(tensor.view(torch.int16).numpy(), want.view(np.int16))
    cos, sin = torch.empty(5, 8, dtype=torch.bfloat16), torch.empty(5, 8, dtype=torch.bfloat16)
    assert cpe.rope_cos_sin(5, 8, start=3, dtype=torch.bfloat16, out=(cos, sin))[1] is sin
    want_sin = cpe.rope_cos_sin(5, 8, start=3, dtype=bf16)[1]
    np.testing.assert_array_equal(sin.view(torch.int16).numpy(), want_sin.view(np.int16))
    # The wrong ones are refused before anything is written.
    wrong = torch.full((16, 6), 7.0, dtype=torch.bfloat16).t()
    with pytest.raises(ValueError, match="C-contiguous"):
        cpe.positional_encoding_table(6, 16, dtype=torch.bfloat16, out=wrong)
    with pytest.raises(TypeError, match=r"dtype float64 .*got bfloat16"):
        cpe.positional_encoding_table(16, 6, dtype=np.float64, out=wrong.t())
    assert bool((wrong == 7.0).all())
    # Without dtype=, the tensor's own.
    assert cpe.positional_encoding_table(16, 6, out=wrong.t()) is not None
    want = cpe.positional_encoding_table(16, 6, dtype=bf16)
    np.testing.assert_array_equal(
        wrong.t().contiguous().view(torch.int16).numpy(), want.view(np.int16)
    )


def test_torch_bfloat16_positions_are_read_as_values(torch):
    require("ml_dtypes")
    ids = torch.tensor([[0.0, 3.5], [1024.0, -7.0]], dtype=torch.bfloat16, requires_grad=True)
    want = cpe.positional_encoding(ids.detach().float().numpy(), 8)
    np.testing.assert_array_equal(cpe.positional_encoding(ids, 8), want)
    cos, _ = cpe.rope_cos_sin(ids, 8)
    np.testing.assert_array_equal(cos, cpe.rope_cos_sin(ids.detach().float().numpy(), 8)[0])


# ---- JAX ----


@pytest.fixture(scope="module")
def jax():
    return require("jax")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="np.empty's alignment elsewhere")
def test_jax_shares_large_outputs_through_dlpack(jax):
    # XLA shares CPU memory that starts on a 64-byte boundary, and copies any
    # other: cpe's new outputs of 16 MiB and more start on one.
    for arrays in (
        [cpe.positional_encoding_table(8192, 512, dtype=np.float32)],
        [cpe.positional_encoding(np.arange(2**15), 128)],
        [cpe.sincos_2d(64, 64, 1024)],
        list(cpe.rope_cos_sin(16384, 128, dtype=np.float32)),
        list(cpe.rope_cos_sin(2**21 + 1, 2, dtype=np.float32)),  # sin not 16 MiB after cos
    ):
        for array in arrays:
            with jax.enable_x64(True):  # else float64 is made float32: a copy
                shared = jax.dlpack.from_dlpack(array)
                assert shared.unsafe_buffer_pointer() == array.ctypes.data
                assert np.asarray(shared).tobytes() == array.tobytes()


def test_jax_without_x64_makes_float64_tables_the_float32_ones(jax):
    # The pitfall: without x64, JAX turns float64 into float32 without a word.
    # cpe's float32 table holds those very bits, without the float64 pass.
    table = cpe.positional_encoding_table(300, 64, start=12345)
    with jax.enable_x64(False):
        converted = jax.numpy.asarray(table)
    assert converted.dtype == np.float32
    direct = cpe.positional_encoding_table(300, 64, start=12345, dtype=np.float32)
    assert np.asarray(converted).tobytes() == direct.tobytes()
    with jax.enable_x64(True):
        kept = jax.numpy.asarray(table)
        assert kept.dtype == np.float64
        assert np.asarray(kept).tobytes() == table.tobytes()


def test_jax_dtypes_and_positions(jax):
    jnp = jax.numpy
    for dtype in (jnp.float32, jnp.float16, jnp.float64):
        want = cpe.positional_encoding_table(20, 16, start=3, dtype=np.dtype(dtype))
        got = cpe.positional_encoding_table(20, 16, start=3, dtype=dtype)
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()
    require("ml_dtypes")
    table = cpe.positional_encoding_table(20, 16, start=3, dtype=jnp.bfloat16)
    assert jnp.asarray(table).dtype == jnp.bfloat16
    assert (
        table.tobytes()
        == cpe.positional_encoding_table(20, 16, start=3, dtype="bfloat16").tobytes()
    )
    ids = jnp.array([[0, 5], [70000, -3]])
    np.testing.assert_array_equal(
        cpe.positional_encoding(ids, 8), cpe.positional_encoding(np.asarray(ids), 8)
    )
    half = jnp.array([0.0, 2.5, 1024.0], dtype=jnp.bfloat16)
    np.testing.assert_array_equal(
        cpe.rope_cos_sin(half, 8)[0], cpe.rope_cos_sin(np.asarray(half, np.float64), 8)[0]
    )


def test_jax_arrays_are_refused_as_out(jax):
    # They cannot be changed: NumPy shares their memory read-only.
    out = jax.numpy.full((4, 8), 7.0)
    with pytest.raises(TypeError, match="out must be writeable, but NumPy shares the memory"):
        cpe.positional_encoding_table(4, 8, dtype=out.dtype, out=out)
    assert bool((out == 7.0).all())


def test_readme_jax_examples(jax):
    run_readme_examples("jax")


# ---- encodings applied (apply_rope), against the packages users run ----
# (tests/test_apply.py checks the rest without them)


def test_torch_tensors_are_rotated_in_place():
    torch = require("torch")
    q = torch.randn(1, 4, 9, 32)
    k = torch.randn(1, 2, 9, 32, dtype=torch.float64)
    want = cpe.apply_rope((q.numpy().copy(), k.numpy().copy()), start=40)
    versions = q._version, k._version
    got = cpe.apply_rope((q, k), start=40, out=(q, k))
    assert got[0] is q
    assert got[1] is k
    assert q._version > versions[0]
    assert k._version > versions[1]
    np.testing.assert_array_equal(q.numpy(), want[0])
    np.testing.assert_array_equal(k.numpy(), want[1])


def test_torch_bfloat16_in_place():
    torch = require("torch")
    require("ml_dtypes")
    x = torch.randn(2, 5, 16).to(torch.bfloat16)
    wide = cpe.apply_rope(x.double().numpy(), start=7)
    cpe.apply_rope(x, start=7, out=x)
    from test_bfloat16 import nearest_bfloat16

    np.testing.assert_array_equal(
        x.double().numpy().ravel(), [nearest_bfloat16(v) for v in wide.ravel().tolist()]
    )


def test_a_tensor_that_requires_grad_is_read_but_not_written():
    torch = require("torch")
    x = torch.randn(3, 8, requires_grad=True)
    np.testing.assert_array_equal(cpe.apply_rope(x), cpe.apply_rope(x.detach().numpy()))
    with pytest.raises(TypeError, match=r"out \(x itself\) must not require grad"):
        cpe.apply_rope(x, out=x)


def test_an_inference_tensor_is_written_only_in_inference_mode(torch):
    # torch refuses an in-place update of an inference tensor outside inference
    # mode; so does cpe.
    with torch.inference_mode():
        tensor = torch.full((4, 8), 7.0, dtype=torch.float64)
    with pytest.raises(TypeError, match="out is an inference tensor"):
        cpe.positional_encoding_table(4, 8, out=tensor)
    assert bool((tensor == 7.0).all())
    with torch.inference_mode():
        assert cpe.positional_encoding_table(4, 8, out=tensor) is tensor
    np.testing.assert_array_equal(tensor.numpy(), cpe.positional_encoding_table(4, 8))
    # Rotated or added to in place (x itself as out), the same.
    for call in (cpe.apply_rope, cpe.add_positional_encoding):
        with torch.inference_mode():
            x = torch.full((3, 4, 8), 7.0, dtype=torch.float64)
        with pytest.raises(TypeError, match=r"out \(x itself\) is an inference tensor"):
            call(x, out=x)
        assert bool((x == 7.0).all())
        with torch.inference_mode():
            assert call(x, out=x) is x
        np.testing.assert_array_equal(x.numpy(), call(np.full((3, 4, 8), 7.0)))


def test_a_tensor_is_shared_through_dlpack_where_its_numpy_fails(torch, monkeypatch):
    # torch built without NumPy (or too old for NumPy 2) cannot make a tensor's
    # NumPy array, while DLPack still shares its memory.
    x = torch.full((3, 4, 8), 7.0, dtype=torch.float64)
    want = cpe.apply_rope(np.full((3, 4, 8), 7.0))

    def unavailable(self, *args, **kwargs):
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch.Tensor, "numpy", unavailable)
    np.testing.assert_array_equal(np.from_dlpack(cpe.apply_rope(x)), want)
    assert cpe.apply_rope(x, out=x) is x
    np.testing.assert_array_equal(np.from_dlpack(x), want)


def test_a_parameter_is_written_with_gradients_off_as_torch_writes_it():
    # torch refuses an in-place write into a leaf that requires grad, except under
    # torch.no_grad() (or inference mode): so does cpe. An nn.Parameter filled
    # with a table there is a common way to initialize a positional embedding.
    torch = require("torch")
    weight = torch.nn.Parameter(torch.zeros(16, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="out must not require grad"):
        cpe.positional_encoding_table(16, 8, out=weight)
    assert bool((weight == 0).all())
    version = weight._version
    with torch.no_grad():
        assert cpe.positional_encoding_table(16, 8, out=weight) is weight
        assert cpe.apply_rope(weight, out=weight) is weight
    assert weight.requires_grad
    assert weight._version > version  # (as an in-place torch operation bumps it)
    table = cpe.positional_encoding_table(16, 8)
    np.testing.assert_array_equal(weight.detach().numpy(), cpe.apply_rope(table))
    with torch.inference_mode():
        cpe.positional_encoding_table(16, 8, out=weight)
    np.testing.assert_array_equal(weight.detach().numpy(), table)


def test_transformers_apply_rotary_pos_emb_with_cpe_tables():
    torch = require("torch")
    llama = require("transformers.models.llama.modeling_llama")
    q = torch.randn(2, 4, 30, 64, dtype=torch.float64)
    k = torch.randn(2, 2, 30, 64, dtype=torch.float64)
    ids = np.stack([np.arange(30), np.arange(1000, 1030)])
    cos, sin = cpe.rope_cos_sin(ids, 64, rope_parameters=LLAMA3)
    want = llama.apply_rotary_pos_emb(q, k, torch.from_numpy(cos), torch.from_numpy(sin))
    got = cpe.apply_rope((q.numpy(), k.numpy()), ids[:, None], rope_parameters=LLAMA3)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=4e-16 * 8)


def test_transformers_multimodal_rotation_with_cpe_tables():
    # transformers' Qwen2-VL rotary module joins the sections' tables into one and
    # applies it with apply_rotary_pos_emb: cpe's multimodal tables fed to it
    torch = require("torch")
    qwen = require("transformers.models.qwen2_vl.modeling_qwen2_vl")
    params = {"rope_type": "default", "mrope_section": [4, 6, 6]}
    thw = RNG.integers(0, 100, size=(3, 2, 13))
    q = torch.randn(2, 3, 13, 32, dtype=torch.float64)
    k = torch.randn(2, 1, 13, 32, dtype=torch.float64)
    cos, sin = cpe.rope_cos_sin(thw, 32, rope_parameters=params)
    want = qwen.apply_rotary_pos_emb(q, k, torch.from_numpy(cos), torch.from_numpy(sin))
    got = cpe.apply_rope((q.numpy(), k.numpy()), thw[:, :, None], rope_parameters=params)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=4e-15)


def test_diffusers_flux_rotation_with_cpe_tables():
    torch = require("torch")
    embeddings = require("diffusers.models.embeddings")
    ids = RNG.integers(0, 64, size=(24, 3))
    # (batch, heads, tokens, head_dim) float32: diffusers computes x.float() times
    # the float64 tables in float64 and rounds the result to float32, as cpe does
    x = torch.randn(1, 2, 24, 32)
    cos, sin = cpe.rope_cos_sin(ids, 32, axes_dim=(8, 12, 12), layout="interleaved")
    want = embeddings.apply_rotary_emb(
        x, (torch.from_numpy(cos), torch.from_numpy(sin)), use_real=True, use_real_unbind_dim=-1
    )
    got = cpe.apply_rope(x.numpy(), ids, axes_dim=(8, 12, 12), layout="interleaved")
    np.testing.assert_array_equal(got, want.numpy())


def test_gemma3_rotary_embedding_with_its_layer_types():
    torch = require("torch")
    transformers = require("transformers")
    gemma = require("transformers.models.gemma3.modeling_gemma3")
    config = transformers.Gemma3TextConfig(
        hidden_size=64, num_attention_heads=2, head_dim=32, rope_parameters=dict(GEMMA3)
    )
    rotary = gemma.Gemma3RotaryEmbedding(config)
    ids = torch.arange(2000, 2016)[None]
    x = torch.zeros((), dtype=torch.float32)
    for layer_type in GEMMA3:
        cos, sin = rotary(x, ids, layer_type=layer_type)
        want = cpe.rope_cos_sin(ids.numpy(), 32, rope_parameters=config.rope_parameters,
                                layer_type=layer_type, dtype=np.float32)  # fmt: skip
        # transformers' float32 angles at positions near 2000: ~1e-4 off
        np.testing.assert_allclose(cos.numpy(), want[0], rtol=0, atol=5e-4)
        np.testing.assert_allclose(sin.numpy(), want[1], rtol=0, atol=5e-4)
