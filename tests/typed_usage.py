"""A user's script that calls every public function as the runtime accepts it:
``mypy --strict`` checks it (.ci/stages/10-lint.sh), and test_typing runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import cpe

if TYPE_CHECKING:  # typing.assert_type is Python 3.11's
    from typing_extensions import assert_type
else:

    def assert_type(value: object, _: object) -> object:
        return value


F32 = npt.NDArray[np.float32]


def every_call() -> list[npt.NDArray[Any]]:
    width = np.int64(16)  # NumPy integers (SupportsIndex) wherever a count goes
    out: npt.NDArray[np.float64] = np.empty((4, 8))
    results: list[npt.NDArray[Any]] = [
        cpe.positional_encoding(3, width),
        cpe.positional_encoding(np.arange(5), 8, layout="sin_cos", dtype=np.float32),
        cpe.positional_encoding(2.5, 8, convention="fairseq"),
        cpe.positional_encoding_table(np.int64(4), 8, start=np.int64(2), out=out),
        cpe.positional_encoding_table(4, 8, freq_shift=1.0, scale=0.5, base=100.0),
        cpe.sincos_2d(np.int32(2), 3, 16, layout="timm", extra_tokens=np.int64(1)),
        cpe.sincos_2d(2, 3, 16, freq_shift=1, dtype="float32"),
        cpe.sincos_3d(2, 2, 3, np.int64(32), temporal_interpolation_scale=2.0),
        cpe.positional_encoding_table(4, 8, workers=np.int64(2)),
        cpe.positional_encoding([1, 2], 8, workers=-1, dtype="float16"),
        cpe.sincos_2d(2, 3, 16, workers=2),
    ]
    # The result's type follows dtype= (float64 without it), and out= is returned.
    assert_type(cpe.positional_encoding(3, 8), npt.NDArray[np.float64])
    assert_type(cpe.positional_encoding([3], 8, dtype=np.float32), npt.NDArray[np.float32])
    assert_type(cpe.positional_encoding(3, 8, dtype="float16"), npt.NDArray[np.floating[Any]])
    assert_type(cpe.positional_encoding(3, 8, dtype=None), npt.NDArray[np.floating[Any]])
    assert_type(cpe.positional_encoding_table(4, 8, out=out), npt.NDArray[np.float64])
    half = np.dtype(np.float16)
    assert_type(cpe.positional_encoding_table(4, 8, dtype=half), npt.NDArray[np.float16])
    assert_type(cpe.sincos_2d(2, 3, 16, dtype=np.float32), npt.NDArray[np.float32])
    assert_type(cpe.sincos_3d(2, 2, 3, 32), npt.NDArray[np.float64])
    pair: tuple[F32, F32] = np.empty((8, 16), np.float32), np.empty((8, 16), np.float32)
    assert_type(cpe.rope_cos_sin(8, 16, dtype=np.float32, out=pair), tuple[F32, F32])
    assert_type(cpe.rope_cos_sin(8, 16, dtype=np.float32), tuple[F32, F32])
    with cpe.set_workers(2):
        assert cpe.get_workers() == 2
    cos, sin = cpe.rope_cos_sin(8, width, start=np.int64(100), layout="interleaved")
    scaled = cpe.rope_cos_sin(
        np.arange(6).reshape(2, 3),
        64,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
        },
        max_position_embeddings=np.int64(16384),
        seq_len=np.int64(10),
    )
    axial = cpe.rope_cos_sin(np.zeros((5, 3)), 16, axes_dim=[np.int64(4), 6, 6], workers=None)
    inv_freq, attention_factor = cpe.rope_frequencies(np.int64(64), base=500000.0)
    assert isinstance(attention_factor, float)
    q, k = np.ones((1, 4, 3, 16), np.float32), np.ones((1, 2, 3, 16), np.float32)
    rotated = cpe.apply_rope((q, k), start=np.int64(5), out=(q, k), inverse=False)
    one = cpe.apply_rope(q[0], np.arange(3), rope_parameters={"rope_type": "linear", "factor": 2})
    rope = cpe.Rope(np.int64(16), base=500000.0, layout="interleaved")
    decoded = rope.apply(np.ones((1, 3, 1, 16)), start=7, seq_axis=-2, workers=1)
    table = rope.cos_sin(4, start=np.int64(2), dtype=np.float32)
    return [*results, cos, sin, *scaled, *axial, inv_freq, *rotated, one, decoded, *table]
