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
