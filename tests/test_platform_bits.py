"""The same bits on every platform: a digest of a fixed sample of cpe's values,
recorded in this file, that every build must reproduce.

cpe makes every value with its own arithmetic (no libm call: see
docs/accuracy.md), in an order fixed by the inputs, without fused multiply-adds
other than exact ones, so a value depends on its inputs alone, whatever the
compiler, the platform or the SIMD level. The sample covers what could differ if
that stopped being true: angles beyond the row loop's reduction (up to 2**53,
near multiples of pi/2), tiny and huge frequencies, positions and products,
every dtype, tables, arrays, single positions, RoPE's tables and rotation. The
wheels' test runs (Linux, macOS, Windows; x86-64 and arm64) check it. Scaled RoPE
schemes are left out: their parameters come from Python's math module (libm).

If a change of cpe changes these bits on purpose, run this file as a script to
print the new digest and record it below.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

import cpe

RECORDED = "a2221e96a8461dd1fee46625662d22741bdd9d3057bb756e67d0991676870923"


def _sample() -> list[np.ndarray]:
    rng = np.random.default_rng(20261205)
    near_quarter_turns = [
        5920787228742393.0, 6134899525417045.0, 214112296674652.0, 1_600_001.0,
        float(2**52 + 1), float(2**53), 2.5e15 + 0.5, 1234567.890625,
    ]  # fmt: skip
    positions = np.concatenate(
        [
            near_quarter_turns,
            [-p for p in near_quarter_turns],
            rng.integers(-(2**40), 2**40, 20),
            rng.uniform(-1e7, 1e7, 10),
            [0.0, -0.0, 1e-300, -3e-310, 5e-324],
        ]
    )
    results = []
    for dtype in ("float64", "float32", "float16"):
        for D in (2, 7, 64, 513, 4096):
            results.append(cpe.positional_encoding(positions, D, dtype=dtype))
            results.append(cpe.positional_encoding(float(2**53), D, dtype=dtype))
            results.append(cpe.positional_encoding_table(40, D, start=2**53 - 40, dtype=dtype))
        for base in (0.5, 1.0001, 1e-300, 1e300):  # huge and tiny frequencies
            reach = 2.0**53 / max(1.0, float(base) ** (-62 / 64))
            results.append(cpe.positional_encoding(positions / 2**53 * reach, 64, base=base,
                                                   dtype=dtype))  # fmt: skip
    for layout in ("half", "interleaved"):
        for dtype in ("float64", "float32"):
            results += cpe.rope_cos_sin(positions, 128, base=5e5, layout=layout, dtype=dtype)
            x = rng.standard_normal((2, 3, positions.size, 128)).astype(dtype)
            results.append(cpe.apply_rope(x, positions, layout=layout, base=5e5))
    return results


def digest() -> str:
    h = hashlib.sha256()
    for result in _sample():
        h.update(f"{result.shape} {result.dtype}".encode())
        h.update(np.ascontiguousarray(result).tobytes())
    return h.hexdigest()


def test_the_bits_are_those_recorded():
    assert digest() == RECORDED, (
        "cpe's values differ from those recorded (on x86-64 Linux): some value "
        "depends on the platform, the compiler or the SIMD level, or cpe changed "
        "them on purpose (then record the new digest: python tests/test_platform_bits.py)"
    )


if __name__ == "__main__":
    sys.stdout.write(digest() + "\n")
