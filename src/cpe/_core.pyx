"""Python-facing functions: validate arguments, allocate, release the GIL, call kernels.

Nothing is written into a caller's ``out=`` until every argument has been checked.
The definition and conventions are documented in the package docstring and README.
"""
import math
import numbers
import operator
import sys
import threading
from collections import OrderedDict

import numpy as np

from cpe.kernels cimport (
    CPE_ERR_NOMEM,
    CPE_LAYOUT_INTERLEAVED,
    CPE_OK,
    fill_positions_f32,
    fill_positions_f64,
    fill_table_f32,
    fill_table_f64,
    frequencies,
)

# Integers up to 2**53 are exact doubles; positions beyond would be rounded silently.
_EXACT_INTEGER_LIMIT = 2 ** 53
_DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
# Bytes of frequency vectors kept between calls (16 bytes per frequency).
_CACHE_BUDGET = 2 * 1024 * 1024


# ---- argument checks: each names the argument and what was expected ----

cdef Py_ssize_t _as_count(value, str name, Py_ssize_t minimum) except -1:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool")
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if count < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {count}")
    if count > sys.maxsize:
        raise ValueError(f"{name} is too large: {count}")
    return count


cdef double _as_real(value, str name) except? -1.0:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a real number, got bool")
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be finite, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return x


cdef double _as_base(base) except? -1.0:
    cdef double b = _as_real(base, "base")
    if b <= 0.0:
        raise ValueError(f"base must be > 0, got {b!r}")
    return b


cdef object _as_dtype(dtype):
    # dtype=None means float64, as in NumPy.
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in _DTYPES:
        raise TypeError(f"dtype must be float64, float32 or float16, got {dtype!r}")
    return dt


cdef object _as_positions(position):
    """Positions as a float64 array; integers must be exact, floats finite."""
    if isinstance(position, (bool, np.bool_)):
        raise TypeError("position must be a real number or an array of them, got bool")
    if isinstance(position, int) and abs(position) > _EXACT_INTEGER_LIMIT:
        raise ValueError(f"position must be an integer of magnitude <= 2**53, got {position}")
    try:
        arr = np.asarray(position)
    except Exception as exc:  # ragged nested sequences and the like
        raise TypeError(f"position must be a real number or an array of them: {exc}") from None
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError("position must be a real number or an array of them, got bool")
    if kind not in "iuf":
        raise TypeError(
            f"position must be a real number or an array of them, got dtype {arr.dtype}")
    if arr.size:
        if kind in "iu":
            if arr.max() > _EXACT_INTEGER_LIMIT or (kind == "i" and arr.min() < -_EXACT_INTEGER_LIMIT):
                raise ValueError("position must be integers of magnitude <= 2**53")
        elif not np.isfinite(arr).all():
            raise ValueError("position must be finite (no NaN or infinity)")
    return np.asarray(arr, dtype=np.float64, order="C")


cdef object _prepare_out(out, tuple shape, dt):
    """The array to return: ``out`` after checking it, or a new one."""
    if out is None:
        count = 1
        for extent in shape:
            count *= extent
        if count * dt.itemsize > sys.maxsize:
            raise ValueError(f"the output of shape {shape} is too large to allocate")
        return np.empty(shape, dtype=dt)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dt:
        raise TypeError(f"out must have dtype {dt} (the dtype argument), got {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    if not out.flags.c_contiguous or not out.flags.aligned:
        raise ValueError("out must be C-contiguous and aligned")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    return out


# ---- frequency vectors, cached: bounded in bytes, safe without the GIL ----

_cache_lock = threading.Lock()
_cache = OrderedDict()
_cache_bytes = 0


cdef object _frequencies(Py_ssize_t n_freq, double base, double den, double scale):
    """``(2, n_freq)`` read-only array: row 0 the high, row 1 the low parts."""
    global _cache_bytes
    key = (n_freq, base, den, scale)
    with _cache_lock:
        w = _cache.get(key)
        if w is not None:
            _cache.move_to_end(key)
            return w
    w = np.empty((2, n_freq), dtype=np.float64)
    cdef double[:, ::1] view = w
    if n_freq:
        with nogil:
            frequencies(&view[0, 0], &view[1, 0], n_freq, base, den, scale)
    w.flags.writeable = False
    if w.nbytes <= _CACHE_BUDGET:
        with _cache_lock:
            if key not in _cache:
                _cache[key] = w
                _cache_bytes += w.nbytes
                while _cache_bytes > _CACHE_BUDGET:
                    _cache_bytes -= _cache.popitem(last=False)[1].nbytes
    return w


cdef int _check_angles(double max_position, w) except -1:
    # |p| * w_j must be finite; the frequencies are monotone in j.
    cdef double largest = max(abs(w[0, 0]), abs(w[0, -1])) if w.shape[1] else 0.0
    if not math.isfinite(max_position * largest):
        raise ValueError("position * frequency overflows a double")
    return 0


cdef int _raise_for(int status) except -1:
    if status == CPE_ERR_NOMEM:
        raise MemoryError("cpe: could not allocate scratch memory")
    if status != CPE_OK:
        raise RuntimeError(f"cpe: kernel rejected checked arguments (status {status})")
    return 0


cdef int _fill_positions(target, pos, Py_ssize_t width, w, int layout) except -1:
    cdef Py_ssize_t n = pos.size
    cdef Py_ssize_t n_freq = w.shape[1]
    if n == 0 or width == 0:
        return 0
    cdef const double[:, ::1] wv = w
    cdef const double[::1] pv = pos.reshape(-1)
    cdef double[::1] t64
    cdef float[::1] t32
    cdef int status
    if target.dtype == np.float64:
        t64 = target.reshape(-1)
        with nogil:
            status = fill_positions_f64(&t64[0], &pv[0], n, width, &wv[0, 0], &wv[1, 0],
                                        n_freq, layout)
    else:
        t32 = target.reshape(-1)
        with nogil:
            status = fill_positions_f32(&t32[0], &pv[0], n, width, &wv[0, 0], &wv[1, 0],
                                        n_freq, layout)
    return _raise_for(status)


cdef int _fill_table(target, double start, Py_ssize_t n, Py_ssize_t width, w,
                     int layout) except -1:
    cdef Py_ssize_t n_freq = w.shape[1]
    if n == 0 or width == 0:
        return 0
    cdef const double[:, ::1] wv = w
    cdef double[::1] t64
    cdef float[::1] t32
    cdef int status
    if target.dtype == np.float64:
        t64 = target.reshape(-1)
        with nogil:
            status = fill_table_f64(&t64[0], start, n, width, &wv[0, 0], &wv[1, 0],
                                    n_freq, layout)
    else:
        t32 = target.reshape(-1)
        with nogil:
            status = fill_table_f32(&t32[0], start, n, width, &wv[0, 0], &wv[1, 0],
                                    n_freq, layout)
    return _raise_for(status)


cdef object _kernel_target(result):
    # float16 has no C type: compute in float64 and round once on the way out.
    if result.dtype == np.float16:
        return np.empty(result.shape, dtype=np.float64)
    return result


# ---- public API ----

def positional_encoding(position, D, *, base=10000.0, dtype=np.float64, out=None):
    """positional_encoding(position, D, *, base=10000.0, dtype=numpy.float64, out=None)

    Sinusoidal positional encoding of one position or an array of positions.

    ``out[..., 2j] = sin(p * w_j)`` and ``out[..., 2j + 1] = cos(p * w_j)`` with
    ``w_j = base ** (-2j / D)``; for odd ``D`` the last column is a sine. Values are
    computed with a double-double angle and rounded once to ``dtype``.

    Parameters
    ----------
    position : int, float or array_like of them
        Position(s) ``p``. Integers must satisfy ``|p| <= 2**53``; floats must be
        finite. Booleans are rejected.
    D : int
        Width of the encoding, ``D >= 1``.
    base : float, optional
        The base of the frequencies (10000 in the paper), finite and ``> 0``.
    dtype : {float64, float32, float16}, optional
        Output dtype.
    out : numpy.ndarray, optional
        Writable, C-contiguous array of shape ``position.shape + (D,)`` and dtype
        ``dtype`` to fill. It is left untouched if any argument is rejected.

    Returns
    -------
    numpy.ndarray
        Shape ``(D,)`` for a scalar position, ``position.shape + (D,)`` otherwise.

    Raises
    ------
    TypeError
        If an argument has the wrong type (for example a bool position or an
        unsupported dtype).
    ValueError
        If an argument is out of range (``D < 1``, NaN position, ``base <= 0``,
        ``out`` of the wrong shape or read-only, ...).

    Examples
    --------
    >>> import cpe
    >>> cpe.positional_encoding(0, 4)
    array([0., 1., 0., 1.])
    >>> cpe.positional_encoding([[0, 1], [2, 3]], 6).shape
    (2, 2, 6)
    >>> cpe.positional_encoding(1, 2, dtype="float32")
    array([0.84147096, 0.5403023 ], dtype=float32)
    """
    cdef Py_ssize_t width = _as_count(D, "D", 1)
    cdef double b = _as_base(base)
    dt = _as_dtype(dtype)
    pos = _as_positions(position)
    result = _prepare_out(out, pos.shape + (width,), dt)
    if out is not None and np.may_share_memory(pos, out):
        pos = pos.copy()
    w = _frequencies((width + 1) // 2, b, width / 2.0, 1.0)
    if pos.size:
        _check_angles(float(np.abs(pos).max()), w)
    target = _kernel_target(result)
    _fill_positions(target, pos, width, w, CPE_LAYOUT_INTERLEAVED)
    if target is not result:
        result[...] = target
    return result


def positional_encoding_table(n, D, *, start=0, base=10000.0, dtype=np.float64, out=None):
    """positional_encoding_table(n, D, *, start=0, base=10000.0, dtype=numpy.float64, out=None)

    Encodings of the consecutive positions ``start, start + 1, ..., start + n - 1``.

    Row ``i`` equals ``positional_encoding(start + i, D, base=base)``. The table is
    built from ``O(sqrt(n))`` rows of sines and cosines by the angle-addition
    identity, which keeps every value within a few units in the last place.

    Parameters
    ----------
    n : int
        Number of rows, ``n >= 0``.
    D : int
        Width of the encoding, ``D >= 1``.
    start : int, optional
        First position; ``|start|`` and ``|start + n|`` must be ``<= 2**53``.
    base : float, optional
        The base of the frequencies (10000 in the paper), finite and ``> 0``.
    dtype : {float64, float32, float16}, optional
        Output dtype.
    out : numpy.ndarray, optional
        Writable, C-contiguous array of shape ``(n, D)`` and dtype ``dtype`` to
        fill. It is left untouched if any argument is rejected.

    Returns
    -------
    numpy.ndarray
        Array of shape ``(n, D)``.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> import cpe
    >>> table = cpe.positional_encoding_table(3, 4)
    >>> table.shape
    (3, 4)
    >>> bool((table[2] == cpe.positional_encoding(2, 4)).all())
    True
    >>> cpe.positional_encoding_table(2, 2, start=5).round(6)
    array([[-0.958924,  0.283662],
           [-0.279415,  0.96017 ]])
    """
    cdef Py_ssize_t rows = _as_count(n, "n", 0)
    cdef Py_ssize_t width = _as_count(D, "D", 1)
    if isinstance(start, (bool, np.bool_)):
        raise TypeError("start must be an integer, got bool")
    try:
        first = operator.index(start)
    except TypeError:
        raise TypeError(f"start must be an integer, got {type(start).__name__}") from None
    if abs(first) > _EXACT_INTEGER_LIMIT or abs(first + rows) > _EXACT_INTEGER_LIMIT:
        raise ValueError("start and start + n must be integers of magnitude <= 2**53")
    cdef double b = _as_base(base)
    dt = _as_dtype(dtype)
    result = _prepare_out(out, (rows, width), dt)
    w = _frequencies((width + 1) // 2, b, width / 2.0, 1.0)
    if rows:
        _check_angles(float(max(abs(first), abs(first + rows - 1))), w)
    target = _kernel_target(result)
    _fill_table(target, float(first), rows, width, w, CPE_LAYOUT_INTERLEAVED)
    if target is not result:
        result[...] = target
    return result
