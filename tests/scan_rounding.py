"""Scan cpe's narrow tables for values that are not the nearest of their dtype.

    python tests/scan_rounding.py                      # a quick scan (about a minute)
    python tests/scan_rounding.py --positions 1000000 --widths 64,128,256,512,1024,2048
                                                       # the full scan of the accuracy audit

For every position below ``--positions`` and every width, the table of the
sinusoidal encoding (interleaved layout, ``--base``) is made in float64 and in
the narrow ``--dtype``. A narrow value can differ from the nearest value of its
dtype to the exact one only where the float64 value lies within its error bound
(``--bound``, absolute) of a point halfway between two values of the dtype: those
candidates (about one value in 10^7 near 1, more among tiny values) are compared
with the exact value from mpmath at 60 digits. It prints, per width, the values
scanned, the candidates, and those not the nearest with how far they are (in ulps
of the dtype) from the exact value; the exit status is 1 if any is not the
nearest.

The reference is written from the definition (``tests/exact.py``): nothing of
cpe's arithmetic is used to decide which value is the nearest.
"""

from __future__ import annotations

import argparse
import sys
import time

import mpmath
import numpy as np

import cpe
import exact  # (this script's directory, tests/, is on the path when it is run)

ROWS = 4096  # positions per block


def significand_bits(dtype: str) -> int:
    return {"float32": 24, "float16": 11, "bfloat16": 8}[dtype]


def smallest_quantum(dtype: str) -> int:
    """log2 of the dtype's smallest step (that of its subnormals)."""
    return {"float32": -149, "float16": -24, "bfloat16": -133}[dtype]


def nearest(values: np.ndarray, bits: int, dtype: str) -> np.ndarray:
    """float64 ``values`` rounded once to the nearest value of ``bits``
    significant bits (ties to even), as float64: NumPy's casts for float32 and
    float16 (which round double once); for bfloat16, the significand rounded by
    np.round (ties to even; the encoding's values are far from its subnormals)."""
    if dtype != "bfloat16":
        return values.astype(dtype).astype(np.float64)
    mantissa, exponent = np.frexp(values)
    return np.ldexp(np.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


def exact_nearest(x: mpmath.mpf, bits: int, tiniest: int) -> float:
    """The value of ``bits`` significant bits (steps of at least 2**``tiniest``:
    subnormals) nearest to ``x``, ties to even."""
    if x == 0:
        return 0.0
    exponent = int(mpmath.floor(mpmath.log(abs(x), 2))) + 1  # 2**(e-1) <= |x| < 2**e
    quantum = mpmath.ldexp(1, max(exponent - bits, tiniest))
    scaled = x / quantum
    low = mpmath.floor(scaled)
    above = scaled - low
    if above > 0.5 or (above == 0.5 and int(low) % 2 == 1):
        low += 1
    return float(low * quantum)


def scan(D: int, n_positions: int, base: float, dtype: str, bound: float) -> tuple[int, list]:
    """Candidates and the values not the nearest, for one width."""
    bits = significand_bits(dtype)
    narrow = None if dtype != "bfloat16" else __import__("ml_dtypes").bfloat16
    candidates = 0
    wrong = []
    for start in range(0, n_positions, ROWS):
        rows = min(ROWS, n_positions - start)
        wide = cpe.positional_encoding_table(rows, D, start=start, base=base)
        got = cpe.positional_encoding_table(
            rows, D, start=start, base=base, dtype=narrow or dtype
        ).astype(np.float64)
        near = nearest(wide - bound, bits, dtype) != nearest(wide + bound, bits, dtype)
        for i, k in zip(*np.nonzero(near), strict=True):
            candidates += 1
            value = exact.encoding_value(start + int(i), D, int(k), base)
            want = exact_nearest(value, bits, smallest_quantum(dtype))
            if got[i, k] != want:
                ulp = float(
                    mpmath.ldexp(1, int(mpmath.floor(mpmath.log(abs(value), 2))) + 1 - bits)
                )
                off = float(abs(mpmath.mpf(got[i, k]) - value)) / ulp
                wrong.append((start + int(i), int(k), float(got[i, k]), want, off))
    return candidates, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--positions", type=int, default=20000)
    parser.add_argument("--widths", default="64,512,2048")
    parser.add_argument("--base", type=float, default=10000.0)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--bound", type=float, default=2.0**-49,
                        help="the float64 values' error bound (absolute)")  # fmt: skip
    args = parser.parse_args()
    mpmath.mp.dps = 60
    total = 0
    for D in (int(w) for w in args.widths.split(",")):
        began = time.perf_counter()
        candidates, wrong = scan(D, args.positions, args.base, args.dtype, args.bound)
        total += len(wrong)
        sys.stdout.write(
            f"D={D}: {args.positions * D} {args.dtype} values, {candidates} near a halfway "
            f"point, {len(wrong)} not the nearest ({time.perf_counter() - began:.0f} s)\n"
        )
        for p, k, got, want, off in wrong:
            sys.stdout.write(
                f"  position {p}, column {k}: {got!r}, nearest {want!r} ({off:.3f} ulp away)\n"
            )
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
