"""Plain NumPy oracle of every public function: slow, obvious, for the tests.

It follows the definition literally in float64 and so carries NumPy's usual
rounding (about 1e-16 * |p * w_j|); accuracy is checked against mpmath instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cpe._conventions import CONVENTIONS
from cpe.benchmark.usual_numpy import mae_2d

__all__ = ["mae_2d"]  # MAE's code, which the benchmark also runs


def frequencies(
    D: int, base: float = 10000.0, freq_shift: float | None = None
) -> npt.NDArray[np.float64]:
    """``w_j = base ** (-2j / D)`` for ``j = 0 ... ceil(D/2) - 1``; with a
    ``freq_shift`` s, ``w_j = base ** (-j / (D//2 - s))`` for ``j < D//2``."""
    if freq_shift is None:
        j = np.arange((D + 1) // 2, dtype=np.float64)
        return np.asarray(base ** (-2.0 * j / D), dtype=np.float64)
    n_freq = D // 2
    # With one frequency (D = 2, 3), w_0 = base ** 0 whatever the shift.
    den = n_freq - freq_shift if n_freq > 1 else 1.0
    return np.asarray(base ** (-np.arange(n_freq) / den), dtype=np.float64)


def positional_encoding(
    position: npt.ArrayLike,
    D: int,
    *,
    base: float = 10000.0,
    layout: str | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: str | None = None,
) -> npt.NDArray[np.float64]:
    """The definition: ``encoding`` with the layout and shift of ``convention`` if given.

    Without keywords, column by column: sin at ``2j``, cos at ``2j + 1``.
    """
    if convention is not None:
        preset = CONVENTIONS[convention]
        layout, freq_shift = preset.layout, preset.freq_shift
    return encoding(
        position,
        D,
        base=base,
        layout="interleaved" if layout is None else layout,
        freq_shift=freq_shift,
        scale=scale,
    )


def positional_encoding_table(
    n: int,
    D: int,
    *,
    start: int = 0,
    base: float = 10000.0,
    layout: str | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: str | None = None,
) -> npt.NDArray[np.float64]:
    """Rows for positions ``start ... start + n - 1``."""
    return positional_encoding(
        np.arange(start, start + n),
        D,
        base=base,
        layout=layout,
        freq_shift=freq_shift,
        scale=scale,
        convention=convention,
    )


# ---- the conventions, each transcribed from its original code into NumPy ----


def paper_table(n_pos: int, dim: int) -> npt.NDArray[np.float64]:
    """HF DistilBERT/XLM ``create_sinusoidal_embeddings`` (the paper's formula)."""
    position_enc = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)]
    )
    out = np.zeros((n_pos, dim))
    out[:, 0::2] = np.sin(position_enc[:, 0::2])
    out[:, 1::2] = np.cos(position_enc[:, 1::2])
    return out


def marian_table(n_pos: int, dim: int) -> npt.NDArray[np.float64]:
    """HF Marian/Pegasus ``SinusoidalPositionalEmbedding._init_weight``."""
    position_enc = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)]
    )
    out = np.zeros((n_pos, dim))
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = np.sin(position_enc[:, 0::2])
    out[:, sentinel:] = np.cos(position_enc[:, 1::2])
    return out


def fairseq_table(num_embeddings: int, embedding_dim: int) -> npt.NDArray[np.float64]:
    """fairseq ``SinusoidalPositionalEmbedding.get_embedding`` (without padding_idx)."""
    half_dim = embedding_dim // 2
    step = np.log(10000) / (half_dim - 1)
    freqs = np.exp(np.arange(half_dim, dtype=np.float64) * -step)
    angles = np.arange(num_embeddings, dtype=np.float64)[:, None] * freqs[None, :]
    emb = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    if embedding_dim % 2 == 1:
        emb = np.concatenate([emb, np.zeros((num_embeddings, 1))], axis=1)
    return emb


def tensor2tensor_timing_signal(
    length: int,
    channels: int,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
    start_index: int = 0,
) -> npt.NDArray[np.float64]:
    """tensor2tensor ``get_timing_signal_1d`` (without the leading batch axis)."""
    position = np.arange(length, dtype=np.float64) + start_index
    num_timescales = channels // 2
    log_increment = np.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * np.exp(np.arange(num_timescales) * -log_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    signal = np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)
    return np.pad(signal, [[0, 0], [0, channels % 2]])


def whisper_sinusoids(
    length: int, channels: int, max_timescale: float = 10000
) -> npt.NDArray[np.float64]:
    """OpenAI Whisper ``sinusoids`` (channels must be even)."""
    log_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = np.exp(-log_increment * np.arange(channels // 2))
    scaled_time = np.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)


def diffusers_timestep_embedding(
    timesteps: npt.ArrayLike,
    embedding_dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1,
    scale: float = 1,
    max_period: float = 10000,
) -> npt.NDArray[np.float64]:
    """diffusers ``get_timestep_embedding`` for a 1-D array of timesteps."""
    t = np.asarray(timesteps, dtype=np.float64)
    half_dim = embedding_dim // 2
    exponent = -np.log(max_period) * np.arange(half_dim, dtype=np.float64)
    exponent = exponent / (half_dim - downscale_freq_shift)
    emb = t[:, None] * np.exp(exponent)[None, :]
    emb = scale * emb
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip_sin_to_cos:
        emb = np.concatenate([emb[:, half_dim:], emb[:, :half_dim]], axis=-1)
    if embedding_dim % 2 == 1:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb


def adm_timestep_embedding(
    timesteps: npt.ArrayLike, dim: int, max_period: float = 10000
) -> npt.NDArray[np.float64]:
    """guided-diffusion (ADM) ``timestep_embedding``, as in the Stable Diffusion UNet."""
    t = np.asarray(timesteps, dtype=np.float64)
    half = dim // 2
    freqs = np.exp(-np.log(max_period) * np.arange(half, dtype=np.float64) / half)
    args = t[:, None] * freqs[None]
    embedding = np.concatenate([np.cos(args), np.sin(args)], axis=-1)
    if dim % 2:
        embedding = np.concatenate([embedding, np.zeros_like(embedding[:, :1])], axis=-1)
    return embedding


def encoding(
    position: npt.ArrayLike,
    D: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    freq_shift: float | None = None,
    scale: float = 1.0,
) -> npt.NDArray[np.float64]:
    """Any layout and frequency choice, straight from the definitions in ``_conventions``."""
    p = np.asarray(position, dtype=np.float64)
    w = frequencies(D, base, freq_shift)
    n_freq = w.size
    angle = scale * p[..., None] * w
    sines, cosines = np.sin(angle), np.cos(angle[..., : D - n_freq])
    out = np.zeros((*p.shape, D))
    if layout == "interleaved":
        out[..., 0 : 2 * n_freq : 2] = sines
        out[..., 1 : 2 * cosines.shape[-1] : 2] = cosines
    elif layout == "sin_cos":
        out[..., :n_freq] = sines
        out[..., n_freq : n_freq + cosines.shape[-1]] = cosines
    else:
        out[..., : cosines.shape[-1]] = cosines
        out[..., cosines.shape[-1] : cosines.shape[-1] + n_freq] = sines
    return out


# ---- grids and rotary tables, transcribed from their originals ----


def _diffusers_1d(embed_dim: int, pos: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000**omega
    out = np.outer(pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _diffusers_2d_from_grid(
    embed_dim: int, grid: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    return np.concatenate(
        [_diffusers_1d(embed_dim // 2, grid[0]), _diffusers_1d(embed_dim // 2, grid[1])], axis=1
    )


def diffusers_2d(
    embed_dim: int,
    grid_size: tuple[int, int],
    cls_token: bool = False,
    extra_tokens: int = 0,
    interpolation_scale: float = 1.0,
    base_size: float = 16,
) -> npt.NDArray[np.float64]:
    """diffusers ``get_2d_sincos_pos_embed`` with ``grid_size = (h, w)``."""
    grid_h = (
        np.arange(grid_size[0], dtype=np.float64) / (grid_size[0] / base_size) / interpolation_scale
    )
    grid_w = (
        np.arange(grid_size[1], dtype=np.float64) / (grid_size[1] / base_size) / interpolation_scale
    )
    grid = np.stack(np.meshgrid(grid_w, grid_h, indexing="xy"), axis=0)
    emb = _diffusers_2d_from_grid(embed_dim, grid.reshape([2, 1, grid_size[1], grid_size[0]]))
    if cls_token and extra_tokens > 0:
        emb = np.concatenate([np.zeros([extra_tokens, embed_dim]), emb], axis=0)
    return emb


def diffusers_3d(
    embed_dim: int,
    spatial_size: tuple[int, int],
    temporal_size: int,
    spatial_interpolation_scale: float = 1.0,
    temporal_interpolation_scale: float = 1.0,
) -> npt.NDArray[np.float64]:
    """diffusers ``get_3d_sincos_pos_embed`` with ``spatial_size = (w, h)``."""
    spatial_dim, temporal_dim = 3 * embed_dim // 4, embed_dim // 4
    grid_h = np.arange(spatial_size[1], dtype=np.float64) / spatial_interpolation_scale
    grid_w = np.arange(spatial_size[0], dtype=np.float64) / spatial_interpolation_scale
    grid = np.stack(np.meshgrid(grid_w, grid_h, indexing="xy"), axis=0)
    spatial = _diffusers_2d_from_grid(
        spatial_dim, grid.reshape([2, 1, spatial_size[1], spatial_size[0]])
    )
    grid_t = np.arange(temporal_size, dtype=np.float64) / temporal_interpolation_scale
    temporal = _diffusers_1d(temporal_dim, grid_t)
    spatial = np.repeat(spatial[None, :, :], temporal_size, axis=0)
    temporal = np.repeat(temporal[:, None, :], spatial_size[0] * spatial_size[1], axis=1)
    return np.concatenate([temporal, spatial], axis=-1)


def timm_2d(
    feat_shape: tuple[int, int],
    dim: int = 64,
    temperature: float = 10000.0,
    interleave_sin_cos: bool = False,
) -> npt.NDArray[np.float64]:
    """timm ``build_sincos2d_pos_embed`` with ``reverse_coord=False``."""
    pos_dim = dim // 4
    bands = 1.0 / (temperature ** (np.arange(0, pos_dim, 1, dtype=np.float64) / pos_dim))
    grid = np.stack(
        np.meshgrid(*[np.arange(s, dtype=np.float64) for s in feat_shape], indexing="ij")
    )
    grid = grid.reshape(2, -1).T
    pos2 = grid[:, :, None] * bands[None, None, :]
    stack_axis = 2 if interleave_sin_cos else 1
    return np.stack([np.sin(pos2), np.cos(pos2)], axis=stack_axis).reshape(grid.shape[0], -1)


def llama_rope(
    positions: npt.ArrayLike, head_dim: int, base: float = 10000.0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """HF ``LlamaRotaryEmbedding`` (default rope type): ``emb = cat(freqs, freqs)``."""
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def gptj_rope(num_pos: int, dim: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """HF GPT-J ``create_sinusoidal_positions`` expanded by ``duplicate_interleave``."""
    inv_freq = 1.0 / (10000 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    sinusoid_inp = np.arange(num_pos, dtype=np.float64)[:, None] * inv_freq
    return np.repeat(np.cos(sinusoid_inp), 2, axis=1), np.repeat(np.sin(sinusoid_inp), 2, axis=1)


# ---- the grid and rotary functions, from the definitions in their docstrings ----


def sincos_2d(
    grid_h: int,
    grid_w: int,
    D: int,
    *,
    base: float = 10000.0,
    layout: str = "mae",
    extra_tokens: int = 0,
    base_size: float | None = None,
    interpolation_scale: float = 1.0,
    freq_shift: float | None = None,
) -> npt.NDArray[np.float64]:
    """``extra_tokens`` rows of zeros, then the tokens of the grid, row ``h`` outer.

    Each coordinate ``c`` gives ``[sin(c w) | cos(c w)]`` with ``w_j = base ** (-j /
    (D/4 - freq_shift))`` (freq_shift 0: the paper's frequencies for a width ``D/2``);
    the layout orders the four blocks.
    """
    shift = 0.0 if freq_shift is None else float(freq_shift)

    def coordinates(size: int) -> npt.NDArray[np.float64]:
        c = np.arange(size, dtype=np.float64)
        if base_size is not None and size:
            c = c * base_size / size
        return np.asarray(c / interpolation_scale, dtype=np.float64)

    if grid_h * grid_w == 0:  # no grid tokens: only the extra rows
        return np.zeros((extra_tokens, D))
    half, quarter = D // 2, D // 4
    enc_h = encoding(coordinates(grid_h), half, base=base, layout="sin_cos", freq_shift=shift)
    enc_w = encoding(coordinates(grid_w), half, base=base, layout="sin_cos", freq_shift=shift)
    h = np.repeat(enc_h, grid_w, axis=0)  # token (i, j) -> row i of enc_h
    w = np.tile(enc_w, (grid_h, 1))  # token (i, j) -> row j of enc_w
    if layout == "mae":
        blocks = [w, h]
    elif layout == "timm":
        blocks = [h[:, :quarter], w[:, :quarter], h[:, quarter:], w[:, quarter:]]
    else:  # "timm_interleaved"
        blocks = [h, w]
    out = np.zeros((extra_tokens + grid_h * grid_w, D))
    out[extra_tokens:] = np.concatenate(blocks, axis=1)
    return out


def sincos_3d(
    t: int,
    h: int,
    w: int,
    D: int,
    *,
    base: float = 10000.0,
    temporal_interpolation_scale: float = 1.0,
    spatial_interpolation_scale: float = 1.0,
) -> npt.NDArray[np.float64]:
    """``[time (D/4) | space (3D/4)]``: ``[sin | cos]`` of ``frame / temporal_scale``
    with ``w_j = base ** (-j / (D/8))``, then ``sincos_2d(h, w, 3D/4)``."""
    if t * h * w == 0:
        return np.zeros((t, h * w, D))
    quarter = D // 4
    frames = np.arange(t, dtype=np.float64) / temporal_interpolation_scale
    time = encoding(frames, quarter, base=base, layout="sin_cos")
    space = sincos_2d(h, w, D - quarter, base=base, interpolation_scale=spatial_interpolation_scale)
    out = np.zeros((t, h * w, D))
    out[..., :quarter] = time[:, None, :]
    out[..., quarter:] = space[None, :, :]
    return out


def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: int,
    *,
    base: float = 10000.0,
    start: int = 0,
    layout: str = "half",
    rope_parameters: dict | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``cos(p w_j)``, ``sin(p w_j)`` with ``w_j = base ** (-2j / head_dim)``, each
    frequency twice: ``[w_0 .. w_{d/2-1}, w_0 .. w_{d/2-1}]`` ("half") or
    ``[w_0, w_0, w_1, w_1, ...]`` ("interleaved"). An integer ``n`` (0-d integer
    arrays included) means the positions ``start ... start + n - 1``; anything
    else is the positions. With ``rope_parameters``, the frequencies and factor
    of exact.rope_scheme."""
    if np.ndim(n) == 0 and np.asarray(n).dtype.kind in "iu":
        count = int(np.asarray(n))
        p = np.arange(start, start + count, dtype=np.float64)
    else:
        p = np.asarray(n, dtype=np.float64)
    w, attention = rope_scheme_frequencies(
        head_dim,
        base,
        rope_parameters,
        max_position_embeddings,
        seq_len if seq_len is not None else (float(p.max()) + 1 if p.size else None),
    )
    angle = p[..., None] * w
    if layout == "half":
        angle = np.concatenate([angle, angle], axis=-1)
    else:
        angle = np.repeat(angle, 2, axis=-1)
    return attention * np.cos(angle), attention * np.sin(angle)


def rope_scheme_frequencies(
    head_dim: int,
    base: float,
    rope_parameters: dict | None,
    max_position_embeddings: int | None = None,
    seq_len: float | None = None,
) -> tuple[npt.NDArray[np.float64], float]:
    """RoPE's float64 frequencies and attention factor (exact.rope_scheme's, rounded)."""
    if rope_parameters is None:
        return frequencies(head_dim, base), 1.0
    import exact

    w, attention, _ = exact.rope_scheme(
        head_dim, dict(rope_parameters), max_position_embeddings, seq_len, base
    )
    return np.array([float(x) for x in w]), attention
