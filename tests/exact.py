"""Exact values of the encoding, from mpmath at 50 significant digits.

The frequency is computed from the rational exponent ``-2j / D`` in mpmath, never
rounded to float64 first, so this is independent of cpe's own arithmetic.
"""

from __future__ import annotations

import mpmath

mpmath.mp.dps = 50


def frequency(j: int, D: int, base: float = 10000.0) -> mpmath.mpf:
    return mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * j) / D)


def encoding_value(p: float, D: int, k: int, base: float = 10000.0) -> mpmath.mpf:
    """Column ``k`` of the encoding of position ``p``: sin for even k, cos for odd."""
    angle = mpmath.mpf(p) * frequency(k // 2, D, base)
    return mpmath.sin(angle) if k % 2 == 0 else mpmath.cos(angle)


def error(computed: float, p: float, D: int, k: int, base: float = 10000.0) -> float:
    return float(abs(mpmath.mpf(float(computed)) - encoding_value(p, D, k, base)))


def convention_value(
    p: float,
    D: int,
    k: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    freq_shift: float | None = None,
    scale: float = 1.0,
) -> mpmath.mpf:
    """Column ``k`` for any layout and frequency choice (see cpe._conventions)."""
    n_freq = (D + 1) // 2 if freq_shift is None else D // 2
    n_cos = min(n_freq, D - n_freq)
    if layout == "interleaved":
        j, kind = k // 2, ("sin" if k % 2 == 0 else "cos")
    elif layout == "sin_cos":
        j, kind = (k, "sin") if k < n_freq else (k - n_freq, "cos")
    else:
        j, kind = (k, "cos") if k < n_cos else (k - n_cos, "sin")
    if (kind == "sin" and j >= n_freq) or (kind == "cos" and j >= n_cos):
        return mpmath.mpf(0)
    if freq_shift is None:
        w = mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * j) / D)
    else:
        w = mpmath.power(
            mpmath.mpf(base), -mpmath.mpf(j) / (mpmath.mpf(D // 2) - mpmath.mpf(freq_shift))
        )
    angle = mpmath.mpf(scale) * mpmath.mpf(p) * w
    return mpmath.sin(angle) if kind == "sin" else mpmath.cos(angle)
