"""Plain NumPy oracle of every public function: slow, obvious, for the tests.

It follows the definition literally in float64 and so carries NumPy's usual
rounding (about 1e-16 * |p * w_j|); accuracy is checked against mpmath instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cpe._conventions import CONVENTIONS
from cpe.benchmark.usual_numpy import mae_2d

__all__ = ["mae_2d"]  # MAE's 2-D embedding from its formula, which the benchmark runs too


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


# ---- the conventions, each from its published formula ----
# Written here from the formulas (the papers', or those the projects document),
# in this project's words; tests/test_interop.py compares cpe with the projects'
# own code where it is installed. Credits: docs/development.md.


def _paper_angles(n_pos: int, dim: int) -> npt.NDArray[np.float64]:
    """Column k of position p: p / 10000 ** (2 * (k // 2) / dim) (Vaswani et al.)."""
    exponents = 2 * (np.arange(dim) // 2) / dim
    return np.arange(n_pos, dtype=np.float64)[:, None] / np.power(10000.0, exponents)[None, :]


def paper_table(n_pos: int, dim: int) -> npt.NDArray[np.float64]:
    """The paper's table, sines in the even columns and cosines in the odd ones
    (as HF DistilBERT/XLM lay it out)."""
    angles = _paper_angles(n_pos, dim)
    return np.where(np.arange(dim) % 2 == 0, np.sin(angles), np.cos(angles))


def marian_table(n_pos: int, dim: int) -> npt.NDArray[np.float64]:
    """The paper's angles with the sines of the even columns first, then the
    cosines of the odd ones (HF Marian/Pegasus)."""
    angles = _paper_angles(n_pos, dim)
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)


def _sines_then_cosines(angles: npt.NDArray[np.float64], width: int) -> npt.NDArray[np.float64]:
    """[sin | cos] of the angles, padded with zero columns to ``width``."""
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
    return np.pad(table, [(0, 0)] * (table.ndim - 1) + [(0, width - table.shape[-1])])


def _geometric(count: int, ratio_log: float, steps: float) -> npt.NDArray[np.float64]:
    """exp(-k * ratio_log / steps), k < count: frequencies in geometric progression."""
    return np.exp(np.arange(count, dtype=np.float64) * -(ratio_log / steps))


def fairseq_table(num_embeddings: int, embedding_dim: int) -> npt.NDArray[np.float64]:
    """fairseq's sinusoidal embedding (without a padding index): frequencies from
    1 to 1/10000 over half the channels, [sin | cos], a zero column if odd."""
    half = embedding_dim // 2
    freqs = _geometric(half, np.log(10000.0), half - 1)
    return _sines_then_cosines(np.arange(num_embeddings)[:, None] * freqs, embedding_dim)


def tensor2tensor_timing_signal(
    length: int,
    channels: int,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
    start_index: int = 0,
) -> npt.NDArray[np.float64]:
    """tensor2tensor's timing signal: timescales from min_timescale to
    max_timescale over half the channels, [sin | cos], a zero column if odd."""
    count = channels // 2
    inverse = min_timescale * _geometric(
        count, np.log(max_timescale / min_timescale), max(count - 1, 1)
    )
    positions = np.arange(length, dtype=np.float64) + start_index
    return _sines_then_cosines(positions[:, None] * inverse, channels)


def whisper_sinusoids(
    length: int, channels: int, max_timescale: float = 10000
) -> npt.NDArray[np.float64]:
    """Whisper's sinusoids: tensor2tensor's signal with timescales 1 to
    max_timescale (channels even)."""
    count = channels // 2
    inverse = _geometric(count, np.log(max_timescale), count - 1)
    return _sines_then_cosines(np.arange(length)[:, None] * inverse, channels)


def diffusers_timestep_embedding(
    timesteps: npt.ArrayLike,
    embedding_dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1,
    scale: float = 1,
    max_period: float = 10000,
) -> npt.NDArray[np.float64]:
    """diffusers' timestep embedding of a 1-D array of timesteps: frequencies
    exp(-log(max_period) * k / (half - shift)), angles times ``scale``, [sin |
    cos] (or [cos | sin] flipped), a zero column if odd."""
    half = embedding_dim // 2
    freqs = _geometric(half, np.log(max_period), half - downscale_freq_shift)
    angles = scale * (np.asarray(timesteps, dtype=np.float64)[:, None] * freqs)
    table = _sines_then_cosines(angles, 2 * half)
    if flip_sin_to_cos:
        table = np.roll(table, half, axis=1)
    return np.pad(table, [(0, 0), (0, embedding_dim - 2 * half)])


def adm_timestep_embedding(
    timesteps: npt.ArrayLike, dim: int, max_period: float = 10000
) -> npt.NDArray[np.float64]:
    """The timestep embedding of guided diffusion (ADM; the Stable Diffusion
    UNet's): frequencies exp(-log(max_period) * k / half), [cos | sin], a zero
    column if odd."""
    half = dim // 2
    freqs = _geometric(half, np.log(max_period), half)
    angles = np.asarray(timesteps, dtype=np.float64)[:, None] * freqs
    return np.pad(np.concatenate([np.cos(angles), np.sin(angles)], axis=1), [(0, 0), (0, dim % 2)])


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


# ---- grids and rotary tables, from their published formulas ----


def _grid_half(coordinates: npt.NDArray[np.float64], channels: int) -> npt.NDArray[np.float64]:
    """[sin | cos](c * omega_k) of each coordinate c, omega_k = 10000 ** (-k / q),
    q = channels // 2: the 1-D part of the 2-D/3-D sin-cos embeddings (MAE)."""
    quarter = channels // 2
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype=np.float64) / quarter)
    angles = np.multiply.outer(np.ravel(coordinates), omega)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def _grid_2d(columns: npt.NDArray[np.float64], rows: npt.NDArray[np.float64], channels: int):
    """Row-major tokens of a grid: half the channels encode the column
    coordinate, the other half the row coordinate."""
    x, y = np.meshgrid(columns, rows)
    return np.concatenate([_grid_half(x, channels // 2), _grid_half(y, channels // 2)], axis=1)


def diffusers_2d(
    embed_dim: int,
    grid_size: tuple[int, int],
    cls_token: bool = False,
    extra_tokens: int = 0,
    interpolation_scale: float = 1.0,
    base_size: float = 16,
) -> npt.NDArray[np.float64]:
    """diffusers' 2-D sin-cos embedding of an (h, w) grid: coordinates scaled by
    base_size / side / interpolation_scale, extra tokens first as zero rows."""
    h, w = grid_size
    rows = np.arange(h, dtype=np.float64) / (h / base_size) / interpolation_scale
    columns = np.arange(w, dtype=np.float64) / (w / base_size) / interpolation_scale
    table = _grid_2d(columns, rows, embed_dim)
    if cls_token and extra_tokens > 0:
        table = np.concatenate([np.zeros((extra_tokens, embed_dim)), table])
    return table


def diffusers_3d(
    embed_dim: int,
    spatial_size: tuple[int, int],
    temporal_size: int,
    spatial_interpolation_scale: float = 1.0,
    temporal_interpolation_scale: float = 1.0,
) -> npt.NDArray[np.float64]:
    """diffusers' 3-D sin-cos embedding, spatial_size = (w, h): a quarter of the
    channels encode the frame, the rest the frame's 2-D grid, for every token."""
    w, h = spatial_size
    spatial = _grid_2d(
        np.arange(w, dtype=np.float64) / spatial_interpolation_scale,
        np.arange(h, dtype=np.float64) / spatial_interpolation_scale,
        3 * embed_dim // 4,
    )
    temporal = _grid_half(
        np.arange(temporal_size, dtype=np.float64) / temporal_interpolation_scale, embed_dim // 4
    )
    return np.concatenate(
        [
            np.broadcast_to(temporal[:, None, :], (temporal_size, w * h, temporal.shape[1])),
            np.broadcast_to(spatial[None], (temporal_size, *spatial.shape)),
        ],
        axis=-1,
    )


def timm_2d(
    feat_shape: tuple[int, int],
    dim: int = 64,
    temperature: float = 10000.0,
    interleave_sin_cos: bool = False,
) -> npt.NDArray[np.float64]:
    """timm's 2-D sin-cos embedding (reverse_coord=False): bands temperature **
    (-k / q), q = dim // 4, times a token's two grid indices (first, second);
    the sines of both, then the cosines of both, or with interleave_sin_cos the
    sines and cosines of the first index, then those of the second."""
    quarter = dim // 4
    bands = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter)
    indices = np.meshgrid(*(np.arange(n, dtype=np.float64) for n in feat_shape), indexing="ij")
    angles = [np.multiply.outer(index.ravel(), bands) for index in indices]
    if interleave_sin_cos:
        parts = [f(a) for a in angles for f in (np.sin, np.cos)]
    else:
        parts = [f(a) for f in (np.sin, np.cos) for a in angles]
    return np.concatenate(parts, axis=1)


def _rope_inverse_frequencies(head_dim: int, base: float) -> npt.NDArray[np.float64]:
    """RoPE's frequencies 1 / base ** (2k / head_dim) (Su et al.)."""
    return 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def llama_rope(
    positions: npt.ArrayLike, head_dim: int, base: float = 10000.0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """RoPE's (cos, sin) in the "half" layout (GPT-NeoX, HF Llama): the angles of
    the frequencies, then the same again."""
    angles = np.multiply.outer(
        np.asarray(positions, dtype=np.float64), _rope_inverse_frequencies(head_dim, base)
    )
    twice = np.concatenate([angles, angles], axis=-1)
    return np.cos(twice), np.sin(twice)


def gptj_rope(num_pos: int, dim: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """RoPE's (cos, sin) in the "interleaved" layout (GPT-J): each frequency's
    angle twice in a row."""
    angles = np.multiply.outer(
        np.arange(num_pos, dtype=np.float64), _rope_inverse_frequencies(dim, 10000.0)
    )
    return np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)


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
