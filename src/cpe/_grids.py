"""Sinusoidal encodings of 2-D and 3-D grids (images, video), from the 1-D kernels.

Each axis is encoded once with the 1-D functions (a few rows), and the tokens are
copied from those rows (``_engine._tile_rows``), so the cost is that of writing
the output. All checks happen before anything is written into ``out``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, SupportsIndex, get_args, overload

import numpy as np
import numpy.typing as npt

from cpe._args import (
    as_choice,
    as_count,
    as_dtype,
    as_positive,
    as_real,
    written,
)
from cpe._core import (
    axis_encoding,
    prepare_out,
)
from cpe._typing import GridLayout

if TYPE_CHECKING:
    from cpe._typing import DType, Float, Out
from cpe._engine import _tile_rows
from cpe._workers import as_workers, part_bounds, part_count, run_parts

GRID_LAYOUTS = get_args(GridLayout)


def _step(numerator: float, count: int | None, scale: float, names: str) -> float:
    """The coordinate step ``numerator / count / scale``, or a ValueError naming them."""
    with np.errstate(all="ignore"):
        step = float(np.float64(numerator) / (count or 1) / scale)
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"{names} give a coordinate step beyond the range of a double")
    return step


def _axes(
    rows: int,
    columns: int,
    steps: tuple[float, float],
    width: int,
    base: float,
    dtype: np.dtype[Any],
    names: str,
    freq_shift: float = 0.0,
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """The encodings of both axes; computed once when the axes share their coordinates."""
    if steps[0] == steps[1]:
        both = axis_encoding(max(rows, columns), steps[0], width, base, dtype, names, freq_shift)
        return both[:rows], both[:columns]
    return (
        axis_encoding(rows, steps[0], width, base, dtype, names, freq_shift),
        axis_encoding(columns, steps[1], width, base, dtype, names, freq_shift),
    )


@overload
def sincos_2d(
    grid_h: SupportsIndex,
    grid_w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    layout: GridLayout = "mae",
    extra_tokens: SupportsIndex = 0,
    base_size: float | None = None,
    interpolation_scale: float = 1.0,
    freq_shift: float | None = 0.0,
    dtype: type[Float] | np.dtype[Float] = ...,
    out: None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[Float]: ...


@overload
def sincos_2d(
    grid_h: SupportsIndex,
    grid_w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    layout: GridLayout = "mae",
    extra_tokens: SupportsIndex = 0,
    base_size: float | None = None,
    interpolation_scale: float = 1.0,
    freq_shift: float | None = 0.0,
    dtype: DType = None,
    out: None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[np.floating[Any]]: ...


@overload
def sincos_2d(
    grid_h: SupportsIndex,
    grid_w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    layout: GridLayout = "mae",
    extra_tokens: SupportsIndex = 0,
    base_size: float | None = None,
    interpolation_scale: float = 1.0,
    freq_shift: float | None = 0.0,
    dtype: DType = None,
    out: Out,
    workers: SupportsIndex | None = None,
) -> Out: ...


def sincos_2d(
    grid_h: SupportsIndex,
    grid_w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    layout: GridLayout = "mae",
    extra_tokens: SupportsIndex = 0,
    base_size: float | None = None,
    interpolation_scale: float = 1.0,
    freq_shift: float | None = 0.0,
    dtype: DType = None,
    out: Any = None,
    workers: SupportsIndex | None = None,
) -> Any:
    """Sinusoidal encoding of a ``grid_h x grid_w`` grid of tokens (ViT patches).

    Tokens are in row-major order (row ``h`` outer, column ``w`` inner). With
    ``q = D // 4`` and ``w_j = base ** (-j / (q - freq_shift))`` for ``j < q``,
    each coordinate ``c`` contributes ``sin(c w_j)`` and ``cos(c w_j)``,
    arranged by ``layout``:

    * ``"mae"`` (MAE ``get_2d_sincos_pos_embed``, diffusers, and with
      ``freq_shift=1`` vit-pytorch's ``posemb_sincos_2d``):
      ``[sin(w) | cos(w) | sin(h) | cos(h)]``;
    * ``"timm"`` (timm ``build_sincos2d_pos_embed``):
      ``[sin(h) | sin(w) | cos(h) | cos(w)]``;
    * ``"timm_interleaved"`` (its ``interleave_sin_cos=True``):
      ``[sin(h) | cos(h) | sin(w) | cos(w)]``.

    Parameters
    ----------
    grid_h, grid_w : int
        Number of rows and columns, ``>= 0``; the grid need not be square.
    D : int
        Width of the encoding, a positive multiple of 4.
    base : float, optional
        Base of the frequencies (timm's ``temperature``), finite and ``> 0``.
    layout : {"mae", "timm", "timm_interleaved"}, optional
        Channel layout, as above.
    extra_tokens : int, optional
        Number of leading rows of zeros (class or register tokens).
    base_size : float, optional
        diffusers' ``base_size``: the coordinates of an axis of ``n`` tokens
        become ``i * base_size / n``. ``None`` keeps ``i``.
    interpolation_scale : float, optional
        diffusers' ``interpolation_scale``: coordinates are divided by it.
    freq_shift : float, optional
        Shifts the frequencies' denominator as in the 1-D functions' half-width
        frequencies: 0 (MAE, timm, diffusers; ``None`` is 0 too) or 1
        (vit-pytorch). ``q - freq_shift`` must be positive when ``q >= 2``; for
        ``D = 4`` the one frequency is 1.
    dtype : {float64, float32, float16, bfloat16}, optional
        Output dtype (by default float64, or the dtype of ``out`` when it is
        given); values are rounded once from float64.
    out : array, optional
        C-contiguous writable array of shape ``(extra_tokens + grid_h * grid_w, D)``
        and dtype ``dtype`` to fill: a NumPy array, or a CPU array that shares
        its memory through DLPack (a torch tensor, say) or the buffer protocol,
        returned as passed.
    workers : int, optional
        As for `positional_encoding`: threads that copy a large grid's tokens.

    Returns
    -------
    numpy.ndarray
        Array of shape ``(extra_tokens + grid_h * grid_w, D)``.

    Examples
    --------
    >>> import cpe
    >>> pe = cpe.sincos_2d(2, 3, 8)
    >>> pe.shape
    (6, 8)
    >>> pe[0].tolist()      # token (h=0, w=0)
    [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    >>> bool((pe[4, 4:] == cpe.positional_encoding(1, 4, layout="sin_cos")).all())  # h=1
    True
    >>> vit = cpe.sincos_2d(2, 3, 16, freq_shift=1)    # w_j = base ** (-j / 3)
    >>> bool((vit[4, 8:] == cpe.positional_encoding(1, 8, layout="sin_cos", freq_shift=1)).all())
    True
    """
    rows = as_count(grid_h, "grid_h", 0)
    columns = as_count(grid_w, "grid_w", 0)
    width = as_count(D, "D", 1)
    if width % 4:
        raise ValueError(f"D must be a multiple of 4 for a 2-D encoding, got {width}")
    extra = as_count(extra_tokens, "extra_tokens", 0)
    as_choice(layout, "layout", GRID_LAYOUTS)
    b = as_positive(base, "base")
    scale = as_positive(interpolation_scale, "interpolation_scale")
    size = None if base_size is None else as_positive(base_size, "base_size")
    shift = 0.0 if freq_shift is None else as_real(freq_shift, "freq_shift")
    if width // 4 >= 2 and not width // 4 - shift > 0:
        raise ValueError(
            f"freq_shift={shift!r} needs D // 4 - freq_shift > 0 for a 2-D encoding, got D={width}"
        )
    dt = as_dtype(dtype, out)
    threads = as_workers(workers)
    result = prepare_out(
        out, (extra + rows * columns, width), dt, "grid_h, grid_w, extra_tokens and D"
    )

    names = "base_size and interpolation_scale"
    step_h = _step(1.0 if size is None else size, None if size is None else rows, scale, names)
    step_w = _step(1.0 if size is None else size, None if size is None else columns, scale, names)
    # Written through an ndarray view: out= may be a subclass (np.matrix) whose
    # reshape would not give three dimensions.
    view = np.asarray(result)
    if not rows or not columns:  # no grid tokens: no axis to encode, however long
        view[:extra] = 0
        return result if out is None else written(out)
    enc_h, enc_w = _axes(
        rows, columns, (step_h, step_w), width // 2, b, dt, f"grid_h, grid_w and {names}", shift
    )
    view[:extra] = 0
    _fill_grid(view[extra:], enc_h, enc_w, layout, threads)
    return result if out is None else written(out)


def _fill_grid(
    view: npt.NDArray[Any],
    enc_h: npt.NDArray[Any],
    enc_w: npt.NDArray[Any],
    layout: str,
    workers: int,
) -> None:
    """Write the tokens of the grid (C-contiguous ``view``, rows*columns x D) from
    the encodings of its axes (``[sin | cos]`` rows of width D/2)."""
    half, quarter = view.shape[-1] // 2, view.shape[-1] // 4
    if layout == "mae":  # (source: 0 for enc_h, 1 for enc_w, from, to, length)
        segments = [(1, 0, 0, half), (0, 0, half, half)]
    elif layout == "timm":
        segments = [
            (0, 0, 0, quarter),
            (1, 0, quarter, quarter),
            (0, quarter, half, quarter),
            (1, quarter, half + quarter, quarter),
        ]
    else:
        segments = [(0, 0, 0, half), (1, 0, half, half)]
    _tile(view, enc_h, enc_w, segments, workers)


def _tile(
    view: npt.NDArray[Any],
    first: npt.NDArray[Any],
    second: npt.NDArray[Any],
    segments: list[tuple[int, int, int, int]],
    workers: int,
) -> None:
    """Row ``i * len(second) + j`` of ``view`` from rows ``i`` of ``first`` and
    ``j`` of ``second``; ``segments`` in columns (see ``_engine._tile_rows``). Large
    views are split by rows of ``first`` among up to ``workers`` threads."""
    size = view.itemsize
    as_bytes = [(source, a * size, b * size, n * size) for source, a, b, n in segments]
    out = view.view(np.uint8)
    rows = np.ascontiguousarray(first).view(np.uint8)
    columns = np.ascontiguousarray(second).view(np.uint8)
    parts = part_count(workers, len(rows), out.nbytes)
    bounds = part_bounds(len(rows), parts, len(columns) * out.shape[1], (out.ctypes.data,))

    def part(k: int) -> None:
        first_row, stop = bounds[k], bounds[k + 1]
        width = len(columns)
        _tile_rows(out[first_row * width : stop * width], rows[first_row:stop], columns, as_bytes)

    run_parts(part, parts)


@overload
def sincos_3d(
    t: SupportsIndex,
    h: SupportsIndex,
    w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    temporal_interpolation_scale: float = 1.0,
    spatial_interpolation_scale: float = 1.0,
    dtype: type[Float] | np.dtype[Float] = ...,
    out: None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[Float]: ...


@overload
def sincos_3d(
    t: SupportsIndex,
    h: SupportsIndex,
    w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    temporal_interpolation_scale: float = 1.0,
    spatial_interpolation_scale: float = 1.0,
    dtype: DType = None,
    out: None = None,
    workers: SupportsIndex | None = None,
) -> npt.NDArray[np.floating[Any]]: ...


@overload
def sincos_3d(
    t: SupportsIndex,
    h: SupportsIndex,
    w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    temporal_interpolation_scale: float = 1.0,
    spatial_interpolation_scale: float = 1.0,
    dtype: DType = None,
    out: Out,
    workers: SupportsIndex | None = None,
) -> Out: ...


def sincos_3d(
    t: SupportsIndex,
    h: SupportsIndex,
    w: SupportsIndex,
    D: SupportsIndex,
    *,
    base: float = 10000.0,
    temporal_interpolation_scale: float = 1.0,
    spatial_interpolation_scale: float = 1.0,
    dtype: DType = None,
    out: Any = None,
    workers: SupportsIndex | None = None,
) -> Any:
    """Sinusoidal encoding of a ``t x h x w`` video grid, as diffusers'
    ``get_3d_sincos_pos_embed``.

    The channels are split as ``[time (D/4) | space (3D/4)]``: the time block is
    ``[sin | cos]`` of the frame index with ``w_j = base ** (-j / (D/8))``, and the
    space block is ``sincos_2d(h, w, 3 * D // 4)`` (layout ``"mae"``). Frame
    indices are divided by ``temporal_interpolation_scale``, spatial
    coordinates by ``spatial_interpolation_scale``.

    Parameters
    ----------
    t, h, w : int
        Number of frames, rows and columns, ``>= 0``.
    D : int
        Width of the encoding, a positive multiple of 16 (so that every block
        splits evenly into sines and cosines).
    base : float, optional
        Base of the frequencies, finite and ``> 0``.
    temporal_interpolation_scale, spatial_interpolation_scale : float, optional
        Divisors of the frame and spatial coordinates, ``> 0``.
    dtype : {float64, float32, float16, bfloat16}, optional
        Output dtype (by default float64, or the dtype of ``out`` when it is
        given); values are rounded once from float64.
    out : array, optional
        C-contiguous writable array of shape ``(t, h * w, D)`` and dtype ``dtype``
        to fill: a NumPy array, or a CPU array that shares its memory through
        DLPack (a torch tensor, say) or the buffer protocol, returned as passed.
    workers : int, optional
        As for `positional_encoding`: threads that copy a large grid's tokens.

    Returns
    -------
    numpy.ndarray
        Array of shape ``(t, h * w, D)``: frame, token (row-major), channel.

    Examples
    --------
    >>> import cpe
    >>> pe = cpe.sincos_3d(2, 3, 4, 32)
    >>> pe.shape
    (2, 12, 32)
    >>> bool((pe[1, :, 24:] == pe[0, :, 24:]).all())   # space does not depend on time
    True
    """
    frames = as_count(t, "t", 0)
    rows = as_count(h, "h", 0)
    columns = as_count(w, "w", 0)
    width = as_count(D, "D", 1)
    if width % 16:
        raise ValueError(f"D must be a multiple of 16 for a 3-D encoding, got {width}")
    b = as_positive(base, "base")
    time_scale = as_positive(temporal_interpolation_scale, "temporal_interpolation_scale")
    space_scale = as_positive(spatial_interpolation_scale, "spatial_interpolation_scale")
    dt = as_dtype(dtype, out)
    threads = as_workers(workers)
    result = prepare_out(out, (frames, rows * columns, width), dt, "t, h, w and D")

    time_step = _step(1.0, None, time_scale, "temporal_interpolation_scale")
    space_step = _step(1.0, None, space_scale, "spatial_interpolation_scale")
    if not (frames and rows and columns):  # nothing to encode, however long an axis
        return result if out is None else written(out)
    # Every axis is encoded (and its coordinates checked) before out is written.
    time_width = width // 4
    enc_t = axis_encoding(
        frames, time_step, time_width, b, dt, "t and temporal_interpolation_scale"
    )
    enc_h, enc_w = _axes(
        rows,
        columns,
        (space_step, space_step),
        (width - time_width) // 2,
        b,
        dt,
        "h, w and spatial_interpolation_scale",
    )
    space = np.empty((rows * columns, width - time_width), dt)
    _fill_grid(space, enc_h, enc_w, "mae", threads)
    view = np.asarray(result)  # see sincos_2d
    _tile(
        view.reshape(frames * rows * columns, width),
        enc_t,
        space,
        [(0, 0, 0, time_width), (1, 0, time_width, width - time_width)],
        threads,
    )
    return result if out is None else written(out)
