"""Batch invariance: a position's bits depend on the position and the encoding alone.

The README promises that ``positional_encoding(p, D, **kw)``, row ``i`` of
``positional_encoding(ids, D, **kw)`` for ids of any shape, and row ``p - s`` of
``positional_encoding_table(n, D, start=s, **kw)`` are bit-identical, for every
dtype, layout, freq_shift, scale and convention; that RoPE's cos and sin columns
are those of the ``sin_cos`` encoding of width ``head_dim``; and that the thread
and the state of the caches change nothing. Compared as bytes, so that even the
sign of a zero counts.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import cpe

CONVENTIONS = ["paper", "marian", "fairseq", "tensor2tensor", "whisper", "diffusers", "adm"]

keywords = st.one_of(
    st.just({}),
    st.builds(lambda layout: {"layout": layout}, st.sampled_from(["sin_cos", "cos_sin"])),
    st.builds(lambda shift: {"freq_shift": shift}, st.sampled_from([0, 1, 0.5])),
    st.builds(lambda scale: {"scale": scale}, st.sampled_from([0.0, 0.001, 0.5, 3.0])),
    st.builds(lambda name: {"convention": name}, st.sampled_from(CONVENTIONS)),
    st.builds(lambda base: {"base": base}, st.sampled_from([777.5, 1e6])),
)
widths = st.one_of(
    st.integers(1, 80), st.sampled_from([128, 129, 130, 131, 257, 384, 511, 512, 513, 2048])
)
try:  # the optional bfloat16 dtype, when its package is installed
    import ml_dtypes

    _BFLOAT16 = [ml_dtypes.bfloat16]
except ImportError:
    _BFLOAT16 = []
dtypes = st.sampled_from([np.float64, np.float32, np.float16, *_BFLOAT16])
# Starts near 0 (negative too), near the edges of the digit levels (65536; 16384
# and 2**21; 2**20: cpe_fill.h's cpe_level_shape) and far beyond them.
starts = st.one_of(
    st.integers(-300, 300),
    st.integers(16384 - 200, 16384 + 100),
    st.integers(65536 - 200, 65536 + 100),
    st.integers(2**20 - 200, 2**20 + 100),
    st.integers(2**21 - 200, 2**21 + 100),
    st.integers(-(10**6), 10**6),
    st.integers(2**40 - 100, 2**40),
)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def kw_fits(D: int, kw: dict[str, Any]) -> bool:
    # freq_shift s needs D // 2 - s > 0 from D >= 4 on (see the docstring).
    shift = kw.get("freq_shift", 1 if kw.get("convention") in ("fairseq", "tensor2tensor") else 0)
    return ("freq_shift" not in kw and "convention" not in kw) or D < 4 or D // 2 - shift > 0


@settings(deadline=None, max_examples=120)
@given(
    D=widths,
    kw=keywords,
    dtype=dtypes,
    start=starts,
    n=st.integers(1, 70),
    data=st.data(),
)
def test_single_ids_and_table_rows_are_bit_identical(
    D: int, kw: dict[str, Any], dtype: type, start: int, n: int, data: st.DataObject
) -> None:
    if not kw_fits(D, kw):
        return
    kw = {**kw, "dtype": dtype}
    table = cpe.positional_encoding_table(n, D, start=start, **kw)
    # The same positions, shuffled, repeated and in an array of another shape.
    order = data.draw(st.permutations(range(n)))
    picked = np.array(order + order[: n // 3], dtype=np.int64) + start
    shape = data.draw(st.sampled_from([(picked.size,), (1, picked.size), (picked.size, 1)]))
    ids = picked.reshape(shape)
    rows = cpe.positional_encoding(ids, D, **kw).reshape(picked.size, D)
    assert same_bits(rows, table[picked - start])
    # As float positions, and one at a time (int, NumPy int, float).
    assert same_bits(cpe.positional_encoding(picked.astype(np.float64), D, **kw), rows)
    i = data.draw(st.integers(0, n - 1))
    for p in (start + i, np.int64(start + i), float(start + i)):
        assert same_bits(cpe.positional_encoding(p, D, **kw), table[i])
    # A table that starts elsewhere but holds the same position.
    shift = data.draw(st.integers(0, i))
    other = cpe.positional_encoding_table(n - i + shift, D, start=start + i - shift, **kw)
    assert same_bits(other[shift], table[i])


@settings(deadline=None, max_examples=60)
@given(
    half=st.integers(1, 70),
    dtype=dtypes,
    start=starts,
    n=st.integers(1, 40),
    base=st.sampled_from([10000.0, 500000.0]),
    layout=st.sampled_from(["half", "interleaved"]),
)
def test_rope_columns_are_the_sin_cos_encoding(
    half: int, dtype: type, start: int, n: int, base: float, layout: str
) -> None:
    head_dim = 2 * half
    encoding = cpe.positional_encoding_table(
        n, head_dim, start=start, base=base, layout="sin_cos", dtype=dtype
    )
    sines, cosines = encoding[:, :half], encoding[:, half:]
    cos, sin = cpe.rope_cos_sin(n, head_dim, start=start, base=base, layout=layout, dtype=dtype)
    first = slice(0, half) if layout == "half" else slice(0, None, 2)
    second = slice(half, None) if layout == "half" else slice(1, None, 2)
    for column in (first, second):
        assert same_bits(np.ascontiguousarray(cos[:, column]), cosines)
        assert same_bits(np.ascontiguousarray(sin[:, column]), sines)
    ids = np.arange(start, start + n)[::-1].copy()
    cos_ids, sin_ids = cpe.rope_cos_sin(ids, head_dim, base=base, layout=layout, dtype=dtype)
    assert same_bits(cos_ids, cos[::-1])
    assert same_bits(sin_ids, sin[::-1])


SCALED = [
    {"rope_type": "linear", "factor": 3.0},
    {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 1024},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "longrope", "short_factor": [1.5] * 40, "long_factor": [7.0] * 40,
     "original_max_position_embeddings": 1024},
    {"rope_type": "proportional", "partial_rotary_factor": 0.5},
]  # fmt: skip


@settings(deadline=None, max_examples=60)
@given(
    params=st.sampled_from(SCALED),
    dtype=dtypes,
    start=starts,
    n=st.integers(1, 30),
    layout=st.sampled_from(["half", "interleaved"]),
    pick=st.integers(0, 29),
)
def test_scaled_rope_rows_do_not_depend_on_the_call(
    params: dict[str, Any], dtype: type, start: int, n: int, layout: str, pick: int
) -> None:
    # The sequence length that dynamic and longrope adapt to is part of the
    # encoding: fixed here, the rows are the same whatever the call.
    kw = {"rope_parameters": params, "max_position_embeddings": 4096, "seq_len": 50000}
    kw |= {"layout": layout, "dtype": dtype}
    cos, sin = cpe.rope_cos_sin(n, 80, start=start, **kw)
    ids = np.arange(start, start + n)[::-1].copy().reshape(1, n)
    cos_ids, sin_ids = cpe.rope_cos_sin(ids, 80, **kw)
    assert same_bits(cos_ids[0], cos[::-1])
    assert same_bits(sin_ids[0], sin[::-1])
    p = start + pick % n
    one = cpe.rope_cos_sin(float(p), 80, **kw)
    later = cpe.rope_cos_sin(3, 80, start=p, **kw)
    for got, table in ((one[0], cos), (one[1], sin), (later[0][0], cos), (later[1][0], sin)):
        assert same_bits(got, table[p - start])


@settings(deadline=None, max_examples=30)
@given(
    quarter=st.integers(1, 40),
    grid=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    dtype=dtypes,
    shift=st.sampled_from([0, 1]),
)
def test_each_half_of_a_2d_grid_is_the_1d_encoding(
    quarter: int, grid: tuple[int, int], dtype: type, shift: int
) -> None:
    D = 4 * quarter
    h, w = grid
    # "mae": [width axis | height axis]
    tokens = cpe.sincos_2d(h, w, D, dtype=dtype, freq_shift=shift)
    kw = {"layout": "sin_cos", "freq_shift": shift, "dtype": dtype}
    rows_w = cpe.positional_encoding_table(w, D // 2, **kw)
    rows_h = cpe.positional_encoding_table(h, D // 2, **kw)
    expected = np.concatenate([np.tile(rows_w, (h, 1)), np.repeat(rows_h, w, axis=0)], axis=1)
    assert same_bits(tokens, expected)


def test_threads_and_batches_give_the_same_bits() -> None:
    D, start, n = 512, 10**6 - 3000, 3000
    # A new encoding (this base), so that the threads race to make its digit rows.
    base = 12345.5
    expected = cpe.positional_encoding_table(n, D, start=start, base=base)
    results: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        barrier.wait()
        ids = np.arange(start, start + n)
        if k == 0:
            results[k] = cpe.positional_encoding_table(n, D, start=start, base=base + 1)
        elif k == 1:
            results[k] = cpe.positional_encoding(ids, D, base=base + 1)
        elif k == 2:
            parts = [
                cpe.positional_encoding_table(100, D, start=s, base=base + 1)
                for s in range(start, start + n, 100)
            ]
            results[k] = np.concatenate(parts)
        else:
            results[k] = np.stack(
                [cpe.positional_encoding(int(p), D, base=base + 1) for p in ids[::-1]]
            )[::-1]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(1, 4):
        assert same_bits(np.ascontiguousarray(results[k]), results[0]), k
    # And an encoding made before the threads, from a cold cache, the same way.
    assert same_bits(cpe.positional_encoding(np.arange(start, start + n), D, base=base), expected)


def test_zero_frequencies_give_the_same_zeros_in_every_call_form():
    # With scale=0 every sine is 0: a negative position's zero sines must have the
    # same sign whether its digit rows are cached (multiplied in registers) or not.
    kw = {"freq_shift": 0.0, "scale": 0.0}
    first = cpe.positional_encoding(-755, 37, dtype=np.float16, **kw)
    again = cpe.positional_encoding(-755, 37, dtype=np.float16, **kw)
    assert same_bits(first, again)
    rows = cpe.positional_encoding(np.array([-755, 3]), 37, **kw)
    for _ in range(2):
        assert same_bits(cpe.positional_encoding(-755, 37, **kw), rows[0])
    table = cpe.positional_encoding_table(5, 37, start=-757, **kw)
    assert same_bits(table[2], rows[0])
