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


def rope_scheme(
    head_dim: int,
    params: dict,
    max_position_embeddings: int | None = None,
    seq_len: float | None = None,
    base: float = 10000.0,
) -> tuple[list[mpmath.mpf], float, int]:
    """RoPE's scaled frequencies (exact), attention factor and table width, from
    the formulas of transformers' ROPE_INIT_FUNCTIONS written out here: the
    config's numbers (factors, ramps, blends, a dynamic base) formed in float64
    as the formulas state them, the frequencies themselves in mpmath."""
    import math

    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = float(params.get("rope_theta", base))
    fraction = params.get("partial_rotary_factor", 1.0)
    original = params.get("original_max_position_embeddings", max_position_embeddings)
    if rope_type == "proportional":
        rotated = int(fraction * head_dim // 2)
        factor = params.get("factor", 1.0)
        w = [
            frequency(j, head_dim, theta) / factor if j < rotated else mpmath.mpf(0)
            for j in range(head_dim // 2)
        ]
        return w, 1.0, head_dim
    dim = int(head_dim * fraction)
    if rope_type == "dynamic":
        length = max(seq_len or max_position_embeddings, max_position_embeddings)
        factor = params["factor"]
        theta = theta * ((factor * length / max_position_embeddings) - (factor - 1)) ** (
            dim / (dim - 2)
        )
    w = [frequency(j, dim, theta) for j in range(dim // 2)]
    attention = 1.0
    if rope_type == "linear":
        w = [x / params["factor"] for x in w]
    elif rope_type == "yarn":
        factor = params.get("factor") or max_position_embeddings / original

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if params.get("attention_factor") is not None:
            attention = params["attention_factor"]
        elif params.get("mscale") and params.get("mscale_all_dim"):
            attention = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
        else:
            attention = mscale(factor)

        def dim_of(rotations):
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low, high = dim_of(params.get("beta_fast") or 32), dim_of(params.get("beta_slow") or 1)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramps = [min(max((j - low) / (high - low), 0.0), 1.0) for j in range(dim // 2)]
        w = [x / factor * r + x * (1.0 - r) for x, r in zip(w, ramps, strict=True)]
    elif rope_type == "longrope":
        long = seq_len is not None and seq_len > original
        ext = params["long_factor" if long else "short_factor"]
        w = [x / e for x, e in zip(w, ext, strict=True)]
        factor = params.get("factor") or max_position_embeddings / original
        if params.get("attention_factor") is not None:
            attention = params["attention_factor"]
        elif factor > 1:
            attention = math.sqrt(1 + math.log(factor) / math.log(original))
    elif rope_type == "llama3":
        factor, low_f, high_f = (
            params["factor"],
            params["low_freq_factor"],
            params["high_freq_factor"],
        )
        scaled = []
        for x in w:
            wavelen = 2 * math.pi / float(x)
            if wavelen > original / low_f:
                scaled.append(x / factor)
            elif wavelen < original / high_f:
                scaled.append(x)
            else:
                smooth = (original / wavelen - low_f) / (high_f - low_f)
                scaled.append(x / factor * (1.0 - smooth) + x * smooth)
        w = scaled
    return w, attention, dim
