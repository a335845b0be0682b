"""Encodings applied to the caller's arrays: the arrays read and checked, their
positions' points laid out against them, and the engine run on them (RoPE's
rotation, which cpe.Rope.apply builds on these; the sinusoidal encoding added,
add_positional_encoding)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from cpe._args import as_integer, as_positions, as_positive, as_real, as_rows, written
from cpe._core import apply_rows, bounds_meet, encoding_axes, same_elements
from cpe._typing import Convention, Layout
from cpe._workers import as_workers

__all__ = [
    "Plan",
    "add_positional_encoding",
    "points_of",
    "read_arrays",
    "read_positions",
    "request_length",
    "rotate",
    "sequence_of",
]


class Plan(NamedTuple):
    """What changes the arrays: the positions of ``n`` points (None: ``start +
    i``); for each array, the axes along which its points vary (``rows``); the
    axes of the encoding (see cpe._core.apply_rows); RoPE's values times
    ``amplitude``, or an encoding added to the arrays' values times ``x_scale``."""

    points: npt.NDArray[Any] | None
    start: float
    n: int
    rows: list[tuple[int, ...]]
    axes: tuple[Any, ...]
    amplitude: float = 1.0
    x_scale: float = 1.0


def read_arrays(x: Any, out: Any, even: bool = True) -> tuple[list[Any], list[Any] | None]:
    """``x`` (an array or a tuple of them) and ``out`` as lists of NumPy arrays of
    their memory (see as_rows), each read once and checked: rows of one length
    (even, when ``even``: pairs), outputs of their input's shape and dtype,
    sharing memory with no other array of the call unless it is its own input
    itself."""
    single = type(x) is not tuple
    items = [x] if single else list(x)
    if not items:
        raise ValueError("x must be an array or a non-empty tuple of arrays")
    names = ["x"] if single else [f"x[{i}]" for i in range(len(items))]
    arrays = [as_rows(item, name, False) for item, name in zip(items, names, strict=True)]
    width = arrays[0].shape[-1]
    if even and (width % 2 or width < 2):
        raise ValueError(
            f"x's rows (its last axis) must have an even length of 2 or more, got {width}"
        )
    if width < 1:
        raise ValueError("x's rows (its last axis) must have one value or more, got 0")
    for i, array in enumerate(arrays):
        if array.shape[-1] != width:
            raise ValueError(
                f"x[{i}] must have rows of {width} values as x[0], got shape {array.shape}"
            )
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
            if i == j and same_elements(result, other):
                continue
            if _shares(result, other):
                what = "x" if single else f"x[{j}]"
                raise ValueError(
                    f"{out_names[i]} shares memory with {what} without being it: pass x "
                    "itself (in place) or an array apart"
                )
        for j in range(i):
            if _shares(result, outs[j]):
                raise ValueError(f"{out_names[i]} shares memory with {out_names[j]}")
    return arrays, outs


def _shares(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (when too hard to tell: as if they did)."""
    if not bounds_meet(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=cast(Any, 1 << 20)))
    except np.exceptions.TooHardError:
        return True


def read_positions(
    positions: Any, start: Any, seq_axis: Any
) -> tuple[npt.NDArray[Any] | None, int, int | None]:
    """The positions (as_positions' array, or None: a sequence from ``start``), the
    first position of that sequence (an integer of magnitude <= 2**53; 0 with
    positions, which carry their own offsets) and ``seq_axis`` (None: its
    default), each read once."""
    axis = None if seq_axis is None else as_integer(seq_axis, "seq_axis")
    if positions is None:
        first = start if type(start) is int else as_integer(start, "start")
        if abs(first) > 2**53:
            raise ValueError("start must be an integer of magnitude <= 2**53")
        return None, first, axis
    given = as_positions(positions, "positions")
    if not (type(start) is int and start == 0) and as_integer(start, "start") != 0:
        raise ValueError(
            f"start must be 0 when positions are given (add the offset to them), got start={start}"
        )
    return given, 0, axis


def _seq_axis(axis: int | None, ndim: int, name: str) -> int:
    """``seq_axis`` (None: -2) as the index of one of the ``ndim`` leading axes of
    an array of ``ndim + 1`` dimensions (its last holds the rows' values)."""
    a = -2 if axis is None else axis
    if ndim == 0:
        raise ValueError(f"seq_axis: {name} is one row (one dimension), it has no sequence axis")
    if not -(ndim + 1) <= a < ndim or a == -1:
        raise ValueError(
            f"seq_axis must be an axis of {name} before its rows (the last axis), "
            f"from {-(ndim + 1)} to {ndim - 1} except -1, got {a}"
        )
    return a % (ndim + 1)


def sequence_of(
    first: int, leading: list[tuple[int, ...]], axis: int | None
) -> tuple[int, list[tuple[int, ...]]]:
    """The count of positions ``first + arange(length)`` along ``seq_axis`` of
    every array (of leading shapes ``leading``), and the axis of each array
    along which they vary (none when the sequence has one position)."""
    rows: list[tuple[int, ...]] = []
    length = None
    for i, shape in enumerate(leading):
        name = "x" if len(leading) == 1 else f"x[{i}]"
        if not shape and axis is None:  # one row: one position, start
            length = 1 if length is None else length
            if length != 1:
                raise ValueError(f"{name} is one row, one position, but x[0] has {length}")
            rows.append(())
            continue
        a = _seq_axis(axis, len(shape), name)
        if length is None:
            length = shape[a]
        elif shape[a] != length:
            raise ValueError(
                f"{name} must have as many positions along seq_axis as x[0], {length}, "
                f"got {shape[a]}"
            )
        rows.append((a,) if shape[a] != 1 else ())
    assert length is not None
    if abs(first + length) > 2**53:
        raise ValueError("start + the length of the sequence must be at most 2**53")
    return length, rows


def points_of(
    given: npt.NDArray[Any],
    leading: list[tuple[int, ...]],
    axis: int | None,
    lead: int,
    trail: int,
) -> tuple[npt.NDArray[Any], int, list[tuple[int, ...]]]:
    """The positions ``given`` laid out against arrays of leading shapes
    ``leading`` (by NumPy's broadcasting rules; 1-D ones along ``seq_axis`` when
    it is given): their points (``lead`` leading and ``trail`` trailing axes of
    ``given`` hold a point's positions of several axes, kept), the count of
    points, and, for every array, the axes along which the points vary."""
    shape = given.shape[lead : given.ndim - trail]
    if axis is not None and len(shape) != 1:
        raise TypeError(
            f"seq_axis places 1-D positions along an axis of x; positions of {len(shape)} "
            "dimensions broadcast against x.shape[:-1] by NumPy's rules: leave seq_axis out"
        )
    varying: list[tuple[int, ...]] = []
    for i, extents in enumerate(leading):
        name = "x" if len(leading) == 1 else f"x[{i}]"
        ndim = len(extents)
        if axis is not None:
            aligned = [1] * ndim
            aligned[_seq_axis(axis, ndim, name)] = shape[0]
        elif len(shape) > ndim:
            raise ValueError(
                f"positions of shape {shape} do not broadcast against {name}.shape[:-1] = {extents}"
            )
        else:
            aligned = [1] * (ndim - len(shape)) + list(shape)
        if any(p not in (1, e) for p, e in zip(aligned, extents, strict=True)):
            raise ValueError(
                f"positions of shape {given.shape} do not broadcast against {name}.shape[:-1] "
                f"= {extents}" + (" (besides their axis of each point's positions)"
                                  if lead or trail else "")
            )  # fmt: skip
        varying.append(tuple(a for a in range(ndim) if aligned[a] != 1))
    # The points in C order of the positions' own axes (those of more than one
    # are the arrays' axes along which they vary, in the same order).
    n = math.prod(shape)
    points = given.reshape((*given.shape[:lead], n, *given.shape[given.ndim - trail :]))
    return points, n, varying


def request_length(
    given: Any, first: int, leading: tuple[int, ...], axis: int | None
) -> float | None:
    """The request's sequence length, as transformers' dynamic update takes it: the
    largest position + 1 (None: none, or positions refused later)."""
    if given is None:
        return float(first + (leading[_seq_axis(axis, len(leading), "x")] if leading else 1))
    largest = float(given.max()) if given.size else math.nan
    return largest + 1.0 if math.isfinite(largest) else None


def rotate(
    plan: Plan,
    arrays: list[Any],
    outs: list[Any] | None,
    single: bool,
    out: Any,
    interleaved: bool,
    inverse: Any,
    workers: int,
) -> Any:
    """The arrays changed into ``outs`` (or new arrays) by the engine, in place when
    an output is its input; ``out`` returned as given."""
    results = outs if outs is not None else [np.empty_like(a, order="C") for a in arrays]
    targets = [(a, r, v) for a, r, v in zip(arrays, results, plan.rows, strict=True)]
    name = "positions" if plan.points is not None else "start (and the sequence's length)"
    apply_rows(
        targets, plan.points, plan.start, plan.n, plan.axes, interleaved, bool(inverse),
        plan.amplitude, plan.x_scale, workers, name,
    )  # fmt: skip
    if out is None:
        return results[0] if single else tuple(results)
    return written(out)


def add_positional_encoding(
    x: Any,
    positions: npt.ArrayLike | None = None,
    *,
    start: SupportsIndex = 0,
    seq_axis: SupportsIndex | None = None,
    x_scale: float = 1.0,
    base: float = 10000.0,
    layout: Layout | None = None,
    freq_shift: float | None = None,
    scale: float = 1.0,
    convention: Convention | None = None,
    out: Any = None,
    workers: SupportsIndex | None = None,
) -> Any:
    """``x * x_scale`` plus the sinusoidal encoding of its positions, in one pass.

    The forward of the PyTorch tutorial (``x + pe[:S]``), fairseq
    (``embed_scale * x + positions``) and tensor2tensor's
    ``add_timing_signal_1d``: each value is computed in float64 from its own
    value and the encoding's float64 value (that of
    :func:`positional_encoding` with the same keywords) and rounded once to the
    dtype of ``x``.

    Parameters
    ----------
    x : array or tuple of arrays
        Arrays of shape ``(..., D)`` (the encoding's width is ``x.shape[-1]``) and
        dtype float64, float32, float16 or bfloat16, as for :func:`apply_rope`
        (a tuple shares the positions).
    positions : array_like, optional
        As for :func:`apply_rope`: None (the default) is ``start +
        arange(x.shape[seq_axis])`` along ``seq_axis``; else positions broadcast
        against ``x.shape[:-1]`` (1-D ones along ``seq_axis`` when it is given).
    start, seq_axis
        As for :func:`apply_rope` (``seq_axis`` -2 by default: ``(batch, seq,
        D)``).
    x_scale : float, optional
        What ``x`` is multiplied by first (fairseq's ``embed_scale``,
        ``sqrt(D)``; 1 by default).
    base, layout, freq_shift, scale, convention
        As for :func:`positional_encoding`.
    out : array or tuple of arrays, optional
        As for :func:`apply_rope`: ``x`` itself adds in place.
    workers : int, optional
        As for :func:`positional_encoding`: threads that change large arrays.

    Returns
    -------
    numpy.ndarray or tuple
        ``out`` (as passed), or new NumPy arrays of the shapes and dtypes of ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> import cpe
    >>> x = np.ones((2, 5, 8))                        # (batch, seq, D)
    >>> y = cpe.add_positional_encoding(x, x_scale=2.0)
    >>> bool(np.array_equal(y, 2.0 * x + cpe.positional_encoding_table(5, 8)))
    True
    >>> _ = cpe.add_positional_encoding(x, start=3, out=x, convention="fairseq")  # in place
    """
    threads = as_workers(workers)
    arrays, outs = read_arrays(x, out, even=False)
    axes = encoding_axes(
        arrays[0].shape[-1], as_positive(base, "base"), as_real(scale, "scale"), convention,
        layout, freq_shift,
    )  # fmt: skip
    factor = as_real(x_scale, "x_scale")
    given, first, axis = read_positions(positions, start, seq_axis)
    leading = [array.shape[:-1] for array in arrays]
    if given is None:
        n, rows = sequence_of(first, leading, axis)
        plan = Plan(None, float(first), n, rows, axes, x_scale=factor)
    else:
        points, n, rows = points_of(given, leading, axis, 0, 0)
        plan = Plan(points, 0.0, n, rows, axes, x_scale=factor)
    return rotate(plan, arrays, outs, type(x) is not tuple, out, False, False, threads)
