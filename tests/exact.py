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
