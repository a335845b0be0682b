"""Plain NumPy oracle of every public function: slow, obvious, for tests and docs.

It follows the definition literally in float64 and so carries NumPy's usual
rounding (about 1e-16 * |p * w_j|); accuracy is checked against mpmath instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def frequencies(D: int, base: float = 10000.0) -> npt.NDArray[np.float64]:
    """``w_j = base ** (-2j / D)`` for ``j = 0 ... ceil(D/2) - 1``."""
    j = np.arange((D + 1) // 2, dtype=np.float64)
    return np.asarray(base ** (-2.0 * j / D), dtype=np.float64)


def positional_encoding(
    position: npt.ArrayLike, D: int, *, base: float = 10000.0
) -> npt.NDArray[np.float64]:
    """The definition, column by column: sin at ``2j``, cos at ``2j + 1``."""
    p = np.asarray(position, dtype=np.float64)
    w = frequencies(D, base)
    out = np.empty(p.shape + (D,), dtype=np.float64)
    for k in range(D):
        angle = p * w[k // 2]
        out[..., k] = np.sin(angle) if k % 2 == 0 else np.cos(angle)
    return out


def positional_encoding_table(
    n: int, D: int, *, start: int = 0, base: float = 10000.0
) -> npt.NDArray[np.float64]:
    """Rows for positions ``start ... start + n - 1``."""
    return positional_encoding(np.arange(start, start + n), D, base=base)


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
    if freq_shift is None:
        n_freq = (D + 1) // 2
        w = base ** (-2.0 * np.arange(n_freq) / D)
    else:
        n_freq = D // 2
        w = base ** (-np.arange(n_freq) / (n_freq - freq_shift))
    angle = scale * p[..., None] * w
    sines, cosines = np.sin(angle), np.cos(angle[..., : D - n_freq])
    out = np.zeros(p.shape + (D,))
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
