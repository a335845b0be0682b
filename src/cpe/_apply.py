"""RoPE applied: the caller's arrays rotated by the angles of their positions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from cpe._args import as_choice, as_integer, as_positions, as_rows, written
from cpe._core import rope_apply, round_into
from cpe._rope import (
    ROPE_LAYOUTS,
    _axes_dim,
    _check_amplitude,
    _check_no_offset,
    scheme_of,
)
from cpe._scaling import sections_of
from cpe._typing import RopeLayout
from cpe._workers import as_workers


def apply_rope(
    x: Any,
    positions: npt.ArrayLike | None = None,
    *,
    start: SupportsIndex = 0,
    seq_axis: SupportsIndex | None = None,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    inv_freq: npt.ArrayLike | None = None,
    axes_dim: Sequence[SupportsIndex] | None = None,
    inverse: bool = False,
    out: Any = None,
    workers: SupportsIndex | None = None,
) -> Any:
    """Rotary position embedding applied: ``x`` rotated by the angles of its positions.

    Pair ``j`` of each row of ``x`` (its last axis) is rotated by the angle
    ``p w_j`` of the row's position ``p``, with the frequencies and attention
    factor that :func:`rope_cos_sin` uses for the same keywords: with its
    tables, ``"half"`` gives ``x * cos + rotate_half(x) * sin`` (transformers'
    ``apply_rotary_pos_emb``) and ``"interleaved"`` rotates the pairs
    ``(x[2j], x[2j + 1])`` (GPT-J, Meta's Llama, llama.cpp). Columns past the
    rotated ones (``partial_rotary_factor``) pass through unchanged.

    Each value is computed in float64 from the row's own values and the exact
    cos and sin (the float64 values of :func:`rope_cos_sin`), and rounded once
    to the dtype of ``x``: it depends only on its pair, its position and the
    encoding, never on the shape of the call, ``workers`` or the tuple.

    Parameters
    ----------
    x : array or tuple of arrays
        Arrays of shape ``(..., head_dim)`` and dtype float64, float32, float16
        or bfloat16: NumPy arrays, or CPU arrays that share their memory through
        DLPack or the buffer protocol (torch tensors). A tuple (``(q, k)``, with
        different head counts) shares the positions: the angles are computed
        once for all its arrays.
    positions : array_like, optional
        The positions (integers or reals, as :func:`rope_cos_sin` takes them),
        broadcast against ``x.shape[:-1]`` by NumPy's rules (multimodal RoPE: a
        leading axis of 3 more; axial RoPE: a last axis of ``len(axes_dim)``
        more). A 1-D array with ``seq_axis`` lies along that axis. None (the
        default): ``start + arange(x.shape[seq_axis])`` along ``seq_axis``.
    start : int, optional
        The first position when ``positions`` is None: a decoding step of one
        token at position ``p`` is ``start=p`` on an axis of length 1.
    seq_axis : int, optional
        The axis of ``x`` that holds the sequence: -2 by default, as in
        ``(batch, heads, seq, head_dim)`` (transformers, SDPA); 1 for
        ``(batch, seq, heads, head_dim)`` (flash-attn, vLLM, llama.cpp).
    base, layout, rope_parameters, max_position_embeddings, seq_len, inv_freq, axes_dim
        As for :func:`rope_cos_sin` (``head_dim`` is ``x.shape[-1]``;
        ``axes_dim`` takes ``layout="interleaved"``, as Flux uses it).
    inverse : bool, optional
        Rotate by ``-angle``: undoes the rotation (and is its backward pass).
    out : array or tuple of arrays, optional
        Where to write the result: writeable arrays of the shape and dtype of
        ``x`` (a matching tuple for a tuple), rows contiguous, ``x`` itself
        included (in place: a torch tensor is rotated in place, its version
        counter bumped). An array that shares memory with ``x`` without being
        ``x``, or with another output, is refused. Left untouched (as ``x``) if
        any argument is rejected.
    workers : int, optional
        As for :func:`positional_encoding`: threads that rotate large arrays.

    Returns
    -------
    numpy.ndarray or tuple
        ``out`` (as passed), or new NumPy arrays of the shapes and dtypes of ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> import cpe
    >>> q = np.ones((1, 2, 3, 8))                       # (batch, heads, seq, head_dim)
    >>> cos, sin = cpe.rope_cos_sin(3, 8)
    >>> half = np.concatenate([-q[..., 4:], q[..., :4]], axis=-1)
    >>> bool(np.allclose(cpe.apply_rope(q), q * cos + half * sin, rtol=0, atol=1e-15))
    True
    >>> k = np.ones((1, 3, 1, 8), dtype=np.float32)     # one new token at position 7
    >>> _ = cpe.apply_rope(k, start=7, out=k)           # in place
    >>> bool(np.array_equal(cpe.apply_rope(k, start=7, inverse=True).round(6), np.ones_like(k)))
    True
    """
    as_choice(layout, "layout", ROPE_LAYOUTS)
    threads = as_workers(workers)
    if not isinstance(inverse, (bool, np.bool_)):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
    arrays, outs = _arrays(x, out)
    head_dim = arrays[0].shape[-1]
    if head_dim % 2:
        raise ValueError(f"x's rows (its last axis) must have an even length, got {head_dim}")
    for i, array in enumerate(arrays):
        if array.shape[-1] != head_dim:
            raise ValueError(
                f"x[{i}] must have rows of {head_dim} values as x[0], got shape {array.shape}"
            )
    axis = None if seq_axis is None else as_integer(seq_axis, "seq_axis")
    given = None if positions is None else as_positions(positions, "positions")
    first = 0
    if given is None:
        first = _start(start)
    else:
        _check_no_offset(start)
    leading = [array.shape[:-1] for array in arrays]
    interleaved = layout == "interleaved"
    if axes_dim is not None:
        if not (rope_parameters is None and inv_freq is None and max_position_embeddings is None
                and seq_len is None):  # fmt: skip
            raise TypeError(
                "axes_dim gives each axis the frequencies of base: it cannot be combined with "
                "rope_parameters, inv_freq, max_position_embeddings or seq_len"
            )
        if not interleaved:
            raise ValueError('axes_dim rotates interleaved pairs: it takes layout="interleaved"')
        widths = _axes_dim(axes_dim, head_dim)
        if given is None or given.ndim == 0 or given.shape[-1] != len(widths):
            raise ValueError(
                f"positions must have a last axis of len(axes_dim) = {len(widths)} with "
                f"axes_dim, got {'None' if given is None else f'shape {given.shape}'}"
            )
        points, n, rows = _points(given, leading, axis, 0, 1)
        offsets = np.cumsum([0, *widths]).tolist()
        axes: list[Axis] = [((..., i), w, offsets[i] // 2, None, 0) for i, w in enumerate(widths)]
        plan = _Plan(points, 0.0, n, rows, axes, head_dim // 2, 1.0, base, "base")
        return _apply(plan, arrays, outs, out, type(x) is not tuple, interleaved, inverse, threads)
    used = scheme_of(
        "apply_rope",
        head_dim,
        base,
        rope_parameters,
        max_position_embeddings,
        seq_len,
        inv_freq,
        lambda: _length(given, first, leading[0], axis),
    )
    for array in arrays:
        _check_amplitude(used.attention_factor, array.dtype)
    n_freq = used.width // 2
    if used.sections is None:
        table: npt.NDArray[Any] | None = None  # (positions from start)
        if given is None:
            _, n, rows = _sequence(first, leading, axis)
        else:
            table, n, rows = _points(given, leading, axis, 0, 0)
        w = used.frequencies()
        axes = [(None, used.width if w is None else w, 0, None, 0)]
        plan = _Plan(
            table, float(first), n, rows, axes, n_freq, used.attention_factor, used.base,
            used.base_name,
        )  # fmt: skip
        return _apply(plan, arrays, outs, out, type(x) is not tuple, interleaved, inverse, threads)
    if given is None:  # the same position on every axis
        sequence, n, rows = _sequence(first, leading, axis)
        points = np.broadcast_to(sequence, (3, n))
    elif given.ndim == 0 or given.shape[0] != 3:
        raise ValueError(
            "positions must have a leading axis of 3 (temporal, height, width) with "
            f"rope_parameters['mrope_section'], got shape {given.shape}"
        )
    else:
        points, n, rows = _points(given, leading, axis, 1, 0)
    frequencies = used.double_doubles()
    axes = []
    for index, which in enumerate(sections_of(used)):
        if which.size:  # the section's frequencies, from its first, at their columns
            at = int(which[0])
            columns = None if which[-1] - at == which.size - 1 else which - at
            axes.append((index, frequencies[:, which], at, columns, 0))
    plan = _Plan(points, 0.0, n, rows, axes, n_freq, used.attention_factor, None, used.base_name)
    return _apply(plan, arrays, outs, out, type(x) is not tuple, interleaved, inverse, threads)


# An axis of the angles: the index of its positions among a point's (None: the
# only one), its frequencies (the paper's of an even width, or a (2, k) array of
# double-doubles), its first frequency among all, its columns from there (None:
# consecutive), and 0 (see cpe._core.rope_apply).
Axis = tuple[Any, "int | npt.NDArray[np.float64]", int, "npt.NDArray[np.intp] | None", int]


class _Plan(NamedTuple):
    """What rotates the arrays: the positions of ``n`` points (None: ``start + i``),
    for each array the axes along which its points vary (``rows``), and the axes
    of the angles, with ``n_freq`` pairs rotated, values times ``amplitude``."""

    points: npt.NDArray[Any] | None
    start: float
    n: int
    rows: list[list[int]]
    axes: list[Axis]
    n_freq: int
    amplitude: float
    base: Any
    base_name: str


def _arrays(x: Any, out: Any) -> tuple[list[Any], list[Any] | None]:
    """``x`` and ``out`` as lists of NumPy arrays of their memory (see as_rows)."""
    single = type(x) is not tuple
    items = [x] if single else list(x)
    if not items:
        raise ValueError("x must be an array or a non-empty tuple of arrays")
    names = ["x"] if single else [f"x[{i}]" for i in range(len(items))]
    arrays = [as_rows(item, name, False) for item, name in zip(items, names, strict=True)]
    if out is None:
        return arrays, None
    if single and type(out) is tuple:
        raise TypeError("out must be an array for one array x, got a tuple")
    if not single and (type(out) is not tuple or len(out) != len(items)):
        raise TypeError(f"out must be a tuple of {len(items)} arrays, as x")
    given = [out] if single else list(out)
    out_names = ["out"] if single else [f"out[{i}]" for i in range(len(items))]
    outs = [as_rows(item, name, True) for item, name in zip(given, out_names, strict=True)]
    for array, result, name in zip(arrays, outs, out_names, strict=True):
        if result.dtype != array.dtype:
            raise TypeError(f"{name} must have the dtype of x, {array.dtype}, got {result.dtype}")
        if result.shape != array.shape:
            raise ValueError(f"{name} must have the shape of x, {array.shape}, got {result.shape}")
    for i, result in enumerate(outs):
        for j, other in enumerate(arrays):
            if _same(result, other) and i == j:
                continue
            if _shares(result, other):
                what = "x" if single else f"x[{j}]"
                raise ValueError(f"{out_names[i]} shares memory with {what} without being it: "
                                 "pass x itself (in place) or an array apart")  # fmt: skip
        for j in range(i):
            if _shares(result, outs[j]):
                raise ValueError(f"{out_names[i]} shares memory with {out_names[j]}")
    return arrays, outs


def _same(a: Any, b: Any) -> bool:
    """Whether two arrays are views of the same elements, in the same order."""
    return bool(
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.shape == b.shape
        and a.strides == b.strides
    )


def _shares(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (when too hard to tell: as if they did)."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=cast(Any, 1 << 20)))
    except np.exceptions.TooHardError:
        return True


def _start(start: Any) -> int:
    first = start if type(start) is int else as_integer(start, "start")
    if abs(first) > 2**53:
        raise ValueError("start must be an integer of magnitude <= 2**53")
    return first


def _seq_axis(axis: int | None, ndim: int, name: str) -> int:
    """``seq_axis`` (None: -2) as an index of one of the ``ndim`` leading axes."""
    a = -2 if axis is None else axis
    if not -(ndim + 1) <= a < ndim or a == -1 or a == ndim:
        raise ValueError(
            f"seq_axis must be an axis of {name} before its rows (the last axis), "
            f"from {-(ndim + 1)} to {ndim - 1} except -1, got {a}"
        )
    return a % (ndim + 1)


def _sequence(
    first: int, leading: list[tuple[int, ...]], axis: int | None
) -> tuple[npt.NDArray[np.float64], int, list[list[int]]]:
    """The positions ``first + arange(length)`` along ``seq_axis`` of every array,
    their count, and the axis of each array they vary along (none for one)."""
    rows = []
    length = None
    for i, shape in enumerate(leading):
        name = "x" if len(leading) == 1 else f"x[{i}]"
        a = _seq_axis(axis, len(shape), name)
        if length is None:
            length = shape[a]
        elif shape[a] != length:
            raise ValueError(
                f"{name} must have as many positions along seq_axis as x[0], {length}, "
                f"got {shape[a]}"
            )
        rows.append([a] if shape[a] != 1 else [])
    assert length is not None
    if abs(first + length) > 2**53:
        raise ValueError("start + the length of the sequence must be at most 2**53")
    return np.arange(first, first + length, dtype=np.float64), length, rows


def _points(
    given: npt.NDArray[Any],
    leading: list[tuple[int, ...]],
    axis: int | None,
    lead: int,
    trail: int,
) -> tuple[npt.NDArray[Any], int, list[list[int]]]:
    """The positions of the points (``lead`` leading and ``trail`` trailing axes
    of ``given`` hold a point's positions of several axes: kept), their count,
    and, for every array, the axes along which the points vary, in order."""
    shape = given.shape[lead : given.ndim - trail]
    if axis is not None and len(shape) != 1:
        raise TypeError(
            f"seq_axis places 1-D positions along an axis of x; positions of {len(shape)} "
            "dimensions broadcast against x.shape[:-1] by NumPy's rules: leave seq_axis out"
        )
    varying: list[list[int]] = []
    for i, extents in enumerate(leading):
        name = "x" if len(leading) == 1 else f"x[{i}]"
        ndim = len(extents)
        if axis is not None:
            a = _seq_axis(axis, ndim, name)
            aligned = [1] * ndim
            aligned[a] = shape[0]
        else:
            if len(shape) > ndim:
                raise ValueError(
                    f"positions of shape {shape} do not broadcast against {name}.shape[:-1] "
                    f"= {extents}"
                )
            aligned = [1] * (ndim - len(shape)) + list(shape)
        if any(p not in (1, e) for p, e in zip(aligned, extents, strict=True)):
            raise ValueError(
                f"positions of shape {shape} do not broadcast against {name}.shape[:-1] = {extents}"
            )
        varying.append([a for a in range(ndim) if aligned[a] != 1])
    # The points in C order of the positions' own axes of more than one (the
    # arrays' axes along which they vary, in the same order).
    n = math.prod(shape)
    points = given.reshape((*given.shape[:lead], n, *given.shape[given.ndim - trail :]))
    return points, n, varying


def _length(given: Any, first: int, leading: tuple[int, ...], axis: int | None) -> float | None:
    """The request's sequence length, as transformers' dynamic update takes it: the
    largest position + 1 (None: none, or positions refused later)."""
    if given is None:
        return float(first + leading[_seq_axis(axis, len(leading), "x")])
    largest = float(given.max()) if given.size else math.nan
    return largest + 1.0 if math.isfinite(largest) else None


def _offsets(extents: Sequence[int], strides: Sequence[int]) -> npt.NDArray[np.intp]:
    """The byte offsets of every index over axes of ``extents``, in C order."""
    offsets = np.zeros((), dtype=np.intp)
    for extent, stride in zip(extents, strides, strict=True):
        offsets = offsets[..., None] + np.arange(extent, dtype=np.intp) * stride
    return np.ascontiguousarray(offsets.reshape(-1))


def _target(x: Any, y: Any, varying: list[int]) -> tuple[Any, ...]:
    """What the engine reads of one array: its rows' offsets, by point and by head."""
    ndim = x.ndim - 1
    heads = [a for a in range(ndim) if a not in varying]
    shape = x.shape
    x_rows = _offsets([shape[a] for a in varying], [x.strides[a] for a in varying])
    y_rows = _offsets([shape[a] for a in varying], [y.strides[a] for a in varying])
    x_heads = _offsets([shape[a] for a in heads], [x.strides[a] for a in heads])
    y_heads = _offsets([shape[a] for a in heads], [y.strides[a] for a in heads])
    near_heads = min((abs(y.strides[a]) for a in heads if shape[a] > 1), default=0)
    near_rows = min((abs(y.strides[a]) for a in varying if shape[a] > 1), default=0)
    return (x, y, x_rows, y_rows, x_heads, y_heads, 0 < near_heads < near_rows)


def _apply(
    plan: _Plan,
    arrays: list[Any],
    outs: list[Any] | None,
    out: Any,
    single: bool,
    interleaved: bool,
    inverse: Any,
    workers: int,
) -> Any:
    """The arrays rotated into ``outs`` (or new arrays), ``out`` returned as given:
    float64 and float32 by the engine, in place when an output is its input;
    float16 and bfloat16 in float64, then rounded once into theirs."""
    results = outs if outs is not None else [np.empty_like(a, order="C") for a in arrays]
    targets = []
    narrow = []
    for array, result, varying in zip(arrays, results, plan.rows, strict=True):
        if result.dtype == np.float64 or result.dtype == np.float32:
            targets.append(_target(array, result, varying))
        else:
            wide = np.array(array, dtype=np.float64, order="C")
            narrow.append((wide, result))
            targets.append(_target(wide, wide, varying))
    rope_apply(
        targets, plan.points, plan.start, plan.n, plan.axes, plan.n_freq, interleaved,
        bool(inverse), plan.amplitude, workers, "positions", plan.base, plan.base_name,
    )  # fmt: skip
    for wide, result in narrow:
        round_into(result, wide)
    if out is None:
        return results[0] if single else tuple(results)
    return written(out)
