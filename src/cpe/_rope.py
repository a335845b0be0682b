"""Rotary position embedding (RoPE) tables: the cos and sin that rotate q and k."""

from __future__ import annotations

import operator
import sys
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from cpe._conventions import is_one_of
from cpe._core import (
    _fill_rope,
    _rope_positions,
    as_base,
    as_count,
    as_dtype,
    as_start,
    prepare_out,
    rope_outputs,
    table_start,
)

ROPE_LAYOUTS = ("half", "interleaved")


def rope_cos_sin(
    n: int | npt.ArrayLike,
    head_dim: int,
    *,
    base: float = 10000.0,
    start: int = 0,
    layout: str = "half",
    dtype: npt.DTypeLike = np.float64,
    out: tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]] | None = None,
) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
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
        An integer: the rows are positions ``start ... start + n - 1``. Anything
        ``operator.index`` accepts counts as an integer, 0-d integer arrays and
        tensors included, as in ``range`` and ``numpy.zeros``. An array (or a
        float): the positions themselves (position ids of any shape).
    head_dim : int
        Width of each table, a positive even number.
    base : float, optional
        RoPE's ``theta`` (10000 in the paper, 500000 in Llama 3), ``> 0``.
    start : int, optional
        First position when ``n`` is an integer. With positions for ``n`` it
        must be 0: add an offset to the positions themselves.
    layout : {"half", "interleaved"}, optional
        Column order, as above.
    dtype : {float64, float32, float16}, optional
        Output dtype.
    out : tuple of two numpy.ndarray, optional
        ``(cos, sin)`` arrays to fill, as NumPy's ufuncs take ``out=`` for two
        outputs: each writable, C-contiguous, of the output's shape and dtype
        ``dtype``, and not sharing memory with the other. Refilling the same
        arrays saves the page faults of new ones (for large tables, most of
        the time of a call; float16 tables are still computed in a new float64
        array). Both are left untouched if any argument is rejected.

    Returns
    -------
    cos, sin : numpy.ndarray
        Each of shape ``(n, head_dim)``, or ``positions.shape + (head_dim,)``:
        the arrays of ``out``, or the two halves of one new allocation (either
        keeps the memory of both).

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
    """
    width = as_count(head_dim, "head_dim", 2)
    if width % 2:
        raise ValueError(f"head_dim must be even, got {width}")
    if not is_one_of(layout, ROPE_LAYOUTS):
        raise ValueError(
            f"layout must be one of {', '.join(map(repr, ROPE_LAYOUTS))}, got {layout!r}"
        )
    output_dtype = as_dtype(dtype)
    if isinstance(n, (bool, np.bool_)):
        raise TypeError("n must be an integer or an array of positions, got bool")
    if out is not None and (type(out) is not tuple or len(out) != 2):
        raise TypeError(f"out must be a tuple (cos, sin) of two numpy.ndarray, got {_kind(out)}")
    # The RoPE kernel writes both tables at once, from consecutive positions or
    # from any; float16 tables take float64 rows rounded once.
    if _is_count(n):
        kernel_layout = "sin_cos" if layout == "half" else "interleaved"
        return _rope_table(n, width, start, base, output_dtype, kernel_layout, out)
    _check_no_offset(start)
    return _rope_positions(n, width, base, output_dtype, layout == "interleaved", out)


def _kind(value: Any) -> str:
    if type(value) is tuple:
        return f"a tuple of {len(value)}"
    return type(value).__name__


def _rope_table(
    n: int,
    width: int,
    start: Any,
    base: Any,
    dtype: Any,
    kernel_layout: str,
    out: tuple[Any, Any] | None,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    rows = as_count(n, "n", 0)
    given = None
    if out is not None:  # before the size, as any out= is
        given = rope_outputs(out, (rows, width), dtype, "n and head_dim")
    # start (and start + n) and base, as positional_encoding_table checks them;
    # then the size.
    first = table_start(start, rows)
    b = as_base(base)
    if given is not None:
        cos, sin = given
    # One allocation for both tables: two large ones in a row would, with
    # glibc's default thresholds, be trimmed and page-faulted again on every call.
    elif 2 * rows * width * dtype.itemsize <= sys.maxsize:
        cos, sin = prepare_out(None, (2, rows, width), dtype, "n and head_dim")
    else:  # each table alone may still be representable: let the allocator say
        cos = prepare_out(None, (rows, width), dtype, "n and head_dim")
        sin = prepare_out(None, (rows, width), dtype, "n and head_dim")
    _fill_rope(cos, sin, first, b, kernel_layout == "interleaved")
    return cos, sin


def _check_no_offset(start: Any) -> None:
    """``start`` with positions for ``n``: an integer, 0. A silently ignored offset
    would give the tables of the wrong positions."""
    if type(start) is int and start == 0:  # the default, at once
        return
    first = as_start(start)
    if first != 0:
        raise ValueError(
            f"start must be 0 when n gives the positions (an array or a float; add "
            f"the offset to them), got start={first}"
        )


def _is_count(n: Any) -> TypeGuard[int]:
    """An integer scalar (a row count), as opposed to an array of positions."""
    if type(n) is int:  # the usual count, at once (np.ndim costs ~1 us)
        return True
    if isinstance(n, (bool, np.bool_)):
        return False
    try:
        if np.ndim(n) != 0:
            return False
    except ValueError:  # a ragged sequence: not a count (positional_encoding says why)
        return False
    try:
        operator.index(n)
    except TypeError:
        return False
    return True
