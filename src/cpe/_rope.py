"""Rotary position embedding (RoPE) tables: the cos and sin that rotate q and k."""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Mapping
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
from cpe._scaling import Scheme, scheme

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
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
    inv_freq: npt.ArrayLike | None = None,
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
    >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    >>> cos, sin = cpe.rope_cos_sin(8, 64, rope_parameters=yarn)
    >>> round(float(cos[0, 0]), 6)                       # the attention factor
    1.138629
    """
    width = _head_dim(head_dim)
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
    counted = _is_count(n)
    if inv_freq is not None:
        if rope_parameters is not None:
            raise TypeError("rope_cos_sin takes rope_parameters or inv_freq, not both")
        if max_position_embeddings is not None or seq_len is not None:
            raise TypeError(
                "max_position_embeddings and seq_len set rope_parameters' frequencies: "
                "they cannot be combined with inv_freq"
            )
        used = _given(inv_freq, width, base)
    else:
        used = scheme(
            width,
            base,
            rope_parameters,
            max_position_embeddings,
            seq_len,
            lambda: _length(n, start, counted),
        )
    if counted:
        kernel_layout = "sin_cos" if layout == "half" else "interleaved"
        return _rope_table(n, used, start, output_dtype, kernel_layout, out)
    _check_no_offset(start)
    return _rope_positions(
        n,
        used.width,
        used.base,
        used.frequencies,
        output_dtype,
        layout == "interleaved",
        out,
        used.attention_factor,
    )


def rope_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    rope_parameters: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
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
        ``rotary_dim = int(head_dim * partial_rotary_factor)``). A key no
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
    used = scheme(_head_dim(head_dim), base, rope_parameters, max_position_embeddings, seq_len)
    return used.inv_freq(), used.attention_factor


def _head_dim(head_dim: Any) -> int:
    width = as_count(head_dim, "head_dim", 2)
    if width % 2:
        raise ValueError(f"head_dim must be even, got {width}")
    return width


def _given(inv_freq: Any, head_dim: int, base: Any) -> Scheme:
    """``inv_freq=``: head_dim // 2 finite float64 frequencies, taken as exact."""
    try:
        given = np.asarray(inv_freq)
    except (TypeError, ValueError):  # ragged
        given = np.asarray(None)
    if given.dtype.kind not in "iuf":
        raise TypeError(f"inv_freq must be an array of real numbers, got {given.dtype} values")
    w = given.astype(np.float64)
    if w.shape != (head_dim // 2,):
        raise ValueError(
            f"inv_freq must have the shape (head_dim // 2,) = ({head_dim // 2},), got {w.shape}"
        )
    if not np.all(np.isfinite(w)):
        raise ValueError("inv_freq must be finite")
    return Scheme(lambda: (w, np.zeros_like(w)), base, 1.0, head_dim)


def _length(n: Any, start: Any, counted: bool) -> float | None:
    """The request's sequence length, as transformers' dynamic update takes it: the
    largest position + 1 (None when there is none, or when the arguments are
    refused later, with their errors)."""
    try:
        if counted:
            return float(as_start(start) + operator.index(n))
        positions = np.asarray(n)
    except (TypeError, ValueError, OverflowError):
        return None
    if positions.dtype.kind not in "iuf":  # (complex, bool, objects: refused later)
        return None
    largest = float(positions.max()) if positions.size else math.nan
    return largest + 1.0 if math.isfinite(largest) else None  # (a NaN: refused later)


def _kind(value: Any) -> str:
    if type(value) is tuple:
        return f"a tuple of {len(value)}"
    return type(value).__name__


def _rope_table(
    n: Any,
    used: Scheme,
    start: Any,
    dtype: Any,
    kernel_layout: str,
    out: tuple[Any, Any] | None,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    rows = as_count(n, "n", 0)
    width = used.width
    given = None
    if out is not None:  # before the size, as any out= is
        given = rope_outputs(out, (rows, width), dtype, "n and head_dim")
    # start (and start + n) and base, as positional_encoding_table checks them;
    # then the size.
    first = table_start(start, rows)
    b = as_base(used.base)
    if given is not None:
        cos, sin = given
    # One allocation for both tables: two large ones in a row would, with
    # glibc's default thresholds, be trimmed and page-faulted again on every call.
    elif 2 * rows * width * dtype.itemsize <= sys.maxsize:
        cos, sin = prepare_out(None, (2, rows, width), dtype, "n and head_dim")
    else:  # each table alone may still be representable: let the allocator say
        cos = prepare_out(None, (rows, width), dtype, "n and head_dim")
        sin = prepare_out(None, (rows, width), dtype, "n and head_dim")
    _fill_rope(
        cos, sin, first, b, used.frequencies, kernel_layout == "interleaved", used.attention_factor
    )
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
