"""cpe: fast, exact sinusoidal positional encodings.

For a position ``p`` and width ``D``, for every pair ``k = 2j``::

    out[2j]     = sin(p * w_j)
    out[2j + 1] = cos(p * w_j)        w_j = base ** (-2j / D),  base = 10000

Odd ``k`` uses the frequency of ``k - 1``; for odd ``D`` the last column is a sine.
Values are computed with double-double frequencies and rounded once to the output
dtype: float64 results are within 1e-15 of the exact value for |p| <= 1e6.

The C-level kernels are available to Cython code as ``cimport cpe.kernels``.
"""

from cpe._apply import Sinusoidal, add_positional_encoding
from cpe._core import positional_encoding, positional_encoding_table
from cpe._grids import sincos_2d, sincos_3d
from cpe._rope import Rope, apply_rope, rope_cos_sin, rope_frequencies
from cpe._version import __version__
from cpe._workers import get_workers, set_workers

__all__ = [
    "Rope",
    "Sinusoidal",
    "__version__",
    "add_positional_encoding",
    "apply_rope",
    "get_workers",
    "positional_encoding",
    "positional_encoding_table",
    "rope_cos_sin",
    "rope_frequencies",
    "set_workers",
    "sincos_2d",
    "sincos_3d",
]
