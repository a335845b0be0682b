"""Encodings applied to the caller's arrays: the arrays read and checked, their
positions' points laid out against them, and the engine run on them (RoPE's
rotation, which cpe.Rope.apply builds on these; the sinusoidal encoding added,
add_positional_encoding)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, SupportsIndex

import numpy as np
import numpy.typing as npt

from cpe._args import (
    as_count,
    as_integer,
    as_positions,
    as_positive,
    as_real,
    as_row_arrays,
    written,
)
from cpe._core import apply_rows, encoding_axes, positional_encoding, positional_encoding_table
from cpe._typing import Convention, Layout
from cpe._workers import as_workers

if TYPE_CHECKING:
    from cpe._typing import DType

__all__ = [
    "Plan",
    "Sinusoidal",
    "add_positional_encoding",
    "points_of",
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


def _seq_axis(axis: int | None, ndim: int, i: int, count: int) -> int:
    """``seq_axis`` (None: -2) as the index of one of the ``ndim`` leading axes of
    an array of ``ndim + 1`` dimensions (its last holds the rows' values): that
    of array ``i`` of ``count``."""
    a = -2 if axis is None else axis
    if ndim == 0:
        raise ValueError(
            f"seq_axis: {_name(i, count)} is one row (one dimension), it has no sequence axis"
        )
    if not -(ndim + 1) <= a < ndim or a == -1:
        raise ValueError(
            f"seq_axis must be an axis of {_name(i, count)} before its rows (the last axis), "
            f"from {-(ndim + 1)} to {ndim - 1} except -1, got {a}"
        )
    return a % (ndim + 1)


def _name(i: int, count: int) -> str:
    """The name of array ``i`` of the ``count`` arrays of x, in errors."""
    return "x" if count == 1 else f"x[{i}]"


def sequence_of(
    first: int, leading: list[tuple[int, ...]], axis: int | None
) -> tuple[int, list[tuple[int, ...]]]:
    """The count of positions ``first + arange(length)`` along ``seq_axis`` of
    every array (of leading shapes ``leading``), and the axis of each array
    along which they vary (none when the sequence has one position)."""
    rows: list[tuple[int, ...]] = []
    length = -1
    count = len(leading)
    for i, shape in enumerate(leading):
        if not shape and axis is None:  # one row: one position, start
            if length not in (-1, 1):
                raise ValueError(
                    f"{_name(i, count)} is one row, one position, but x[0] has {length}"
                )
            length = 1
            rows.append(())
            continue
        a = _seq_axis(axis, len(shape), i, count)
        if length == -1:
            length = shape[a]
        elif shape[a] != length:
            raise ValueError(
                f"{_name(i, count)} must have as many positions along seq_axis as x[0], {length}, "
                f"got {shape[a]}"
            )
        rows.append((a,) if shape[a] != 1 else ())
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
            a = _seq_axis(axis, ndim, i, len(leading))
            if shape[0] not in (1, extents[a]):
                raise ValueError(
                    f"positions hold {shape[0]} positions along seq_axis={axis}, but that axis "
                    f"of {name}.shape[:-1] = {extents} has {extents[a]}"
                )
            aligned = [1] * ndim
            aligned[a] = shape[0]
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
                + _broadcast_hint(len(shape), ndim)
            )  # fmt: skip
        varying.append(tuple(a for a in range(ndim) if aligned[a] != 1))
    # The points in C order of the positions' own axes (those of more than one
    # are the arrays' axes along which they vary, in the same order).
    n = math.prod(shape)
    points = given.reshape((*given.shape[:lead], n, *given.shape[given.ndim - trail :]))
    return points, n, varying


def _broadcast_hint(given: int, ndim: int) -> str:
    """What to do with positions of ``given`` axes that do not broadcast against
    ``ndim`` leading axes."""
    if given == 1:
        return "; pass seq_axis to lay 1-D positions along another axis"
    if given < ndim:
        return (
            "; NumPy's rules align the last axes: position ids of shape (batch, seq) for x "
            "of shape (batch, heads, seq, head_dim) are ids[:, None]"
        )
    return ""


def request_length(
    positions: npt.NDArray[Any] | None, first: int, count: int | None
) -> float | None:
    """The request's sequence length, as transformers' dynamic update takes it:
    the largest position + 1, that of ``count`` positions from ``first`` without
    ``positions`` (None: no position, or positions refused later, with their
    errors)."""
    if positions is None:
        assert count is not None
        return float(first + count)
    largest = float(positions.max()) if positions.size else math.nan
    return largest + 1.0 if math.isfinite(largest) else None  # (a NaN: refused later)


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
    points, start, n, rows, axes, amplitude, x_scale = plan
    results = outs if outs is not None else [np.empty_like(a, order="C") for a in arrays]
    targets = list(zip(arrays, results, rows, strict=True))
    name = "positions" if points is not None else "start (and the sequence's length)"
    apply_rows(targets, points, start, n, axes, interleaved, bool(inverse), amplitude, x_scale,
               workers, name)  # fmt: skip
    if out is None:
        return results[0] if single else tuple(results)
    return written(out)


class Sinusoidal:
    """The sinusoidal encoding parsed once: its width, frequencies and layout, for
    single positions, tables and additions, call after call.

    ``Sinusoidal(D, **keywords)`` reads and checks the keywords once;
    ``.encode(position, ...)`` is ``positional_encoding(position, D,
    **keywords, ...)``, ``.table(n, ...)`` is ``positional_encoding_table(n, D,
    **keywords, ...)`` and ``.add(x, ...)`` is ``add_positional_encoding(x,
    ..., **keywords)`` (which is this method) for ``x`` of rows of ``D`` values.

    Parameters
    ----------
    D : int
        The encoding's width, a positive integer.
    base, layout, freq_shift, scale, convention
        As for :func:`positional_encoding`.

    Examples
    --------
    >>> import numpy as np
    >>> import cpe
    >>> encoding = cpe.Sinusoidal(8, convention="fairseq")
    >>> x = np.zeros((2, 5, 8), dtype=np.float32)     # (batch, seq, D)
    >>> _ = encoding.add(x, start=2, out=x)           # positions 2 to 6, in place
    >>> bool(np.array_equal(x[1], encoding.table(5, start=2, dtype=np.float32)))
    True
    >>> bool(np.array_equal(encoding.encode(4), encoding.table(1, start=4)[0]))
    True
    """

    def __init__(
        self,
        D: SupportsIndex,
        *,
        base: float = 10000.0,
        layout: Layout | None = None,
        freq_shift: float | None = None,
        scale: float = 1.0,
        convention: Convention | None = None,
    ) -> None:
        self.D: int = as_count(D, "D", 1)
        # The keywords, each read once, as the functions take them again.
        self._keywords: dict[str, Any] = {
            "base": as_positive(base, "base"),
            "layout": layout,
            "freq_shift": None if freq_shift is None else as_real(freq_shift, "freq_shift"),
            "scale": as_real(scale, "scale"),
            "convention": convention,
        }
        self._axes = encoding_axes(self.D, **self._keywords)

    def encode(
        self,
        position: npt.ArrayLike,
        *,
        dtype: DType = None,
        out: Any = None,
        workers: SupportsIndex | None = None,
    ) -> Any:
        """The encoding of ``position``: as :func:`positional_encoding`."""
        return positional_encoding(
            position, self.D, dtype=dtype, out=out, workers=workers, **self._keywords
        )

    def table(
        self,
        n: SupportsIndex,
        *,
        start: SupportsIndex = 0,
        dtype: DType = None,
        out: Any = None,
        workers: SupportsIndex | None = None,
    ) -> Any:
        """The encodings of positions ``start`` to ``start + n - 1``: as
        :func:`positional_encoding_table`."""
        return positional_encoding_table(
            n, self.D, start=start, dtype=dtype, out=out, workers=workers, **self._keywords
        )

    def add(
        self,
        x: Any,
        positions: npt.ArrayLike | None = None,
        *,
        start: SupportsIndex = 0,
        seq_axis: SupportsIndex | None = None,
        x_scale: float = 1.0,
        out: Any = None,
        workers: SupportsIndex | None = None,
    ) -> Any:
        """``x * x_scale`` plus the encoding of its positions: as
        :func:`add_positional_encoding`."""
        arrays, outs = as_row_arrays(x, out, False)
        if arrays[0].shape[-1] != self.D:
            raise ValueError(
                f"x's rows (its last axis) must have D = {self.D} values, "
                f"got shape {arrays[0].shape}"
            )
        return self._add(arrays, outs, x, out, positions, start, seq_axis, x_scale, workers)

    def _add(
        self,
        arrays: list[Any],
        outs: list[Any] | None,
        x: Any,
        out: Any,
        positions: Any,
        start: Any,
        seq_axis: Any,
        x_scale: Any,
        workers: Any,
    ) -> Any:
        """The arrays of x (and of out), read and checked, added to (see add)."""
        threads = as_workers(workers)
        factor = as_real(x_scale, "x_scale")
        given, first, axis = read_positions(positions, start, seq_axis)
        leading = [array.shape[:-1] for array in arrays]
        if given is None:
            n, rows = sequence_of(first, leading, axis)
            plan = Plan(None, float(first), n, rows, self._axes, x_scale=factor)
        else:
            points, n, rows = points_of(given, leading, axis, 0, 0)
            plan = Plan(points, 0.0, n, rows, self._axes, x_scale=factor)
        return rotate(plan, arrays, outs, type(x) is not tuple, out, False, False, threads)


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
    arrays, outs = as_row_arrays(x, out, False)
    encoding = Sinusoidal(
        arrays[0].shape[-1], base=base, layout=layout, freq_shift=freq_shift, scale=scale,
        convention=convention,
    )  # fmt: skip
    return encoding._add(arrays, outs, x, out, positions, start, seq_axis, x_scale, workers)
