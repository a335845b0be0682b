"""Rotary position embedding (RoPE) tables: the cos and sin that rotate q and k."""

from __future__ import annotations

import marshal
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex, get_args, overload

import numpy as np
import numpy.typing as npt

from cpe._apply import (
    Plan,
    points_of,
    read_positions,
    request_length,
    rotate,
    sequence_of,
)
from cpe._args import (
    as_choice,
    as_count,
    as_dtype,
    as_integer,
    as_positions,
    as_positive,
    as_row_arrays,
    as_sequence,
    table_start,
    written,
)
from cpe._core import (
    MAX_AXES,
    rope_axes,
    rope_fill,
    rope_tables,
)
from cpe._scaling import _SCHEMES, Scheme, layer_parameters, scheme
from cpe._typing import RopeLayout

if TYPE_CHECKING:
    from cpe._typing import DType, Float, Out, Out2
from cpe._workers import as_workers

ROPE_LAYOUTS = get_args(RopeLayout)


@overload
def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: SupportsIndex,
    *,
    base: float = 10000.0,
    start: SupportsIndex = 0,
    layout: RopeLayout = "half",
    dtype: type[Float] | np.dtype[Float] = ...,
    out: None = None,
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    inv_freq: npt.ArrayLike | None = None,
    axes_dim: Sequence[SupportsIndex] | None = None,
    layer_type: str | None = None,
    workers: SupportsIndex | None = None,
) -> tuple[npt.NDArray[Float], npt.NDArray[Float]]: ...


@overload
def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: SupportsIndex,
    *,
    base: float = 10000.0,
    start: SupportsIndex = 0,
    layout: RopeLayout = "half",
    dtype: DType = None,
    out: None = None,
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    inv_freq: npt.ArrayLike | None = None,
    axes_dim: Sequence[SupportsIndex] | None = None,
    layer_type: str | None = None,
    workers: SupportsIndex | None = None,
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]: ...


@overload
def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: SupportsIndex,
    *,
    base: float = 10000.0,
    start: SupportsIndex = 0,
    layout: RopeLayout = "half",
    dtype: DType = None,
    out: tuple[Out, Out2],
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    inv_freq: npt.ArrayLike | None = None,
    axes_dim: Sequence[SupportsIndex] | None = None,
    layer_type: str | None = None,
    workers: SupportsIndex | None = None,
) -> tuple[Out, Out2]: ...


def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: SupportsIndex,
    *,
    base: float = 10000.0,
    start: SupportsIndex = 0,
    layout: RopeLayout = "half",
    dtype: DType = None,
    out: tuple[Any, Any] | None = None,
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    inv_freq: npt.ArrayLike | None = None,
    axes_dim: Sequence[SupportsIndex] | None = None,
    layer_type: str | None = None,
    workers: SupportsIndex | None = None,
) -> Any:
    """The ``(cos, sin)`` tables of rotary position embeddings.

    With ``w_j = base ** (-2j / head_dim)`` for ``j < head_dim / 2``, position
    ``p`` gets ``cos(p w_j)`` and ``sin(p w_j)`` with every frequency used twice:

    * ``"half"`` (HF Llama, GPT-NeoX ``rotate_half``): the columns are
      ``[w_0 ... w_{d/2-1}, w_0 ... w_{d/2-1}]``;
    * ``"interleaved"`` (GPT-J, RoFormer): ``[w_0, w_0, w_1, w_1, ...]``.

    Values are computed with double-double angles and rounded once to ``dtype``,
    so float32 tables stay within 3e-8 of the exact values at long context
    (positions up to 1e6), where float32 rotary caches are off by ~1e-2.

    Parameters
    ----------
    n : int or array_like of int or float
        A Python ``int``: a count, the rows are positions ``start ... start +
        n - 1``. Anything else holds the positions themselves (position ids of
        any shape): an array, a tensor, a float, and a NumPy integer or 0-d
        array too, which is one position (tables of shape ``(head_dim,)``), as
        :func:`positional_encoding` reads it.
    head_dim : int
        Width of each table, a positive even number.
    base : float, optional
        RoPE's ``theta`` (10000 in the paper, 500000 in Llama 3), ``> 0``.
    start : int, optional
        First position when ``n`` is an integer. With positions for ``n`` it
        must be 0: add an offset to the positions themselves.
    layout : {"half", "interleaved"}, optional
        Column order, as above.
    dtype : {float64, float32, float16, bfloat16}, optional
        Output dtype: by default float64, or the dtype of ``out`` when it is
        given.
    out : tuple of two arrays, optional
        ``(cos, sin)`` arrays to fill, as NumPy's ufuncs take ``out=`` for two
        outputs (NumPy arrays, or CPU arrays that share their memory through
        DLPack or the buffer protocol, returned as passed): each writable,
        C-contiguous, of the output's shape and dtype ``dtype``, and not
        sharing memory with the other. Refilling the same
        arrays saves the page faults of new ones (for large tables, most of
        the time of a call; float16 tables are still computed in a new float64
        array). Both are left untouched if any argument is rejected.
    rope_parameters : mapping, optional
        A model config's ``rope_parameters`` (or older ``rope_scaling``): the
        scaled frequencies and attention factor of :func:`rope_frequencies`,
        whose tables have ``rotary_dim`` columns and are multiplied by the
        attention factor. With ``mrope_section`` (multimodal RoPE, Qwen2-VL and
        later), positions ``n`` have a leading axis of 3 (temporal, height,
        width), or of 1 (the same on every axis: transformers' text ids of one
        sequence, ``(1, seq)``): frequency ``j`` takes the positions of its section's
        axis (in three runs, or with ``mrope_interleaved`` as Qwen3-VL
        interleaves them; Qwen3-VL's configs say ``"mrope_interleaved": True``),
        and the tables have the shape ``n.shape[1:] + (rotary_dim,)``. Text ids
        of shape ``(batch, seq)`` are ``np.broadcast_to(ids, (3, *ids.shape))``
        (transformers expands them so); an integer ``n`` (text: one position on
        every axis) gives the plain table.
    max_position_embeddings, seq_len : int, optional
        As for :func:`rope_frequencies`; ``seq_len`` defaults to the largest
        position + 1 (``start + n`` for a table), as transformers' dynamic
        update takes it.
    inv_freq : array_like, optional
        ``head_dim // 2`` frequencies to use instead, taken as exact.
    axes_dim : sequence of int, optional
        Axial RoPE (diffusers' ``FluxPosEmbed(theta, axes_dim)``, with
        ``layout="interleaved"``): positions ``n`` of shape ``(..., len(axes_dim))``,
        axis ``i`` encoded with the frequencies of width ``axes_dim[i]`` (each
        even), the tables of the axes side by side; ``head_dim`` must be their
        sum. Combines with ``base`` only.
    layer_type : str, optional
        With ``rope_parameters`` in transformers' per-layer form (a mapping of
        layer types to parameters, as Gemma 3 configs carry it): the layer type
        whose parameters to use, such as ``"full_attention"``.
    workers : int, optional
        As for `positional_encoding`: threads that fill large tables.

    Returns
    -------
    cos, sin : numpy.ndarray
        Each of shape ``(n, rotary_dim)``, or ``positions.shape + (rotary_dim,)``
        (``rotary_dim`` is ``head_dim`` unless ``partial_rotary_factor`` says
        otherwise; multimodal: ``positions.shape[1:] + (rotary_dim,)``, axial:
        ``positions.shape[:-1] + (head_dim,)``): the arrays of ``out``, or the
        two halves of one new allocation (either keeps the memory of both).

    Examples
    --------
    >>> import numpy as np
    >>> import cpe
    >>> cos, sin = cpe.rope_cos_sin(4, 8)
    >>> cos.shape, sin.shape
    ((4, 8), (4, 8))
    >>> bool(np.array_equal(cos[:, :4], cos[:, 4:]))     # "half": frequencies repeat
    True
    >>> cos, sin = cpe.rope_cos_sin(np.array([[3, 1]]), 4, layout="interleaved")
    >>> sin[0, 1].round(4).tolist()
    [0.8415, 0.8415, 0.01, 0.01]
    >>> cos_buffer = np.empty((4, 8), dtype=np.float32)   # refilled call after call
    >>> sin_buffer = np.empty_like(cos_buffer)
    >>> cos, sin = cpe.rope_cos_sin(4, 8, start=100, dtype=np.float32,
    ...                             out=(cos_buffer, sin_buffer))
    >>> cos is cos_buffer and sin is sin_buffer
    True
    >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    >>> cos, sin = cpe.rope_cos_sin(8, 64, rope_parameters=yarn)
    >>> round(float(cos[0, 0]), 6)                       # the attention factor
    1.138629
    >>> qwen2_vl = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    >>> thw = np.array([[[0, 1, 2]], [[0, 4, 4]], [[0, 5, 6]]])   # (3, batch, seq)
    >>> cos, sin = cpe.rope_cos_sin(thw, 16, rope_parameters=qwen2_vl)
    >>> cos.shape
    (1, 3, 16)
    >>> cos, sin = cpe.rope_cos_sin(np.array([[0, 2, 3]]), 16, axes_dim=(4, 6, 6),
    ...                             layout="interleaved")   # Flux: (tokens, axes)
    >>> bool(np.array_equal(sin[:, 4:10], cpe.rope_cos_sin([2], 6, layout="interleaved")[1]))
    True
    """
    rope = Rope._parsed(
        "rope_cos_sin",
        head_dim,
        base,
        layout,
        rope_parameters,
        max_position_embeddings,
        seq_len,
        inv_freq,
        axes_dim,
        layer_type,
    )
    return rope.cos_sin(n, start=start, dtype=dtype, out=out, workers=workers)


class Rope:
    """Rotary position embedding (RoPE) parsed once: its scheme, exact frequencies
    and layout, for tables and for rotations, call after call.

    ``Rope(head_dim, **keywords).cos_sin(n, ...)`` is ``rope_cos_sin(n,
    head_dim, **keywords, ...)`` and ``.apply(x, ...)`` is ``apply_rope(x, ...)``
    with the same keywords (both functions are these methods): the config is
    read and checked here, once, so that a decoding loop pays for it once. A
    scheme that adapts to the request's length (``"dynamic"``, or
    ``"longrope"`` without ``seq_len``) is made again at each call, from the
    copy of ``rope_parameters`` read here.

    Parameters
    ----------
    head_dim : int
        The attention head's width, a positive even number.
    base, layout, rope_parameters, max_position_embeddings, seq_len, inv_freq, axes_dim, layer_type
        As for :func:`rope_cos_sin`.

    Examples
    --------
    >>> import numpy as np
    >>> import cpe
    >>> rope = cpe.Rope(8, rope_parameters={"rope_type": "linear", "factor": 2.0})
    >>> cos, sin = rope.cos_sin(5)
    >>> cos.shape
    (5, 8)
    >>> q = np.ones((1, 2, 1, 8))                      # one new token at position 4
    >>> _ = rope.apply(q, start=4, out=q)              # rotated in place
    >>> bool(q[0, 0, 0, 0] == cos[4, 0] - sin[4, 0])   # x * cos + rotate_half(x) * sin
    True
    """

    def __init__(
        self,
        head_dim: SupportsIndex,
        *,
        base: float = 10000.0,
        layout: RopeLayout = "half",
        rope_parameters: Mapping[str, Any] | None = None,
        max_position_embeddings: SupportsIndex | None = None,
        seq_len: SupportsIndex | None = None,
        inv_freq: npt.ArrayLike | None = None,
        axes_dim: Sequence[SupportsIndex] | None = None,
        layer_type: str | None = None,
    ) -> None:
        self._parse(
            "Rope",
            head_dim,
            base,
            layout,
            rope_parameters,
            max_position_embeddings,
            seq_len,
            inv_freq,
            axes_dim,
            layer_type,
        )

    @classmethod
    def _parsed(cls, function: str, *arguments: Any) -> Rope:
        """A Rope of ``arguments`` (those of __init__, in order), its errors naming
        ``function``."""
        rope = cls.__new__(cls)
        rope._parse(function, *arguments)
        return rope

    def _parse(
        self,
        function: str,
        head_dim: Any,
        base: Any,
        layout: Any,
        rope_parameters: Any,
        max_position_embeddings: Any,
        seq_len: Any,
        inv_freq: Any,
        axes_dim: Any,
        layer_type: Any,
    ) -> None:
        self.head_dim: int = _head_dim(head_dim)
        self.layout: str = as_choice(layout, "layout", ROPE_LAYOUTS)
        self._interleaved = self.layout == "interleaved"
        self._widths: list[int] | None = None
        self._used: Scheme | None = None
        self._again: tuple[Any, ...] | None = None  # a scheme made again at each call
        self._applied: tuple[Any, ...] | None = None  # (see _core.rope_axes)
        self._tables: tuple[Any, ...] | None = None  # (see _table_axes)
        if axes_dim is not None:
            if not (rope_parameters is None and inv_freq is None and max_position_embeddings is None
                    and seq_len is None and layer_type is None):  # fmt: skip
                raise TypeError(
                    "axes_dim gives each axis the frequencies of base: it cannot be combined "
                    "with rope_parameters, inv_freq, max_position_embeddings, seq_len or "
                    "layer_type"
                )
            self._widths = _axes_dim(axes_dim, self.head_dim)
            self._base = as_positive(base, "base")
            return
        parameters = layer_parameters(rope_parameters, layer_type)
        asked: list[bool] = []

        def length() -> None:
            asked.append(True)

        self._used = scheme_of(
            function,
            self.head_dim,
            base,
            parameters,
            max_position_embeddings,
            seq_len,
            inv_freq,
            length,
        )
        if asked:  # (rope_parameters' copy, read once; the other arguments are numbers)
            self._again = (base, parameters, max_position_embeddings, seq_len)

    def _scheme(self, length: Callable[[], float | None]) -> Scheme:
        """The scheme of a request, whose length ``length()`` gives."""
        if self._again is None:
            assert self._used is not None
            return self._used
        base, parameters, max_position_embeddings, seq_len = self._again
        return scheme(self.head_dim, base, parameters, max_position_embeddings, seq_len, length)

    def cos_sin(
        self,
        n: int | npt.ArrayLike,
        *,
        start: SupportsIndex = 0,
        dtype: DType = None,
        out: tuple[Any, Any] | None = None,
        workers: SupportsIndex | None = None,
    ) -> Any:
        """The ``(cos, sin)`` tables of positions ``n``: as :func:`rope_cos_sin`."""
        if out is not None and (type(out) is not tuple or len(out) != 2):
            raise TypeError(f"out must be a tuple (cos, sin) of two arrays, got {_kind(out)}")
        output_dtype = as_dtype(dtype, None if out is None else out[0], "out[0] (cos)")
        threads = as_workers(workers)
        if isinstance(n, (bool, np.bool_)):
            raise TypeError("n must be an integer or an array of positions, got bool")
        # n is read once: a count of rows (an integer scalar), or positions.
        count, positions = _count_or_positions(n)
        if self._widths is not None:
            if positions is None:
                raise TypeError(
                    "n must be an array of positions of shape (..., len(axes_dim)) with "
                    "axes_dim, got an integer"
                )
            _check_no_offset(start)
            return self._axial(positions, output_dtype, out, threads)
        first = 0
        if count is not None:
            first = table_start(start, count)
        else:
            _check_no_offset(start)
            if self._again is not None:  # (a private copy: the length and the angles agree)
                positions = np.array(positions)
        used = self._scheme(lambda: request_length(positions, first, count))
        _check_amplitude(used.attention_factor, output_dtype)
        if positions is not None and used.sections is not None:
            return self._multimodal(positions, used, output_dtype, out, threads)
        # One table, whose (used.width) columns are all one axis': the frequencies are
        # made once its sizes are checked, if it has any rows.
        b = as_positive(used.base, used.base_name)
        if count is not None:
            shape, sizes, name = (count, used.width), "n and head_dim", "start and n"
        else:
            assert positions is not None
            shape, sizes = (*positions.shape, used.width), "n (the positions) and head_dim"
            name = "n (the positions)"
        cos, sin = rope_tables(out, shape, output_dtype, sizes)
        axes = None
        if math.prod(shape[:-1]):
            used.check_reach(lambda: _reach(positions, first, count))
            w = used.frequencies()
            half = used.width // 2
            axes = rope_axes([(None, used.width if w is None else w, 0, None, -1)], b,
                             used.base_name, half, self._interleaved, half)  # fmt: skip
        rope_fill(cos, sin, output_dtype, positions, float(first), axes, self._interleaved,
                  used.attention_factor, threads, name)  # fmt: skip
        return (cos, sin) if out is None else written(out)

    def _table_axes(self, used: Scheme | None) -> tuple[Any, ...]:
        """The axes of the tables of several axes (see rope_fill): of the
        multimodal scheme ``used``, or (None) axial; kept while the scheme is,
        as the axes of its rotations are (a one-axis table finds its encoding at
        once)."""
        if self._tables is not None:
            return self._tables
        interleaved = self._interleaved
        layout = b"ti" if interleaved else b"th"
        if used is None:
            assert self._widths is not None
            widths, base, half = self._widths, self._base, self.head_dim // 2
            offsets = np.cumsum([0, *widths]).tolist()
            tables = _kept_axes(
                layout + b"a" + marshal.dumps((widths, base), 2),
                lambda: rope_axes([(i, width, offsets[i], None, -1)
                                   for i, width in enumerate(widths)],
                                  base, "base", half, interleaved, half),
            )  # fmt: skip
        else:  # each section's frequencies, one encoding, into their columns

            def sections() -> tuple[Any, ...]:
                half = used.width // 2
                frequencies = used.double_doubles()
                axes = [(section.axis, section.of(frequencies),
                         2 * section.first if interleaved else section.first, section.offsets,
                         -1 if interleaved else half)
                        for section in used.axis_sections]  # fmt: skip
                return rope_axes(axes, None, "base", half, interleaved, half)

            tables = _kept_axes(None if used.key is None else layout + used.key, sections)
        if self._again is None:
            self._tables = tables
        return tables

    def _multimodal(
        self,
        positions: npt.NDArray[Any],
        used: Scheme,
        dtype: Any,
        out: tuple[Any, Any] | None,
        workers: int,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Multimodal RoPE: the frequencies of each section at the positions of its axis."""
        positions = _three_axes(positions, "n (the positions)")
        if positions.size:
            used.check_reach(lambda: _reach(positions, 0, None))
        shape = (*positions.shape[1:], used.width)
        cos, sin = rope_tables(out, shape, dtype, "n (the positions) and head_dim")
        axes = self._table_axes(used) if math.prod(shape) else None
        rope_fill(cos, sin, dtype, positions, 0.0, axes, self._interleaved,
                  used.attention_factor, workers, "n (the positions)")  # fmt: skip
        return (cos, sin) if out is None else written(out)

    def _axial(
        self,
        positions: npt.NDArray[Any],
        dtype: Any,
        out: tuple[Any, Any] | None,
        workers: int,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Axial RoPE: axis ``i`` of the positions with frequencies of width
        ``axes_dim[i]``."""
        assert self._widths is not None
        if positions.ndim == 0 or positions.shape[-1] != len(self._widths):
            raise ValueError(
                f"n (the positions) must have a last axis of len(axes_dim) = "
                f"{len(self._widths)}, got shape {positions.shape}"
            )
        shape = (*positions.shape[:-1], self.head_dim)
        cos, sin = rope_tables(out, shape, dtype, "n (the positions) and head_dim")
        axes = self._table_axes(None) if math.prod(shape) else None
        rope_fill(cos, sin, dtype, _axis_major(positions), 0.0, axes, self._interleaved, 1.0,
                  workers, "n (the positions)")  # fmt: skip
        return (cos, sin) if out is None else written(out)

    def apply(
        self,
        x: Any,
        positions: npt.ArrayLike | None = None,
        *,
        start: SupportsIndex = 0,
        seq_axis: SupportsIndex | None = None,
        inverse: bool = False,
        out: Any = None,
        workers: SupportsIndex | None = None,
    ) -> Any:
        """``x`` rotated by the angles of its positions: as :func:`apply_rope`."""
        arrays, outs = as_row_arrays(x, out, True)
        if arrays[0].shape[-1] != self.head_dim:
            raise ValueError(
                f"x's rows (its last axis) must have head_dim = {self.head_dim} values, "
                f"got shape {arrays[0].shape}"
            )
        return self._apply(
            arrays, outs, type(x) is not tuple, out, positions, start, seq_axis, inverse, workers
        )

    def _apply(
        self,
        arrays: list[Any],
        outs: list[Any] | None,
        single: bool,
        out: Any,
        positions: Any,
        start: Any,
        seq_axis: Any,
        inverse: Any,
        workers: Any,
    ) -> Any:
        """The arrays of x (and of out), read and checked, rotated (see apply)."""
        threads = as_workers(workers)
        if not isinstance(inverse, (bool, np.bool_)):
            raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
        given, first, axis = read_positions(positions, start, seq_axis)
        leading = [array.shape[:-1] for array in arrays]
        half = self.head_dim // 2
        if self._widths is not None:
            if not self._interleaved:
                raise ValueError(
                    'axes_dim rotates interleaved pairs: it takes layout="interleaved"'
                )
            widths = self._widths
            if given is None or given.ndim == 0 or given.shape[-1] != len(widths):
                raise ValueError(
                    f"positions must have a last axis of len(axes_dim) = {len(widths)} with "
                    f"axes_dim, got {'None' if given is None else f'shape {given.shape}'}"
                )
            points, n, rows = points_of(given, leading, axis, 0, 1)
            if self._applied is None:
                offsets = np.cumsum([0, *widths]).tolist()
                base = self._base
                self._applied = _kept_axes(
                    b"ra" + marshal.dumps((widths, base), 2),
                    lambda: rope_axes([(i, w, offsets[i] // 2, None, 0)
                                       for i, w in enumerate(widths)], base, "base", half),
                )  # fmt: skip
            plan = Plan(_axis_major(points), 0.0, n, rows, self._applied)
        else:
            count = None
            if given is None:
                count, rows = sequence_of(first, leading, axis)
            elif self._again is not None:  # (a private copy: the length and the angles agree)
                given = np.array(given)
            used = self._used
            if used is None or self._again is not None:
                used = self._scheme(lambda: request_length(given, first, count))
            for array in arrays:
                _check_amplitude(used.attention_factor, array.dtype)
            table: npt.NDArray[Any] | None = None  # (positions from start)
            if used.sections is None:
                if given is None:
                    assert count is not None
                    n = count
                else:
                    table, n, rows = points_of(given, leading, axis, 0, 0)
                start_at = float(first)
            else:
                start_at = 0.0
                if given is None:  # the same position on every axis
                    assert count is not None
                    n = count
                    sequence = np.arange(first, first + n, dtype=np.float64)
                    table = np.broadcast_to(sequence, (3, n))
                else:
                    table, n, rows = points_of(_three_axes(given, "positions"), leading, axis, 1, 0)
            if table is not None or n:
                used.check_reach(lambda: _reach(table, first, n))
            axes = self._applied if self._again is None else None
            if axes is None:
                axes = _applied_axes(used)
                if self._again is None:
                    self._applied = axes
            plan = Plan(table, start_at, n, rows, axes, used.attention_factor)
        return rotate(plan, arrays, outs, single, out, self._interleaved, inverse, threads)


def _held_bytes(axes: tuple[Any, ...]) -> int:
    """The bytes of the arrays that what rope_axes returns holds: the axes'
    frequencies and columns, their encodings' frequencies, the column map."""
    axis_list, encodings, *_, columns = axes
    arrays = [a for axis in axis_list for a in axis if isinstance(a, np.ndarray)]
    arrays += [encoding.frequencies for encoding in encodings]
    if columns is not None:
        arrays.append(columns)
    return sum(a.nbytes for a in arrays)


def _applied_axes(used: Scheme) -> tuple[Any, ...]:
    """The axes of the angles of a scheme, for RoPE applied (see _apply.Plan)."""

    def make() -> tuple[Any, ...]:
        if used.sections is None:
            w = used.frequencies()
            return rope_axes([(None, used.width if w is None else w, 0, None, 0)], used.base,
                             used.base_name, used.width // 2)  # fmt: skip
        frequencies = used.double_doubles()
        axes = [  # each section's frequencies, from its first, at their columns
            (section.axis, section.of(frequencies), section.first, section.offsets, 0)
            for section in used.axis_sections
        ]
        return rope_axes(axes, None, used.base_name, used.width // 2)

    return _kept_axes(None if used.key is None else b"r" + used.key, make)


def _kept_axes(key: bytes | None, make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """What ``make()`` returns (rope_axes' axes), kept in _SCHEMES under ``key``
    beside its scheme (None: made at every call), for every Rope of the same
    encoding: each call of the functions (rope_cos_sin, apply_rope) makes one."""
    kept = _SCHEMES.get(key) if key is not None else None
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    axes = make()
    return axes if key is None else _SCHEMES.keep(key, axes, _held_bytes(axes))


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
    layer_type: str | None = None,
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
        leading axis of 3, or 1, more; axial RoPE: a last axis of ``len(axes_dim)``
        more). A 1-D array with ``seq_axis`` lies along that axis. None (the
        default): ``start + arange(x.shape[seq_axis])`` along ``seq_axis``.
    start : int, optional
        The first position when ``positions`` is None: a decoding step of one
        token at position ``p`` is ``start=p`` on an axis of length 1.
    seq_axis : int, optional
        The axis of ``x`` that holds the sequence: -2 by default, as in
        ``(batch, heads, seq, head_dim)`` (transformers, SDPA); 1 for
        ``(batch, seq, heads, head_dim)`` (flash-attn, vLLM, llama.cpp).
    base, layout, rope_parameters, max_position_embeddings, seq_len, inv_freq, axes_dim, layer_type
        As for :func:`rope_cos_sin` (``head_dim`` is ``x.shape[-1]``;
        ``axes_dim`` takes ``layout="interleaved"``, as Flux uses it).
    inverse : bool, optional
        Rotate by ``-angle``: the transpose of the rotation, its backward pass,
        which undoes it when the attention factor is 1 (with one of ``a``, as
        yarn's, the values are multiplied by ``a`` both ways, as the model's
        tables do).
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
    arrays, outs = as_row_arrays(x, out, True)
    rope = Rope._parsed(
        "apply_rope",
        arrays[0].shape[-1],
        base,
        layout,
        rope_parameters,
        max_position_embeddings,
        seq_len,
        inv_freq,
        axes_dim,
        layer_type,
    )
    return rope._apply(
        arrays, outs, type(x) is not tuple, out, positions, start, seq_axis, inverse, workers
    )


def rope_frequencies(
    head_dim: SupportsIndex,
    *,
    base: float = 10000.0,
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: SupportsIndex | None = None,
    seq_len: SupportsIndex | None = None,
    layer_type: str | None = None,
) -> tuple[npt.NDArray[np.float64], float]:
    """RoPE's frequencies ``inv_freq`` and attention factor, as a model's config sets them.

    ``rope_parameters`` is the mapping of a transformers config
    (``config.rope_parameters``, or the older ``config.rope_scaling``), and the
    frequencies are those of transformers' ``ROPE_INIT_FUNCTIONS`` for its
    ``rope_type``, computed in double-double arithmetic from the exact
    ``base ** (-2j / rotary_dim)`` and rounded once to float64 (transformers
    computes them in float32). The tables of :func:`rope_cos_sin` with the same
    arguments use the double-double values themselves.

    Parameters
    ----------
    head_dim : int
        The attention head's width, a positive even number.
    base : float, optional
        RoPE's ``theta``; ``rope_parameters["rope_theta"]`` overrides it.
    rope_parameters : mapping, optional
        ``rope_type`` (or ``type``) among ``"default"``, ``"linear"``,
        ``"dynamic"``, ``"yarn"``, ``"longrope"``, ``"llama3"`` and
        ``"proportional"``, with the keys that type reads (``factor``,
        ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``,
        ``mscale``, ``mscale_all_dim``, ``attention_factor``, ``truncate``,
        ``short_factor``, ``long_factor``, ``low_freq_factor``,
        ``high_freq_factor``), and ``partial_rotary_factor`` (the rotated part
        ``rotary_dim = int(head_dim * partial_rotary_factor)``);
        ``mrope_section`` and ``mrope_interleaved`` are checked here and used
        by :func:`rope_cos_sin`. A key no
        scheme knows is an error (a misspelt optional key would otherwise be
        silently ignored); keys that another scheme reads are ignored.
    max_position_embeddings : int, optional
        The config's ``max_position_embeddings``: ``"dynamic"`` needs it; yarn
        and longrope derive ``factor`` from it when the key is absent.
    seq_len : int, optional
        The sequence length ``"dynamic"`` and ``"longrope"`` adapt to (the
        largest position + 1, as transformers' dynamic update takes it).
        Without it, dynamic uses ``max_position_embeddings`` and longrope its
        ``short_factor``.
    layer_type : str, optional
        As for :func:`rope_cos_sin`: the layer type of per-layer ``rope_parameters``.

    Returns
    -------
    inv_freq : numpy.ndarray
        float64, of shape ``(rotary_dim // 2,)`` (``(head_dim // 2,)`` for
        ``"proportional"``, zero past the rotated part).
    attention_factor : float
        The factor the model multiplies cos and sin by (1 for most schemes).

    Examples
    --------
    >>> import cpe
    >>> llama31 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
    ...            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    ...            "original_max_position_embeddings": 8192}
    >>> inv_freq, attention_factor = cpe.rope_frequencies(128, rope_parameters=llama31)
    >>> inv_freq.shape, attention_factor
    ((64,), 1.0)
    >>> float(inv_freq[0]), float(inv_freq[-1]) < 500000.0 ** (-126 / 128) / 7.9
    (1.0, True)
    >>> _, factor = cpe.rope_frequencies(64, rope_parameters={
    ...     "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    >>> round(factor, 6)
    1.138629
    """
    width = _head_dim(head_dim)
    parameters = layer_parameters(rope_parameters, layer_type)
    used = scheme(width, base, parameters, max_position_embeddings, seq_len)
    return used.inv_freq(), used.attention_factor


# ---- positions of several axes: each axis written straight into its columns ----

# (the index of the axis' positions, its frequencies: the even width of the
# paper's of base, or a (2, k) array of double-doubles; its first column, its
# columns from there when they are not consecutive, and where the second copies
# of its values start: see cpe._core.rope_axes)
Axis = tuple[Any, "int | npt.NDArray[np.float64]", int, "npt.NDArray[np.intp] | None", int]


def _reach(positions: npt.NDArray[Any] | None, first: int, count: int | None) -> float:
    """The largest |position| of a request: of ``positions``, or of ``count``
    positions from ``first`` (NaN, refused later, compares as nothing)."""
    if positions is None:
        assert count is not None
        return float(max(abs(first), abs(first + max(count, 1) - 1)))
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(positions), initial=0.0))


def _axis_major(positions: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Axial positions (a point's positions of every axis along the last axis)
    with that axis first: the one private copy the engine makes of them (see
    cpe._args.positions_float64) then holds each axis' positions together."""
    return positions.transpose((positions.ndim - 1, *range(positions.ndim - 1)))


def _three_axes(positions: npt.NDArray[Any], name: str) -> npt.NDArray[Any]:
    """Multimodal RoPE's positions, whose leading axis holds those of the three
    axes (temporal, height, width); one of 1 (transformers' text ids of one
    sequence, (1, seq)) is the same positions on every axis."""
    if positions.ndim == 0 or positions.shape[0] not in (1, 3):
        raise ValueError(
            f"{name} must have a leading axis of 3 (temporal, height, width), or of 1 (the "
            "same positions on every axis: text), with rope_parameters['mrope_section'], got "
            f"shape {positions.shape}; text ids of shape (batch, seq) are "
            "np.broadcast_to(ids, (3, *ids.shape))"
        )
    if positions.shape[0] == 3:
        return positions
    return np.broadcast_to(positions, (3, *positions.shape[1:]))


def _axes_dim(axes_dim: Any, head_dim: int) -> list[int]:
    items = as_sequence(axes_dim, "axes_dim", "integers (the width of each axis)")
    widths = [as_count(width, f"axes_dim[{i}]", 2) for i, width in enumerate(items)]
    if not widths:
        raise ValueError("axes_dim must give at least one axis")
    if len(widths) > MAX_AXES:
        raise ValueError(f"axes_dim gives {MAX_AXES} axes at most, got {len(widths)}")
    odd = [width for width in widths if width % 2]
    if odd:
        raise ValueError(f"axes_dim must hold even widths, got {widths}")
    if sum(widths) != head_dim:
        raise ValueError(f"head_dim must be the sum of axes_dim, {sum(widths)}, got {head_dim}")
    return widths


def scheme_of(
    function: str,
    width: int,
    base: Any,
    rope_parameters: Any,
    max_position_embeddings: Any,
    seq_len: Any,
    inv_freq: Any,
    length: Any,
) -> Scheme:
    """The encoding that RoPE's keywords give (``function`` names the caller in
    the errors; ``length()`` is the request's sequence length, see _apply.request_length)."""
    if inv_freq is None:
        return scheme(width, base, rope_parameters, max_position_embeddings, seq_len, length)
    if rope_parameters is not None:
        raise TypeError(f"{function} takes rope_parameters or inv_freq, not both")
    if max_position_embeddings is not None or seq_len is not None:
        raise TypeError(
            "max_position_embeddings and seq_len set rope_parameters' frequencies: "
            "they cannot be combined with inv_freq"
        )
    return _given(inv_freq, width, base)


def _head_dim(head_dim: Any) -> int:
    width = as_count(head_dim, "head_dim", 2)
    if width % 2:
        raise ValueError(f"head_dim must be even, got {width}")
    return width


def _given(inv_freq: Any, head_dim: int, base: Any) -> Scheme:
    """``inv_freq=``: head_dim // 2 finite float64 frequencies, taken as exact."""
    if getattr(inv_freq, "requires_grad", False) is True and hasattr(inv_freq, "detach"):
        inv_freq = inv_freq.detach()  # (read as values, as positions are)
    try:
        given = np.asarray(inv_freq)
    except Exception:  # ragged, or a tensor NumPy cannot read (refused below)
        given = np.asarray(None)
    if given.dtype.kind not in "iuf":
        raise TypeError(f"inv_freq must be an array of real numbers, got {given.dtype} values")
    with np.errstate(over="ignore", invalid="ignore"):  # (beyond float64: inf, refused below)
        w = given.astype(np.float64)
    if w.shape != (head_dim // 2,):
        raise ValueError(
            f"inv_freq must have the shape (head_dim // 2,) = ({head_dim // 2},), got {w.shape}"
        )
    if not np.all(np.isfinite(w)):
        raise ValueError("inv_freq must be finite numbers within the range of a float64")
    return Scheme(lambda: np.stack([w, np.zeros_like(w)]), base, 1.0, head_dim, made_by="inv_freq")


def _check_amplitude(attention_factor: float, dtype: np.dtype[Any]) -> None:
    """Refuse an attention factor beyond the range of the output dtype: the tables'
    values, up to it in magnitude, would be inf (and NumPy would warn)."""
    if attention_factor == 1.0:
        return
    with np.errstate(over="ignore"):
        fits = np.isfinite(np.array(attention_factor).astype(dtype).astype(np.float64))
    if not fits:
        raise ValueError(
            f"rope_parameters give the attention factor {attention_factor!r}, beyond the "
            f"range of {dtype.name}: the tables' values would be infinite"
        )


def _kind(value: Any) -> str:
    if type(value) is tuple:
        return f"a tuple of {len(value)}"
    return type(value).__name__


def _check_no_offset(start: Any) -> None:
    """``start`` with positions for ``n``: an integer, 0. A silently ignored offset
    would give the tables of the wrong positions."""
    if type(start) is int and start == 0:  # the default, at once
        return
    first = as_integer(start, "start")
    if first != 0:
        raise ValueError(
            f"start must be 0 when n gives the positions (anything but a Python int, a "
            f"count: add the offset to them), got start={first}"
        )


def _count_or_positions(n: Any) -> tuple[int | None, npt.NDArray[Any] | None]:
    """``n`` read once: ``(count, None)`` for a Python int (a count of rows,
    checked), else ``(None, positions)`` (as_positions: not yet scanned). A NumPy
    integer, a 0-d array or a tensor holds a position, as everywhere in cpe."""
    if type(n) is int or (isinstance(n, int) and not isinstance(n, bool)):
        return as_count(n, "n", 0), None
    if isinstance(n, (bool, np.bool_)):
        raise TypeError("n must be an integer or an array of positions, got bool")
    return None, as_positions(n, "n (the positions)")
