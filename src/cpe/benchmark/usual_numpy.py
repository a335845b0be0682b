"""The plain NumPy code a user writes today, which cpe is measured against.

It is the seed formula, vectorized: ``div_term = exp(arange(0, D, 2) * -log(base) / D)``,
sines into the even columns, cosines into the odd ones. ``dtype`` is the arithmetic
dtype: float32 here means float32 throughout, the fast but inaccurate route. D must be
even: for odd D the two halves differ in length and this code fails, as users' does.

This module imports only NumPy: the cold-start subprocesses import it too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]
FloatType = type[np.floating[Any]]


def numpy_div_term(D: int, base: float = 10000.0, dtype: FloatType = np.float64) -> FloatArray:
    """The frequencies ``w_j = base ** (-2j / D)`` as the usual code computes them."""
    return np.exp(np.arange(0, D, 2, dtype=dtype) * dtype(-math.log(base) / D))


def numpy_single(
    position: float, D: int, base: float = 10000.0, dtype: FloatType = np.float64
) -> FloatArray:
    """The encoding of one position, shape ``(D,)``."""
    div_term = numpy_div_term(D, base, dtype)
    pe = np.zeros(D, dtype)
    pe[0::2] = np.sin(position * div_term)
    pe[1::2] = np.cos(position * div_term)
    return pe


def numpy_table(
    n: int,
    D: int,
    start: int = 0,
    dtype: FloatType = np.float64,
    base: float = 10000.0,
) -> FloatArray:
    """The ``(n, D)`` table of positions ``start .. start + n - 1``."""
    position = np.arange(start, start + n, dtype=dtype)[:, np.newaxis]
    div_term = numpy_div_term(D, base, dtype)
    pe = np.zeros((n, D), dtype)
    pe[:, 0::2] = np.sin(position * div_term)
    pe[:, 1::2] = np.cos(position * div_term)
    return pe


def numpy_positions(positions: npt.ArrayLike, D: int, dtype: FloatType = np.float64) -> FloatArray:
    """The encodings of an array of positions, shape ``positions.shape + (D,)``."""
    position = np.asarray(positions, dtype)[..., np.newaxis]
    div_term = numpy_div_term(D, dtype=dtype)
    pe = np.zeros((*position.shape[:-1], D), dtype)
    pe[..., 0::2] = np.sin(position * div_term)
    pe[..., 1::2] = np.cos(position * div_term)
    return pe


def numpy_rope(n: int, head_dim: int, base: float, start: int, dtype: Any = np.float32) -> Any:
    """The rotary cache as HF Llama builds it (cos, sin; "half" layout), in ``dtype``."""
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(dtype) / head_dim))
    t = np.arange(start, start + n, dtype=dtype)
    freqs = np.outer(t, inv_freq.astype(dtype))
    emb = np.concatenate((freqs, freqs), axis=-1)
    return np.cos(emb), np.sin(emb)


def numpy_rope_positions(
    position_ids: npt.ArrayLike, head_dim: int, base: float, dtype: Any = np.float32
) -> Any:
    """HF Llama's rotary (cos, sin) of position ids (shape ``ids.shape + (head_dim,)``)."""
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(dtype) / head_dim))
    freqs = np.asarray(position_ids).astype(dtype)[..., np.newaxis] * inv_freq.astype(dtype)
    emb = np.concatenate((freqs, freqs), axis=-1)
    return np.cos(emb), np.sin(emb)


def numpy_apply_rope(x: Any, cos: Any, sin: Any) -> Any:
    """RoPE applied as a NumPy user writes it: ``x * cos + rotate_half(x) * sin``."""
    half = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., half:], x[..., :half]), axis=-1) * sin


def mae_2d(embed_dim: int, grid_size: int, cls_token: bool = False) -> npt.NDArray[np.float64]:
    """The 2-D sin-cos embedding of a square grid as MAE defines it (He et al.,
    2022, after MoCo v3), in plain NumPy: with ``q = embed_dim // 4`` and
    ``omega_k = 10000 ** (-k / q)``, a token's first ``2q`` channels are
    ``[sin | cos](column * omega)`` and its last ``2q`` the same of its row; tokens
    in row-major order, and a zero row first for a class token."""
    quarter = embed_dim // 4
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype=np.float64) / quarter)
    rows, columns = np.divmod(np.arange(grid_size * grid_size), grid_size)
    halves = []
    for coordinate in (columns, rows):
        angles = np.multiply.outer(coordinate.astype(np.float64), omega)
        halves += [np.sin(angles), np.cos(angles)]
    table = np.concatenate(halves, axis=1)
    if cls_token:
        table = np.concatenate([np.zeros((1, embed_dim)), table])
    return table
