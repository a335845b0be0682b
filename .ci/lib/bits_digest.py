"""Print one SHA-256 digest per group of cpe results, to compare two builds' bits.

Every public function, each path of the kernels (digit levels, digit tables,
one row of sines and cosines per position, streamed outputs, the rotation and
the addition of the caller's rows), float64, float32 and float16, both RoPE
layouts and a few conventions. (Not bfloat16: the builds compared need not all
have ml_dtypes, which gives NumPy that dtype.) Two builds whose lines
differ give different bits somewhere in that group. Run it under each
CPE_DISABLE_* setting to compare every copy of the SIMD loops.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

import cpe

rng = np.random.default_rng(20261130)
POSITIONS = {
    "digits": rng.integers(-65535, 65536, (3, 40)),
    "dense span across 0": np.arange(-70000, 70000, 70),
    "sparse and huge": rng.integers(-(2**50), 2**50, 25),
    "real-valued": rng.uniform(-1e6, 1e6, (4, 5)),
}
WIDTHS = (1, 3, 8, 64, 130, 512, 2050, 4096, 8192)
# Multi-axis RoPE: Flux's axial ids, and Qwen2-VL's and Qwen3-VL's (interleaved)
# sections of (temporal, height, width) ids.
AXIAL = rng.integers(-4096, 4096, (300, 3))
THW = rng.integers(0, 70000, (3, 2, 150))
QWEN2_VL = {"rope_type": "default", "mrope_section": [16, 24, 24]}
QWEN3_VL = {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True}
DTYPES = ("float64", "float32", "float16")


def emit(group: str, results: list[np.ndarray]) -> None:
    """One line: the group's name and the digest of its results' shapes and bytes."""
    h = hashlib.sha256()
    for result in results:
        h.update(f"{result.shape} {result.dtype}".encode())
        h.update(np.ascontiguousarray(result).tobytes())
    sys.stdout.write(f"{group} {h.hexdigest()[:16]}\n")


def main() -> None:
    for dtype in DTYPES:
        for D in WIDTHS:
            singles = [
                cpe.positional_encoding(p, D, dtype=dtype) for p in (0, 5, 4097, -40000, 65536, 2.5)
            ]
            emit(f"single D={D} {dtype}", singles)
            arrays = [cpe.positional_encoding(ids, D, dtype=dtype) for ids in POSITIONS.values()]
            emit(f"positions D={D} {dtype}", arrays)
            tables = [
                cpe.positional_encoding_table(n, D, start=start, dtype=dtype)
                for n, start in ((1, 0), (300, -150), (5000, 10**6))
            ]
            emit(f"tables D={D} {dtype}", tables)
        for convention in ("fairseq", "tensor2tensor", "diffusers", "adm"):
            rows = cpe.positional_encoding(
                POSITIONS["digits"], 64, dtype=dtype, convention=convention
            )
            emit(f"{convention} {dtype}", [rows])
        for layout in ("half", "interleaved"):
            rope = [
                *cpe.rope_cos_sin(3000, 128, start=-7, base=500000.0, layout=layout, dtype=dtype),
            ]
            for ids in POSITIONS.values():
                rope += cpe.rope_cos_sin(ids, 64, layout=layout, dtype=dtype)
            emit(f"rope {layout} {dtype}", rope)
        emit(f"sincos_2d {dtype}", [cpe.sincos_2d(14, 14, 768, dtype=dtype)])
        for layout in ("half", "interleaved"):
            axes = [
                *cpe.rope_cos_sin(AXIAL, 128, axes_dim=(16, 56, 56), layout=layout, dtype=dtype),
                *cpe.rope_cos_sin(THW, 128, rope_parameters=QWEN2_VL, layout=layout, dtype=dtype),
                *cpe.rope_cos_sin(THW, 128, rope_parameters=QWEN3_VL, layout=layout, dtype=dtype),
            ]
            emit(f"multi-axis rope {layout} {dtype}", axes)
        # Encodings applied: every rotation and addition kernel, x of this dtype.
        x = rng.standard_normal((2, 3, 40, 128)).astype(dtype)
        applied = [
            cpe.apply_rope(x, start=70000, layout=layout, inverse=inverse)
            for layout in ("half", "interleaved")
            for inverse in (False, True)
        ]
        applied.append(cpe.apply_rope(x, THW[:, :, None, :40], rope_parameters=QWEN2_VL))
        applied.append(cpe.add_positional_encoding(x, start=-5, x_scale=8.0))
        emit(f"applied {dtype}", applied)
    # Outputs of 16 MiB and more are streamed.
    streamed = [
        cpe.positional_encoding_table(8192, 1024, dtype="float32"),
        cpe.positional_encoding(rng.integers(0, 65536, (8, 1024)), 1024),
        *cpe.rope_cos_sin(65536, 128, dtype="float32"),
    ]
    emit("streamed", streamed)


if __name__ == "__main__":
    main()
