"""The engine's Python face: encodings and their caches, allocation, dtype
rounding, threads, and the 1-D functions over them.

Arguments are turned into checked values by ``cpe._args``; nothing is written
into a caller's ``out=`` until every argument has been checked (the engine
checks positions before it writes). The definition and the conventions are
documented in ``cpe._conventions`` and the README.
"""
import sys
import threading
from collections import deque

import numpy as np

cimport cython
cimport numpy as cnp
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.math cimport NAN, fabs
from libc.stdint cimport uint16_t

from cpe._args cimport (
    adopt_out,
    as_choice,
    as_count,
    as_dtype,
    as_positions,
    as_positive,
    as_real,
    overlap,
    positions_float64,
    scalar_position,
    table_start,
    written,
)
from cpe._conventions import CONVENTIONS as _CONVENTIONS, LAYOUTS as _LAYOUTS
from cpe._workers import (
    PART_BYTES,
    WORKERS_PARAMETER,
    as_workers,
    part_bounds,
    part_count,
    run_parts,
)
from cpe.kernels cimport (
    CPE_ERR_ARGUMENT,
    CPE_ERR_NOMEM,
    CPE_ERR_RANGE,
    CPE_LAYOUT_INTERLEAVED,
    CPE_LAYOUT_SIN_COS,
    CPE_OK,
)
from cpe cimport _engine
from cpe._engine cimport (
    ROW_BFLOAT16,
    ROW_FLOAT16,
    ROW_FLOAT32,
    ROW_FLOAT64,
    FILL_MAX_AXES,
    STORE_ROPE_HALF,
    STORE_ROPE_INTERLEAVED,
    cpe_level_shape,
    cpe_levels,
    cpe_state_get,
    cpe_state_set,
    apply_request,
    apply_scratch,
    fill_request,
    fill_scratch,
    rotation,
)
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc

cdef extern from "cpe_memory.h":
    int cpe_mostly_mapped(const void* p, size_t n) noexcept nogil

cnp.import_array()

# Integers up to 2**53 are exact doubles; positions beyond would be rounded silently.
cdef long long _EXACT_LIMIT = 1LL << 53
cdef object _FLOAT64 = np.dtype(np.float64)
cdef object _FLOAT32 = np.dtype(np.float32)
cdef object _FLOAT16 = np.dtype(np.float16)

# Bytes kept between calls by the frequency cache (each entry counted with its
# objects, not its frequencies alone: see Cache).
cdef Py_ssize_t _CACHE_BUDGET = 2 * 1024 * 1024
# The digit levels of an encoding (see cpe_fill.h) are kept between calls, at
# most _DIGIT_BUDGET bytes in all and half of it per encoding: their rows are made
# when a request first needs them, and a position's row is the product of a few of
# them. Wider encodings make theirs for each request. The bits are the same either
# way: a level row depends on its digit and the frequencies alone.
cdef Py_ssize_t _DIGIT_BUDGET = 8 * 1024 * 1024


cdef bint _too_large(tuple shape, dt):
    """Whether NumPy would refuse ``shape``, or the float64 buffer a float16 or
    bfloat16 output is computed in. NumPy refuses a shape whose non-zero extents multiply past the
    largest size even when another extent is 0, as in (0, 2**62)."""
    # The values that fit (8 bytes each for float16 and bfloat16 too), divided by each extent in
    # turn: C arithmetic, which cannot overflow. (Extents are ints, and may exceed
    # a Py_ssize_t when a caller multiplied counts, as grids do.)
    cdef int overflow = 0
    cdef long long extent
    cdef Py_ssize_t count = PY_SSIZE_T_MAX // (4 if dt is _FLOAT32 else 8)
    for item in shape:
        extent = PyLong_AsLongLongAndOverflow(item, &overflow)
        if overflow > 0:
            return True
        if extent > 1:
            if count < extent:
                return True
            count //= extent
    return False


# On Linux, new outputs of this many bytes and more (the size from which the
# kernels stream) are views of a NumPy byte buffer, which cpe places on a huge
# page boundary when NumPy's memory for them is not mapped yet: the kernel can
# then map them with huge pages from the first byte to the last (NumPy asks for
# huge pages from 4 MiB). NumPy's own large arrays start 16 bytes past a page,
# so their first and last huge pages are mapped as ~512 small pages each, a
# page fault apiece (docs/performance.md has the measurements). Memory the allocator hands back
# already mapped (it can, in long-running processes) takes no page faults at
# all: it is kept. Always a view at these sizes, whichever memory it got, so
# that what a call returns does not depend on the allocator's history.
cdef Py_ssize_t _VIEW_OUTPUT_BYTES = 16 * 1024 * 1024
cdef enum:
    _DIMS_AT_MOST = 64  # NumPy 2's limit (NumPy 1's is 32)
    _LINE_BYTES = 64  # a cache line, where such views start
cdef bint _VIEW_OUTPUTS = sys.platform.startswith("linux")


def _huge_page_bytes():
    """The size of the huge pages the kernel maps NumPy's large arrays with
    (transparent huge pages "always" or "madvise", up to 4 MiB), or 0: new
    outputs are placed on such a boundary. Read once, at import."""
    if not _VIEW_OUTPUTS:
        return 0
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            enabled = f.read()
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            size = int(f.read())
    except (OSError, ValueError):
        return 0
    # Larger huge pages (512 MiB with 64 KiB base pages) would cost too much
    # address space for the few outputs that large.
    if "[never]" in enabled or not 0 < size <= 4 * 1024 * 1024 or size & (size - 1):
        return 0
    return size


cdef Py_ssize_t _HUGE_PAGE = _huge_page_bytes()


cdef object _new_array(tuple shape, dt, bint on_line=False):
    """``np.empty(shape, dt)`` for an output, made by _new_output. ``shape`` must
    not be _too_large."""
    cdef Py_ssize_t k, ndim = len(shape)
    cdef cnp.npy_intp dims[_DIMS_AT_MOST]
    if ndim > _DIMS_AT_MOST:
        return np.empty(shape, dtype=dt)  # NumPy's error
    for k in range(ndim):
        dims[k] = shape[k]
    return _new_output(<int>ndim, dims, dt, on_line)


cdef object _new_output(int ndim, const cnp.npy_intp* dims, dt, bint on_line=False):
    """``np.empty(dims, dt)`` for an output, cpe's one allocator; on Linux, from
    _VIEW_OUTPUT_BYTES, a view of a byte buffer on a huge page boundary unless
    NumPy's memory is mapped already (see above), and on a cache line then; at
    any size on a cache line with ``on_line`` (rows read by 64-byte loads, as the
    digit levels are: NumPy's data is only 16-byte aligned). ``dims`` must not
    be _too_large."""
    cdef int typenum = -1
    cdef Py_ssize_t nbytes, length, huge, k
    cdef bint small
    if dt is _FLOAT64:
        typenum, nbytes = cnp.NPY_FLOAT64, 8
    elif dt is _FLOAT32:
        typenum, nbytes = cnp.NPY_FLOAT32, 4
    elif dt is _FLOAT16:
        typenum, nbytes = cnp.NPY_FLOAT16, 2
    else:
        nbytes = dt.itemsize
    for k in range(ndim):
        nbytes *= dims[k]
    small = not _VIEW_OUTPUTS or nbytes < _VIEW_OUTPUT_BYTES
    if small and typenum >= 0 and not on_line:
        # np.empty without its Python call and argument parsing
        return cnp.PyArray_EMPTY(ndim, <cnp.npy_intp*>dims, typenum, 0)
    shape = tuple([dims[k] for k in range(ndim)])
    if small and not on_line:
        return np.empty(shape, dtype=dt)  # (bfloat16)
    # A cache line more than needed: the view starts on one at least (XLA shares
    # only memory so aligned through DLPack, and the streaming stores prefer it).
    if nbytes > PY_SSIZE_T_MAX - 2 * _LINE_BYTES:
        return np.empty(shape, dtype=dt)  # NumPy's error
    cdef cnp.ndarray raw = np.empty(nbytes + _LINE_BYTES, dtype=np.uint8)
    cdef size_t address = <size_t>cnp.PyArray_DATA(raw)
    cdef Py_ssize_t boundary = _LINE_BYTES
    huge = 0 if small else _HUGE_PAGE
    if (huge and address % huge and nbytes <= PY_SSIZE_T_MAX - 2 * huge
            and cpe_mostly_mapped(<void*>address, nbytes) == 0):
        # Given back first; the new buffer covers whole huge pages to the end.
        raw = None
        length = (nbytes + huge - 1) // huge * huge + huge
        try:
            raw = np.empty(length, dtype=np.uint8)
            boundary = huge
        except MemoryError:  # then at least the size NumPy found room for
            raw = np.empty(nbytes + _LINE_BYTES, dtype=np.uint8)
        address = <size_t>cnp.PyArray_DATA(raw)
    raw = raw[(boundary - address % boundary) % boundary:][:nbytes]
    return raw.view(dt).reshape(shape)


cdef object _prepare_row(out, Py_ssize_t width, dt):
    """``prepare_out(out, (width,), dt, "D")``: a single position's output, when new
    (the common call) made without the shape tuple."""
    cdef cnp.npy_intp extent = width
    if out is None and width <= PY_SSIZE_T_MAX // 8:  # (never _too_large, whatever dt)
        return _new_output(1, &extent, dt)
    return prepare_out(out, (width,), dt, "D")


cpdef object prepare_out(out, tuple shape, dt, str sizes, str name="out"):
    """The array to return: ``out`` after checking it (see adopt_out), or a new one.

    ``sizes`` names the arguments that set the shape, ``name`` the array, for the
    error messages.
    """
    if _too_large(shape, dt):
        if out is not None:  # (its own checks first)
            adopt_out(out, shape, dt, name)
        raise ValueError(f"{sizes}: the output of shape {shape} is too large to allocate")
    if out is None:
        return _new_array(shape, dt)
    return adopt_out(out, shape, dt, name)


@cython.final
@cython.no_gc  # (it refers to a float64 array and numbers: it cannot be in a cycle)
cdef class _Encoding:
    """One encoding: its width and double-double frequencies (the layout is the
    fill loop's parameter).

    ``frequencies[0][j] + frequencies[1][j] = scale * base ** (-j / den)``.
    """
    cdef readonly object frequencies   # (2, n_freq) read-only float64: hi, lo rows
    cdef const double* w_hi
    cdef const double* w_lo
    cdef readonly Py_ssize_t width
    cdef readonly Py_ssize_t n_freq
    cdef readonly double base
    cdef readonly double den
    cdef readonly double scale
    cdef readonly object key
    cdef double w_max   # the largest |w_j| (NaN if one is NaN), for the range check
    cdef char used      # a request has been filled with it (see _levels_of; atomic)


cdef inline char* _address(cnp.ndarray array) noexcept:
    """Data pointer of a C-contiguous array (kept alive by the caller)."""
    return <char*>cnp.PyArray_DATA(array)


# ---- the caches: bounded in bytes, safe without the GIL ----

_cache_lock = threading.Lock()
# What an entry costs besides the arrays it holds and a key of bytes: its objects
# and its slots in a dict and a deque (about half a KiB for a small array).
cdef Py_ssize_t _ENTRY_BYTES = 512


@cython.final
cdef class Cache:
    """Entries kept first in, first out while their costs add up to at most
    ``budget`` bytes, the one policy of every cache of cpe: an entry costs
    ``_ENTRY_BYTES``, plus the bytes of the arrays it holds (which its keeper
    says), plus its key's when that is ``bytes``. An entry that alone exceeds the
    budget is not kept. Lookups need no lock (a dict lookup is atomic, with or
    without the GIL); ``keep`` takes _cache_lock.
    """
    cdef dict entries
    cdef object order          # deque of (key, cost), oldest first
    cdef readonly Py_ssize_t nbytes
    cdef readonly Py_ssize_t budget

    def __cinit__(self, Py_ssize_t budget):
        self.entries = {}
        self.order = deque()
        self.nbytes = 0
        self.budget = budget

    cpdef object get(self, key):
        """The entry of ``key``, or None."""
        return self.entries.get(key)

    cpdef object keep(self, key, value, Py_ssize_t nbytes):
        """The entry kept for ``key``, whose arrays hold ``nbytes``: one added
        meanwhile, or ``value``."""
        cdef Py_ssize_t cost = _ENTRY_BYTES + nbytes + (
            PyBytes_GET_SIZE(key) if type(key) is bytes else 0)
        with _cache_lock:
            if cost > self.budget:
                existing = self.entries.get(key)
                return value if existing is None else existing
            existing = self.entries.setdefault(key, value)  # (one hash of the key)
            if existing is not value:
                return existing
            self.order.append((key, cost))
            self.nbytes += cost
            while self.nbytes > self.budget:
                old_key, old_cost = self.order.popleft()
                del self.entries[old_key]
                self.nbytes -= old_cost
            return value

    def snapshot(self):
        """(values, their costs, bytes counted, budget), as seen under the lock."""
        with _cache_lock:
            costs = {key: cost for key, cost in self.order}
            return (list(self.entries.values()), [costs[key] for key in self.entries],
                    self.nbytes, self.budget)


cdef Cache _encodings = Cache(_CACHE_BUDGET)


cdef int _resolve(Py_ssize_t D, convention, layout, freq_shift, int* layout_code,
                  Py_ssize_t* n_freq, double* den) except -1:
    """The kernels' layout code, number of frequencies and exponent denominator of
    ``convention``, ``layout`` and ``freq_shift`` as the caller gave them (checked
    here, freq_shift first; cpe._conventions has the maths and the presets)."""
    cdef double shift = 0.0
    if freq_shift is not None:
        shift = as_real(freq_shift, "freq_shift")
    if convention is not None:
        as_choice(convention, "convention", _CONVENTIONS)
        if layout is not None or freq_shift is not None:
            raise ValueError(
                f"convention={convention!r} sets layout and freq_shift; "
                "pass either convention or layout/freq_shift, not both")
        layout, freq_shift = _CONVENTIONS[convention]
        shift = 0.0 if freq_shift is None else freq_shift
    layout_code[0] = (CPE_LAYOUT_INTERLEAVED if layout is None else
                      _LAYOUTS[as_choice(layout, "layout", _LAYOUTS)])
    if freq_shift is None:
        n_freq[0], den[0] = (D + 1) // 2, D / 2.0
        return 0
    cdef Py_ssize_t half = D // 2
    n_freq[0] = half
    if half <= 1:
        # At most one frequency, w_0 = base ** 0 = 1, whatever the denominator:
        # tensor2tensor's guarded formula (max(D // 2 - 1, 1)). fairseq divides
        # by zero there, Whisper and diffusers give NaN; there is no other value.
        den[0] = 1.0
        return 0
    # (Every preset's shift, 0 or 1, passes from D = 4 on.)
    if not half - shift > 0:
        raise ValueError(
            f"freq_shift={shift!r} needs D // 2 - freq_shift > 0, got D={D} "
            f"(D // 2 - freq_shift = {half - shift!r})")
    den[0] = half - shift
    return 0


cdef struct _FrequencyKey:  # five 8-byte fields: no padding
    long long width, n_freq
    double base, den, scale


cdef _Encoding _encoding(object size, double base, double scale, convention, layout,
                         freq_shift, bint needed, int* layout_code, str base_name=None):
    """The checked encoding of width ``size`` (an int), and its ``layout_code`` for
    the fill loop (NULL: the caller has a layout of its own); when it is not
    ``needed`` (empty output), ``None``. ``base_name``: RoPE's name of the base
    (``base``, or the config's ``rope_theta``), for the error of frequencies beyond
    a double; the 1-D encodings' names otherwise. Every layout of the same frequencies shares
    one encoding, and so its digit levels."""
    cdef Py_ssize_t width = size
    cdef int code = CPE_LAYOUT_INTERLEAVED
    cdef Py_ssize_t n_freq = (width + 1) // 2
    cdef double den = width / 2.0
    cdef bint paper = True
    if convention is not None or layout is not None or freq_shift is not None:
        _resolve(width, convention, layout, freq_shift, &code, &n_freq, &den)
        paper = n_freq == (width + 1) // 2 and den == width / 2.0
    if layout_code != NULL:
        layout_code[0] = code
    if not needed:
        return None
    # The paper's frequencies with the default base and scale are keyed by the
    # width (a caller's D itself, found by identity); any others by the bytes of
    # the five numbers that set them (the stored key keeps its hash, so the digit
    # levels' lookup does not hash it again).
    cdef _FrequencyKey fields
    scale += 0.0  # -0.0 is 0.0 (which == equates): one encoding, whichever came first
    if paper and base == 10000.0 and scale == 1.0:
        key = size
    else:
        fields.width, fields.n_freq = width, n_freq
        fields.base, fields.den, fields.scale = base, den, scale
        key = PyBytes_FromStringAndSize(<char*>&fields, sizeof(fields))
    cached = _encodings.get(key)
    if cached is not None:
        return <_Encoding>cached
    cdef Py_ssize_t stride = max(n_freq, 1)
    cdef cnp.npy_intp dims[2]
    dims[0], dims[1] = 2, stride
    w = cnp.PyArray_ZEROS(2, dims, cnp.NPY_FLOAT64, 0)
    cdef double* hi = <double*>_address(w)
    cdef int status = CPE_OK
    if n_freq:
        with nogil:
            status = _engine.frequencies(hi, hi + stride, n_freq, base, den, scale)
        # Monotone in j: a frequency that underflowed to 0 is the last.
        if status != CPE_OK or (hi[n_freq - 1] == 0.0 and scale != 0.0):
            if base_name is not None:
                raise ValueError(
                    f"{base_name}={base!r} and head_dim={width} give frequencies "
                    f"{base!r} ** (-2j / {width}), j < {n_freq}, beyond the range of a double")
            raise ValueError(
                f"base={base!r}, scale={scale!r} and D={width} (with freq_shift, if given) "
                f"give frequencies scale * base ** (-j / {den!r}), j < {n_freq}, beyond the "
                "range of a double")
    return _new_encoding(key, width, n_freq, base, den, scale, w)


cdef _Encoding _given_encoding(Py_ssize_t width, w):
    """RoPE's encoding of width ``width`` with the frequencies ``w``: a float64
    array of shape (2, width // 2), finite double-doubles (hi and lo rows, each
    ``|lo| <= ulp(hi) / 2``; lo 0 for frequencies taken as exact), as
    cpe._scaling makes them. Keyed as the others, base and den NaN (no encoding
    of a base has them), followed by the frequencies' bytes."""
    w = np.array(w, dtype=np.float64, order="C")  # a copy of the caller's
    if w.shape != (2, width // 2):
        raise ValueError(f"given frequencies of shape (2, {width // 2}) expected")
    cdef _FrequencyKey fields
    fields.width, fields.n_freq = width, width // 2
    fields.base, fields.den, fields.scale = NAN, NAN, 1.0
    key = PyBytes_FromStringAndSize(<char*>&fields, sizeof(fields)) + w.tobytes()
    cached = _encodings.get(key)
    if cached is not None:
        return <_Encoding>cached
    return _new_encoding(key, width, width // 2, NAN, NAN, 1.0, w)


cdef _Encoding _new_encoding(key, Py_ssize_t width, Py_ssize_t n_freq, double base,
                             double den, double scale, w):
    """The encoding of the frequencies ``w`` (hi and lo rows of n_freq), kept in the
    cache under ``key``."""
    cdef _Encoding enc = _Encoding.__new__(_Encoding)
    enc.width, enc.n_freq = width, n_freq
    enc.base, enc.den, enc.scale = base, den, scale
    enc.key = key
    cnp.PyArray_CLEARFLAGS(w, cnp.NPY_ARRAY_WRITEABLE)
    enc.frequencies = w
    cdef double* hi = <double*>_address(w)
    cdef Py_ssize_t stride = cnp.PyArray_DIM(w, 1)
    enc.w_hi = hi
    enc.w_lo = hi + stride
    enc.w_max = 0.0
    cdef Py_ssize_t j
    for j in range(n_freq):
        if not fabs(hi[j]) <= enc.w_max:
            enc.w_max = fabs(hi[j])  # NaN stays: nothing compares above it
            if enc.w_max != enc.w_max:
                break
    return <_Encoding>_encodings.keep(key, enc, cnp.PyArray_NBYTES(w))


cpdef object paper_frequencies(Py_ssize_t width, double base, str name, str base_name="base"):
    """The frequencies ``base ** (-2j / width)``, ``j < (width + 1) // 2``, as the
    read-only (2, n) array of double-doubles of their encoding: hi and lo rows;
    ``name``: the argument that sets ``width``, for the error of an impossible size."""
    cdef Py_ssize_t n_freq = (width + 1) // 2
    if n_freq > PY_SSIZE_T_MAX // 16:
        raise ValueError(f"{name}: its {n_freq} frequencies are too large to allocate")
    return _encoding(width, base, 1.0, None, None, None, True, NULL, base_name).frequencies


def blend_frequencies(w, divisor, weight, kept):
    """The double-doubles ``w`` (hi and lo rows, float64) changed as RoPE's
    scaling schemes change them: ``w / divisor * weight + w * kept``, elementwise
    (each a number or one per frequency), in the engine's double-double
    arithmetic; a new (2, n) array."""
    cdef cnp.ndarray result = np.array(w, dtype=np.float64, order="C", ndmin=2)
    cdef Py_ssize_t n = result.shape[1]
    if result.shape[0] != 2:
        raise ValueError("w must be hi and lo rows")
    factors = [np.ascontiguousarray(np.broadcast_to(np.asarray(f, dtype=np.float64), (n,)))
               for f in (divisor, weight, kept)]
    cdef double* hi = <double*>_address(result)
    _engine.blend_frequencies(hi, hi + n, <const double*>_address(factors[0]),
                              <const double*>_address(factors[1]),
                              <const double*>_address(factors[2]), n)
    return result


@cython.final
@cython.no_gc  # (it refers to arrays of numbers and an _Encoding: never in a cycle)
cdef class _Levels:
    """The digit levels of one encoding: ``table`` is the (n_levels, radix,
    2 n_freq) array of rows, which the fill loop makes as requests need them
    (``state`` says which are made)."""
    cdef readonly object table
    cdef readonly object state
    cdef cpe_levels c
    cdef _Encoding enc


cdef Cache _digit_cache = Cache(_DIGIT_BUDGET)


cdef _Levels _levels_of(_Encoding enc, bint now=False):
    """The (cached) digit levels of ``enc``, or None when they would not fit the
    cache, or when ``enc`` fills its first request (unless ``now``: an
    encoding applied, whose blocks are too short to keep levels of their own): an
    encoding used once (a new base, say) pays for no table of levels, only for
    the rows it needs."""
    cdef Py_ssize_t radix
    cdef int shift, n_levels
    cpe_level_shape(enc.n_freq, &radix, &shift, &n_levels)
    if enc.n_freq == 0 or n_levels * radix * 16 * enc.n_freq > _DIGIT_BUDGET // 2:
        return None
    if not cpe_state_get(&enc.used) and not now:  # (racing threads: a request later)
        # (An encoding made again after the frequency cache let it go may find
        # its levels on its second request only: the same bits either way.)
        cpe_state_set(&enc.used, 1)
        return None
    cached = _digit_cache.get(enc.key)
    if cached is not None:
        return <_Levels>cached
    cdef _Levels levels = _Levels.__new__(_Levels)
    levels.enc = enc
    levels.table = _new_array((n_levels, radix, 2 * enc.n_freq), _FLOAT64, True)
    cdef cnp.npy_intp count = n_levels * radix
    levels.state = cnp.PyArray_ZEROS(1, &count, cnp.NPY_UINT8, 0)
    levels.c.rows = <double*>_address(levels.table)
    levels.c.state = _address(levels.state)
    levels.c.radix, levels.c.shift, levels.c.n_levels = radix, shift, n_levels
    cnp.PyArray_CLEARFLAGS(levels.table, cnp.NPY_ARRAY_WRITEABLE)
    # The level rows (and a cache line's slack before them) and the encoding's
    # frequencies, which the entry keeps alive after the frequency cache let them go.
    return <_Levels>_digit_cache.keep(
        enc.key, levels, cnp.PyArray_NBYTES(levels.table) + _LINE_BYTES
        + cnp.PyArray_NBYTES(levels.state) + cnp.PyArray_NBYTES(enc.frequencies))


cdef tuple _parameters(_Encoding enc):
    """What sets an encoding's frequencies, for _cache_snapshot (the cache's key is
    not readable): base and den are NaN for RoPE's given frequencies."""
    return (enc.width, enc.n_freq, enc.base, enc.den, enc.scale)


def _cache_snapshot():
    """Both caches as seen under their lock, for tests: a dict of

    ``encodings`` (the cached ``_Encoding`` objects), ``encoding_costs`` (the
    bytes each is counted for), ``encoding_bytes`` and ``encoding_budget``;
    ``levels`` (an encoding's ``(width, n_freq, base, den, scale)`` -> digit-level
    array), ``level_costs``,
    ``level_bytes`` and ``level_budget``; ``entry_bytes``, what an entry costs
    besides its arrays and a key of bytes.
    """
    encodings, encoding_costs, encoding_bytes, encoding_budget = _encodings.snapshot()
    levels, level_costs, level_bytes, level_budget = _digit_cache.snapshot()
    return {
        "encodings": encodings,
        "encoding_costs": encoding_costs,
        "encoding_bytes": encoding_bytes,
        "encoding_budget": encoding_budget,
        "levels": {_parameters((<_Levels>value).enc): (<_Levels>value).table
                   for value in levels},
        "level_costs": level_costs,
        "level_bytes": level_bytes,
        "level_budget": level_budget,
        "entry_bytes": _ENTRY_BYTES,
    }


# ---- running the kernels ----

cdef int _raise_for(int status, str name) except -1:
    """The error of a kernel's status; ``name`` is the argument that holds the
    positions (their values are checked by the kernels)."""
    if status == CPE_ERR_NOMEM:
        raise MemoryError("cpe: could not allocate scratch memory")
    if status == CPE_ERR_RANGE:
        raise ValueError(
            ("" if name == "position" else f"{name}: ")
            + "position * frequency must be at most 2**53 in magnitude (the range in which "
            "cpe's accuracy bound holds): the positions are too large for these frequencies")
    if status == CPE_ERR_ARGUMENT:
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    if status != CPE_OK:
        raise RuntimeError(f"cpe: kernel rejected checked arguments (status {status})")
    return 0


# Below this many output values, releasing and retaking the GIL costs more than
# it lets other threads gain.
cdef Py_ssize_t _NOGIL_VALUES = 4096


cdef Py_ssize_t _PART_BYTES = PART_BYTES


cdef int _fill_encoding(target, char* sin_data, const double* positions, double start,
                        Py_ssize_t n, _Encoding enc, int store, str name,
                        double amplitude=1.0, Py_ssize_t workers=1) except -1:
    """The engine's fill loop into ``target`` (float64 or float32): the rows of
    ``positions``, or of ``start + i`` when it is NULL; RoPE's sin table at
    ``sin_data`` for RoPE's stores, its values times ``amplitude``. ``name``: the
    argument the positions come from, for the errors. Large outputs are filled by
    up to ``workers`` threads, a range of rows each (see _Parts)."""
    if n == 0 or enc.width == 0:
        return 0
    cdef _Levels kept = _levels_of(enc)  # alive while the loop reads its rows
    cdef cpe_levels* levels = NULL if kept is None else &kept.c
    cdef fill_request r = fill_request(
        out=_address(target), sin_out=sin_data, positions=positions, start=start, n=n,
        width=enc.width, float32=cnp.PyArray_TYPE(<cnp.ndarray>target) == cnp.NPY_FLOAT32,
        w_hi=enc.w_hi, w_lo=enc.w_lo, n_freq=enc.n_freq, w_max=enc.w_max,
        levels=levels, axes=NULL, n_axes=0, store=store,
        amplitude=amplitude, columns=NULL, half_at=enc.n_freq)
    return _run_request(&r, kept, name, workers)  # (the caller holds enc)


cdef int _run_request(fill_request* r, owners, str name, Py_ssize_t workers) except -1:
    """A request filled, by up to ``workers`` threads when large (see _fill_encoding);
    ``owners``: what its pointers point into that the caller may let go of."""
    cdef Py_ssize_t parts = 1, row_bytes = r.width * (4 if r.float32 else 8)
    cdef Py_ssize_t total = r.n * row_bytes * (1 if r.sin_out == NULL else 2)
    cdef int status
    if workers > 1 and total >= 2 * _PART_BYTES:  # (else one part, without a Python call)
        parts = part_count(workers, r.n, total)
    if parts > 1:
        with nogil:
            status = _engine.fill_check(r)
        _raise_for(status, name)
        return _raise_for(_Parts(owners).run(r, row_bytes, parts), name)
    if r.n * r.width < _NOGIL_VALUES:
        return _raise_for(_engine.fill(r), name)
    with nogil:
        status = _engine.fill(r)
    return _raise_for(status, name)


@cython.final
cdef class _Parts:
    """A checked request filled (or applied) as ranges of rows (or positions),
    each by a thread of its own (the calling one among them), with scratch memory
    allocated for every part before any starts: the parts cannot fail (see
    part_bounds for where they start)."""
    cdef fill_request r  # a copy: the caller's outlives no interrupted call
    cdef fill_scratch* scratch
    cdef apply_request a  # (or an apply request, when apply_scratch is set)
    cdef apply_scratch* apply_scratch
    cdef Py_ssize_t parts
    cdef list bounds
    cdef object owners  # what the request's pointers point into

    def __cinit__(self, owners):
        self.owners = owners

    def __dealloc__(self):
        cdef Py_ssize_t k
        if self.scratch != NULL:
            for k in range(self.parts):
                _engine.scratch_free(&self.scratch[k])
            PyMem_Free(self.scratch)
        if self.apply_scratch != NULL:
            for k in range(self.parts):
                _engine.apply_scratch_free(&self.apply_scratch[k])
            PyMem_Free(self.apply_scratch)

    cdef int run_apply(self, const apply_request* a, Py_ssize_t parts) except? -1:
        """CPE_OK once every position's rows are changed, or CPE_ERR_NOMEM with
        nothing written (see run)."""
        cdef Py_ssize_t k
        cdef int status = CPE_OK
        self.a = a[0]
        self.bounds = part_bounds(a.n, parts, 1, ())
        self.apply_scratch = <apply_scratch*>PyMem_Calloc(parts, sizeof(apply_scratch))
        if self.apply_scratch == NULL:
            return CPE_ERR_NOMEM
        self.parts = parts
        for k in range(parts):
            status = _engine.apply_scratch_new(&self.a, self.bounds[k + 1] - self.bounds[k],
                                               &self.apply_scratch[k])
            if status != CPE_OK:
                return status
        run_parts(self.part, parts)
        return CPE_OK

    cdef int run(self, const fill_request* r, Py_ssize_t row_bytes,
                 Py_ssize_t parts) except? -1:
        """CPE_OK once every row is filled, or CPE_ERR_NOMEM with nothing written."""
        cdef Py_ssize_t k
        cdef int status = CPE_OK
        self.r = r[0]
        tables = [<size_t>r.out]
        if r.sin_out != NULL:
            tables.append(<size_t>r.sin_out)
        self.bounds = part_bounds(r.n, parts, row_bytes, tuple(tables))
        self.scratch = <fill_scratch*>PyMem_Calloc(parts, sizeof(fill_scratch))
        if self.scratch == NULL:
            return CPE_ERR_NOMEM
        self.parts = parts
        for k in range(parts):
            status = _engine.scratch_new(&self.r, self.bounds[k],
                                         self.bounds[k + 1] - self.bounds[k],
                                         self.bounds[k + 1] - self.bounds[k], &self.scratch[k])
            if status != CPE_OK:
                return status  # (__dealloc__ frees what was allocated)
        run_parts(self.part, parts)
        return CPE_OK

    def part(self, Py_ssize_t k):
        """Fill part ``k`` (see run_parts)."""
        cdef Py_ssize_t first = self.bounds[k], stop = self.bounds[k + 1]
        with nogil:
            if self.apply_scratch != NULL:
                _engine.apply_part(&self.a, &self.apply_scratch[k], first, stop - first)
            else:
                _engine.fill_part(&self.r, &self.scratch[k], first, stop - first)


cdef object _encode(result, dt, const double* positions, double start, Py_ssize_t n,
                    _Encoding enc, int layout, str name, Py_ssize_t workers=1,
                    cnp.ndarray sin=None, double amplitude=1.0):
    """Fill the checked ``result`` (see _fill_encoding), and RoPE's checked ``sin`` table for
    the RoPE layouts, and return ``result``. float16 and bfloat16, which the kernels
    do not write, are computed in float64 (RoPE's two tables in one array) and
    rounded once on the way out, so that nothing is written before every check and
    allocation has succeeded. ``enc`` is None when there is nothing to fill."""
    if n == 0:
        return result
    cdef char* sin_data = NULL
    if dt is _FLOAT64 or dt is _FLOAT32:
        if sin is not None:
            sin_data = _address(sin)
        _fill_encoding(result, sin_data, positions, start, n, enc, layout, name, amplitude,
                       workers)
        return result
    cdef Py_ssize_t size = cnp.PyArray_SIZE(<cnp.ndarray>result)
    cdef cnp.ndarray target = np.empty((1 if sin is None else 2, size), dtype=np.float64)
    if sin is not None:
        sin_data = _address(target) + size * 8
    _fill_encoding(target, sin_data, positions, start, n, enc, layout, name, amplitude, workers)
    _round_into(result, target[0])
    if sin is not None:
        _round_into(sin, target[1])
    return result


cdef int _round_into(result, cnp.ndarray values) except -1:
    """``values`` (float64, C order, as many as ``result`` holds) rounded once into
    the checked float16 or bfloat16 array ``result``."""
    cdef cnp.ndarray array = <cnp.ndarray>result
    cdef Py_ssize_t n = cnp.PyArray_SIZE(array)
    cdef bint bfloat16 = cnp.PyArray_TYPE(array) != cnp.NPY_FLOAT16
    cdef const double* x = <const double*>cnp.PyArray_DATA(values)
    cdef uint16_t* bits = <uint16_t*>_address(array)
    if n < _NOGIL_VALUES:
        _engine.narrow(x, bits, n, bfloat16)
    else:
        with nogil:
            _engine.narrow(x, bits, n, bfloat16)
    return 0


cpdef object axis_encoding(Py_ssize_t size, double step, Py_ssize_t width, double base, dt,
                           str names, double freq_shift=0.0):
    """The ``layout="sin_cos"`` encodings (width ``width``, even) of the coordinates
    ``i * step``, ``i < size``, with the half-width frequencies of ``freq_shift``
    (checked by the caller): the axes of the grids. ``names`` are the arguments
    that set the coordinates, for the errors."""
    cdef int layout = CPE_LAYOUT_SIN_COS
    cdef _Encoding enc = _encoding(width, base, 1.0, None, None, freq_shift, size != 0, NULL)
    result = prepare_out(None, (size, width), dt, names)
    name = f"{names} (the grid coordinates)"
    if step == 1.0:  # integer coordinates: the rows of a table
        if size > _EXACT_LIMIT:
            raise ValueError(f"{name} must be at most 2**53")
        return _encode(result, dt, NULL, 0.0, size, enc, layout, name)
    with np.errstate(over="ignore"):  # an inf coordinate is the kernel's ValueError
        coordinates = np.arange(size, dtype=np.float64) * step
    return _encode(result, dt, <const double*>_address(coordinates), 0.0, size, enc, layout,
                   name)


# ---- public API ----

_CONVENTION_PARAMETERS = """layout : {"interleaved", "sin_cos", "cos_sin"}, optional
        Where the sines and cosines go: alternate columns (the default), all
        sines then all cosines, or all cosines then all sines.
    freq_shift : float, optional
        ``None`` (the default) selects the paper's frequencies
        ``w_j = base ** (-2j / D)``. A number ``s`` selects half-width
        frequencies ``w_j = base ** (-j / (D // 2 - s))`` for ``j < D // 2``
        with a zero last column when ``D`` is odd (``s = 1``: fairseq,
        tensor2tensor; ``s = 0``: ADM, Stable Diffusion). ``D // 2 - s`` must
        be positive when ``D >= 4``; for ``D <= 3`` the one frequency (if any)
        is ``w_0 = 1``, as in tensor2tensor.
    scale : float, optional
        Multiplies every angle: ``sin(scale * p * w_j)`` (diffusers' ``scale``).
    convention : str, optional
        A named preset that sets ``layout`` and ``freq_shift`` together:
        ``"paper"``, ``"marian"``, ``"fairseq"``, ``"tensor2tensor"``,
        ``"whisper"``, ``"diffusers"`` or ``"adm"`` (see the README's table).
        It cannot be combined with ``layout`` or ``freq_shift``."""


def positional_encoding(position, D, *, base=10000.0, dtype=None, out=None,
                        layout=None, freq_shift=None, scale=1.0, convention=None, workers=None):
    cdef Py_ssize_t width = as_count(D, "D", 1)
    size = D if type(D) is int else width  # the encoding's key (no new int for an int D)
    cdef double b = as_positive(base, "base")
    dt = as_dtype(dtype, out)
    cdef double s = as_real(scale, "scale")
    # (a single position is one row, filled here whatever workers says: it is only checked)
    cdef Py_ssize_t threads = 1 if workers is None else as_workers(workers)
    cdef double p
    cdef int code
    cdef _Encoding enc
    if scalar_position(position, &p):  # without a detour through an array
        result = _prepare_row(out, width, dt)
        enc = _encoding(size, b, s, convention, layout, freq_shift, True, &code)
        _encode(result, dt, &p, 0.0, 1, enc, code, "position")
        return result if out is None else written(out)  # (out= itself, a tensor say)
    arr = as_positions(position, "position")
    result = prepare_out(out, arr.shape + (width,), dt, "position and D")
    enc = _encoding(size, b, s, convention, layout, freq_shift, arr.size != 0, &code)
    pos = positions_float64(arr, "position")
    if workers is None:  # the default of set_workers
        threads = as_workers(None)
    _encode(result, dt, <const double*>_address(pos), 0.0, pos.size, enc, code, "position",
            threads)
    return result if out is None else written(out)


positional_encoding.__doc__ = """\
Sinusoidal positional encoding of one position or an array of positions.

    By default ``out[..., 2j] = sin(p * w_j)`` and ``out[..., 2j + 1] = cos(p * w_j)``
    with ``w_j = base ** (-2j / D)``; for odd ``D`` the last column is a sine.
    Values are computed with a double-double angle and rounded once to ``dtype``.

    Parameters
    ----------
    position : int, float or array_like of them
        Position(s) ``p``. Integers must satisfy ``|p| <= 2**53``; floats must be
        finite and are used as float64 (a long double is rounded to a double).
        Booleans and masked arrays are rejected, also inside lists and tuples.
    D : int
        Width of the encoding, ``D >= 1``.
    base : float, optional
        The base of the frequencies (10000 in the paper; ``max_period`` or
        ``max_timescale`` elsewhere), finite and ``> 0``.
    dtype : {float64, float32, float16, bfloat16}, optional
        Output dtype: by default float64, or the dtype of ``out`` when it is
        given.
    out : array, optional
        Writable, C-contiguous array of shape ``position.shape + (D,)`` and dtype
        ``dtype`` to fill: a NumPy array, or a CPU array that shares its memory
        through DLPack (a torch tensor, say) or the buffer protocol, returned as passed.
        It is left untouched if any argument is rejected.
    """ + _CONVENTION_PARAMETERS + """
    """ + WORKERS_PARAMETER + """

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
        ``out`` of the wrong shape or read-only, an unknown layout, ...).

    See Also
    --------
    positional_encoding_table : the rows of consecutive positions.

    Examples
    --------
    >>> import cpe
    >>> cpe.positional_encoding(0, 4)
    array([0., 1., 0., 1.])
    >>> cpe.positional_encoding([[0, 1], [2, 3]], 6).shape
    (2, 2, 6)
    >>> cpe.positional_encoding(1, 2, dtype="float32")
    array([0.84147096, 0.5403023 ], dtype=float32)
    >>> row = cpe.positional_encoding(2, 5, convention="fairseq")   # [sin | cos | 0]
    >>> [round(float(v), 4) for v in row]
    [0.9093, 0.0002, -0.4161, 1.0, 0.0]
    """


def positional_encoding_table(n, D, *, start=0, base=10000.0, dtype=None, out=None,
                              layout=None, freq_shift=None, scale=1.0, convention=None,
                              workers=None):
    cdef Py_ssize_t rows = as_count(n, "n", 0)
    cdef Py_ssize_t width = as_count(D, "D", 1)
    size = D if type(D) is int else width  # the encoding's key (no new int for an int D)
    first = table_start(start, rows)
    cdef double b = as_positive(base, "base")
    dt = as_dtype(dtype, out)
    cdef double s = as_real(scale, "scale")
    cdef Py_ssize_t threads = as_workers(workers)
    result = prepare_out(out, (rows, width), dt, "n and D")
    cdef int code
    cdef _Encoding enc = _encoding(size, b, s, convention, layout, freq_shift, rows != 0, &code)
    _encode(result, dt, NULL, float(first), rows, enc, code, "start and n", threads)
    return result if out is None else written(out)


positional_encoding_table.__doc__ = """\
Encodings of the consecutive positions ``start, start + 1, ..., start + n - 1``.

    Row ``i`` is ``positional_encoding(start + i, D, ...)`` with the same
    keywords, bit for bit: a position's values never depend on the call that
    computes them (see the README's "Batch invariance"). Each row is built from
    a few cached rows of sines and cosines by the angle-addition identity, which
    keeps every value within a few units in the last place.

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
    dtype : {float64, float32, float16, bfloat16}, optional
        Output dtype: by default float64, or the dtype of ``out`` when it is
        given.
    out : array, optional
        Writable, C-contiguous array of shape ``(n, D)`` and dtype ``dtype`` to
        fill: a NumPy array, or a CPU array that shares its memory
        through DLPack (a torch tensor, say) or the buffer protocol, returned as passed.
        It is left untouched if any argument is rejected.
    """ + _CONVENTION_PARAMETERS + """
    """ + WORKERS_PARAMETER + """

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

    See Also
    --------
    positional_encoding : any positions, including real-valued ones.

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


# ---- the checks of the pure-Python modules built on these functions ----

cpdef tuple rope_outputs(tuple out, tuple shape, dt, str sizes):
    """RoPE's two arrays ``out = (cos, sin)``, each checked as any ``out=`` under its
    own name, and not sharing memory."""
    for index in range(2):
        if out[index] is None:  # prepare_out would allocate one
            raise TypeError(f"out[{index}] ({('cos', 'sin')[index]}) must be an array, "
                            "got NoneType")
    cos = prepare_out(out[0], shape, dt, sizes, "out[0] (cos)")
    sin = prepare_out(out[1], shape, dt, sizes, "out[1] (sin)")
    if overlap(cos, sin):
        raise ValueError("out: its cos and sin arrays must not share memory")
    return cos, sin


cpdef tuple new_tables(tuple shape, dt, str sizes):
    """RoPE's two new arrays of ``shape``, in one allocation: two large ones in
    a row would, with glibc's default thresholds, be trimmed and page-faulted
    again on every call. The second starts a whole number of cache lines after
    the first, so both start on a cache line from _VIEW_OUTPUT_BYTES."""
    if _too_large(shape, dt):
        raise ValueError(f"{sizes}: the output of shape {(2,) + shape} is too large to allocate")
    cdef Py_ssize_t count = 1, itemsize = dt.itemsize, line = _LINE_BYTES // itemsize
    for extent in shape:
        count *= <Py_ssize_t>extent  # (it fits: not _too_large)
    # Both, rounded up to lines, with _new_array's slack: else each alone, for the
    # allocator to refuse.
    if count > (PY_SSIZE_T_MAX - 4 * _LINE_BYTES) // itemsize // 2 - line:
        return _new_array(shape, dt), _new_array(shape, dt)
    cdef Py_ssize_t stride = (count + line - 1) // line * line
    both = _new_array((2 * stride,), dt)
    return both[:count].reshape(shape), both[stride:stride + count].reshape(shape)


cpdef tuple rope_tables(out, tuple shape, dt, str sizes):
    """RoPE's two tables of ``shape``: ``out`` checked (see rope_outputs), or new
    ones (see new_tables), ``sizes`` naming the arguments that set the shape.
    float16 and bfloat16 tables are refused when their float64 rows would not
    fit, with out= too."""
    if out is not None:
        cos, sin = rope_outputs(out, shape, dt, sizes)
    if dt is not _FLOAT64 and dt is not _FLOAT32 and _too_large((2,) + shape, dt):
        raise ValueError(f"{sizes}: the output of shape {(2,) + shape} is too large to allocate")
    if out is None:
        cos, sin = new_tables(shape, dt, sizes)
    return cos, sin


cdef tuple _axis_encodings(list axes, base, str base_name):
    """The encodings of RoPE's axes (see rope_axes) and their largest |w_j|."""
    cdef double b = as_positive(base, base_name) if base is not None else 1.0
    encodings = [_encoding(w, b, 1.0, None, None, None, True, NULL, base_name) if type(w) is int
                 else _given_encoding(2 * (<cnp.ndarray>w).shape[1], w)
                 for _, w, _, _, _ in axes]
    cdef _Encoding enc
    cdef double w_max = 0.0
    for enc in encodings:
        w_max = max(w_max, enc.w_max)
    return encodings, w_max


cdef object _checked_positions(positions, double start, Py_ssize_t rows, double w_max,
                               str name):
    """RoPE's positions (as_positions' array, of every axis), as float64, or None for
    ``rows`` consecutive positions from ``start``: all of them checked at once
    against the largest frequency of any axis, with the errors of ``name``."""
    pos = None if positions is None else positions_float64(positions, name)
    cdef const double* all_positions = NULL
    if pos is not None:
        all_positions = <const double*>_address(pos)
    cdef fill_request check = fill_request(
        out=NULL, sin_out=NULL, positions=all_positions, start=start,
        n=rows if pos is None else cnp.PyArray_SIZE(pos), width=0, float32=False,
        w_hi=NULL, w_lo=NULL, n_freq=0, w_max=w_max, levels=NULL, axes=NULL, n_axes=0,
        store=CPE_LAYOUT_SIN_COS, amplitude=1.0, columns=NULL, half_at=0)
    _raise_for(_engine.fill_check(&check), name)
    return pos


cdef inline const void* _data_or_null(array) noexcept:
    """The data of a C-contiguous array (kept alive by the caller), or NULL for None."""
    if array is None:
        return NULL
    return cnp.PyArray_DATA(<cnp.ndarray>array)


cdef list _set_angles(fill_request* r, fill_request* axes, list axis_list, list encodings,
                      pos, double start, bint now):
    """The angles of ``r`` (its n set): of its one axis, or of the several of
    ``axis_list`` (see rope_axes) at ``axes`` (room for FILL_MAX_AXES), the
    positions of each ``pos[index]`` (or all of ``pos``; None: from ``start``).
    ``now``: see _levels_of. What their pointers point into."""
    cdef int k, count = len(encodings)
    if count > FILL_MAX_AXES:
        raise ValueError(f"at most {FILL_MAX_AXES} axes, got {count}")
    cdef _Encoding enc
    cdef _Levels kept
    cdef fill_request* axis
    owners = []
    for k in range(count):
        enc = encodings[k]
        index = axis_list[k][0]
        positions = pos if index is None or pos is None else np.ascontiguousarray(pos[index])
        kept = _levels_of(enc, now)
        owners += [enc, positions, kept]
        axis = r if count == 1 else &axes[k]
        if count > 1:
            axis[0] = r[0]
        axis.positions = <const double*>_data_or_null(positions)
        axis.start = start
        axis.w_hi, axis.w_lo, axis.n_freq, axis.w_max = enc.w_hi, enc.w_lo, enc.n_freq, enc.w_max
        axis.levels = NULL if kept is None else &kept.c
    r.axes = NULL if count == 1 else axes
    r.n_axes = 0 if count == 1 else count
    return owners


cdef object _column_map(list axis_list, list encodings, bint pairs, Py_ssize_t half_at):
    """The columns of the frequencies of the axes in a row, as fill_request's
    ``columns`` (an intp array), or None when they are a whole row's, in order,
    with the request's ``half_at``. Each of ``axis_list`` is (index,
    frequencies, first, columns, half_at) (see rope_axes); ``pairs``: an
    interleaved table's (whose ``first`` is twice its first pair)."""
    cdef Py_ssize_t running = 0, n_k, first, at
    cdef bint whole = True
    cdef _Encoding enc
    for enc, (_, _, first, columns, at) in zip(encodings, axis_list):
        n_k = enc.n_freq
        first = first // 2 if pairs else first
        if (columns is not None or first != running
                or (not pairs and (at if at >= 0 else n_k) != half_at)):
            whole = False
        running += n_k
    if whole:
        return None
    firsts, seconds = [], []
    for enc, (_, _, first, columns, at) in zip(encodings, axis_list):
        n_k = enc.n_freq
        c = (first // 2 if pairs else first) + (
            np.arange(n_k) if columns is None else np.asarray(columns))
        firsts.append(c)
        seconds.append(c + (at if at >= 0 else n_k))
    return np.ascontiguousarray(np.concatenate(firsts if pairs else firsts + seconds),
                                dtype=np.intp)


def rope_fill(cos, sin, dt, positions, double start, tuple axes, bint interleaved,
              double amplitude, Py_ssize_t workers, str name):
    """RoPE: the checked tables ``cos`` and ``sin`` (of shape (..., head_dim),
    dtype ``dt``) filled, the frequencies of every axis written straight into
    their columns, every value the one the one-axis table of that axis gives.

    ``positions``: the array as_positions returned, of every axis, or None for a
    table of consecutive positions from ``start`` (integral, checked by
    table_start); they are checked once, all of them, against the largest
    frequency of any axis, before anything is written, with the errors of
    ``name``. ``axes`` is what rope_axes returns for the tables' layout (not
    read when the tables are empty). Values are times ``amplitude``. Up to
    ``workers`` threads fill large tables (see _fill_encoding).
    """
    cdef Py_ssize_t size = cnp.PyArray_SIZE(<cnp.ndarray>cos)
    if size == 0:
        return None
    axis_list, encodings, w_max, columns = axes[0], axes[1], axes[2], axes[7]
    cdef Py_ssize_t head_dim = cnp.PyArray_DIM(<cnp.ndarray>cos, cnp.PyArray_NDIM(cos) - 1)
    cdef Py_ssize_t rows = size // head_dim, n_freq = head_dim // 2
    pos = _checked_positions(positions, start, rows, w_max, name)
    cdef bint narrow = dt is not _FLOAT64 and dt is not _FLOAT32
    target = np.empty((2, size), dtype=np.float64) if narrow else cos
    cdef fill_request axis_requests[8]
    cdef char* sin_data = _address(target) + size * 8 if narrow else _address(sin)
    cdef fill_request r = fill_request(
        out=_address(target), sin_out=sin_data, positions=NULL, start=start, n=rows, width=head_dim,
        float32=cnp.PyArray_TYPE(<cnp.ndarray>target) == cnp.NPY_FLOAT32, w_hi=NULL,
        w_lo=NULL, n_freq=n_freq, w_max=w_max, levels=NULL, axes=NULL, n_axes=0,
        store=STORE_ROPE_INTERLEAVED if interleaved else STORE_ROPE_HALF,
        amplitude=amplitude, columns=<const Py_ssize_t*>_data_or_null(columns),
        half_at=n_freq)
    owners = _set_angles(&r, axis_requests, axis_list, encodings, pos, start, False)
    _run_request(&r, (owners, columns), name, workers)
    if narrow:
        _round_into(cos, target[0])
        _round_into(sin, target[1])
    return None


cdef class _RowOffsets:
    """The byte offsets of the rows of one array of an apply request (see
    _engine.rotation): by point, along the axes where the points vary, and by
    head, along its other leading axes, each in C order; for x and for y."""
    cdef Py_ssize_t* owned
    cdef Py_ssize_t* x_rows
    cdef Py_ssize_t* y_rows
    cdef Py_ssize_t* x_heads
    cdef Py_ssize_t* y_heads
    cdef Py_ssize_t n_heads
    cdef bint heads_inner

    def __dealloc__(self):
        PyMem_Free(self.owned)

    cdef int make(self, cnp.ndarray x, cnp.ndarray y, tuple varying) except -1:
        cdef int ndim = cnp.PyArray_NDIM(y) - 1, k, n_varying = len(varying), n_other = 0
        cdef int along[64]
        cdef int other[64]
        cdef Py_ssize_t n_rows = 1, near_rows = 0, near_heads = 0, extent, stride
        cdef bint same_strides = True  # x's offsets are y's (x itself, in place, say)
        for k in range(n_varying):
            along[k] = varying[k]
        self.n_heads = 1
        for k in range(ndim):
            extent = cnp.PyArray_DIM(y, k)
            stride = abs(cnp.PyArray_STRIDE(y, k))
            same_strides = same_strides and cnp.PyArray_STRIDE(x, k) == cnp.PyArray_STRIDE(y, k)
            if _among(k, along, n_varying):
                n_rows *= extent
                if extent > 1 and (near_rows == 0 or stride < near_rows):
                    near_rows = stride
            else:
                other[n_other] = k
                n_other += 1
                self.n_heads *= extent
                if extent > 1 and (near_heads == 0 or stride < near_heads):
                    near_heads = stride
        # The heads of a position are visited together when they lie nearer each
        # other than its rows of consecutive positions.
        self.heads_inner = 0 < near_heads < near_rows
        self.owned = <Py_ssize_t*>PyMem_Malloc(
            sizeof(Py_ssize_t) * (2 * n_rows + 2 * self.n_heads + 1))
        if self.owned == NULL:
            raise MemoryError("cpe: could not allocate scratch memory")
        self.y_rows = self.owned
        self.y_heads = self.y_rows + n_rows
        _offsets(y, along, n_varying, self.y_rows)
        _offsets(y, other, n_other, self.y_heads)
        if same_strides:
            self.x_rows, self.x_heads = self.y_rows, self.y_heads
        else:
            self.x_rows = self.y_heads + self.n_heads
            self.x_heads = self.x_rows + n_rows
            _offsets(x, along, n_varying, self.x_rows)
            _offsets(x, other, n_other, self.x_heads)
        return 0


cdef inline bint _among(int k, const int* axes, int count) noexcept:
    cdef int j
    for j in range(count):
        if axes[j] == k:
            return True
    return False


cdef void _offsets(cnp.ndarray a, const int* axes, int count, Py_ssize_t* out) noexcept:
    """The byte offsets in ``a`` of every index over ``axes``, in C order."""
    cdef Py_ssize_t index[64]
    cdef Py_ssize_t total = 1, offset = 0, i
    cdef int j
    for j in range(count):
        total *= cnp.PyArray_DIM(a, axes[j])
        index[j] = 0
    for i in range(total):
        out[i] = offset
        j = count - 1
        while j >= 0:  # the next index, the last axis fastest
            index[j] += 1
            offset += cnp.PyArray_STRIDE(a, axes[j])
            if index[j] < cnp.PyArray_DIM(a, axes[j]):
                break
            offset -= index[j] * cnp.PyArray_STRIDE(a, axes[j])
            index[j] = 0
            j -= 1


# The most axes an encoding applied has (axial RoPE's axes_dim).
MAX_AXES = _engine.FILL_MAX_AXES


def rope_axes(list axes, base, str base_name, Py_ssize_t n_freq, bint pairs=False,
              Py_ssize_t half_at=0):
    """RoPE's axes with their encodings, of ``n_freq`` pairs: what a parsed
    encoding keeps, so that each call finds them at once. Each of ``axes`` is
    (index, frequencies, first, columns, half_at): the positions of the axis are
    ``positions[index]`` (index None: all of them); ``frequencies`` is an even
    width (the paper's frequencies of ``base``, checked here, ``base_name``
    naming it) or a (2, k) array of double-doubles (see _given_encoding); its
    values go to column ``first`` + c_j, c_j = ``columns[j]`` (None: j), and,
    "half", to that plus ``half_at`` too (-1: the axis' own k). For rope_fill's
    tables, ``pairs`` (interleaved: ``first`` is twice a pair's) and the
    tables' ``half_at`` (n_freq) place the columns; for apply_rows, the
    defaults (see there)."""
    if len(axes) > MAX_AXES:
        raise ValueError(f"at most {MAX_AXES} axes, got {len(axes)}")
    encodings, w_max = _axis_encodings(axes, base, base_name)
    return (axes, encodings, w_max, STORE_ROPE_HALF, n_freq, 2 * n_freq, False,
            _column_map(axes, encodings, pairs, half_at))


def encoding_axes(D, double base, double scale, convention, layout, freq_shift):
    """The axis of an encoding of width ``D`` added (see apply_rows), of the
    keywords of positional_encoding (checked here)."""
    cdef Py_ssize_t width = as_count(D, "D", 1)
    cdef int code
    cdef _Encoding enc = _encoding(width, base, scale, convention, layout, freq_shift, True,
                                   &code)
    return ([(None, None, 0, None, enc.n_freq)], [enc], enc.w_max, code, enc.n_freq, width, True,
            None)


def apply_rows(list targets, positions, double start, Py_ssize_t n, tuple axes,
               bint interleaved, bint inverse, double amplitude, double x_scale,
               Py_ssize_t workers, str name):
    """An encoding applied to the rows of ``targets``: rotated by the angles of
    ``n`` positions, the values of RoPE's float64 tables (``amplitude``
    included), or added to the encoding's float64 values (times ``x_scale``).

    Each target is ``(x, y, varying)``: checked float64 or float32 arrays of one
    shape, whose rows (last axis, contiguous, of the table's width or more) are
    those of the points whose positions vary along the axes ``varying`` (a
    tuple, in order; the points in C order over them), each point's rows along
    the other axes; ``y`` is written (``x`` itself, or an array that shares no
    memory with any other target). ``positions`` and ``start`` are as for
    rope_fill, with ``n`` points. ``axes`` is what rope_axes returns of a list
    of ``(index, frequencies, first, columns, 0)`` (with
    ``first`` its first frequency among those that rotate pair ``j``: "half",
    values j and n_freq + j; ``interleaved``, 2j and 2j + 1; and half_at 0, see
    _engine.apply_request), or what encoding_axes returns. ``inverse``: rotated
    backwards. Up to ``workers`` threads apply many rows.
    """
    cdef cnp.ndarray x, y
    cdef Py_ssize_t size = 0
    for target in targets:
        size += cnp.PyArray_SIZE(<cnp.ndarray>target[1])
    if n == 0 or size == 0:
        return None  # (nothing to change: not even the positions are read)
    axis_list, encodings, w_max, store, n_freq, table_width, add, columns = axes
    pos = _checked_positions(positions, start, n, w_max, name)
    cdef fill_request axis_requests[8]
    cdef fill_request angles = fill_request(
        out=NULL, sin_out=NULL, positions=NULL, start=start, n=n, width=table_width,
        float32=False, w_hi=NULL, w_lo=NULL, n_freq=n_freq, w_max=w_max, levels=NULL,
        axes=NULL, n_axes=0, store=store, amplitude=1.0 if add else amplitude,
        columns=<const Py_ssize_t*>_data_or_null(columns), half_at=n_freq if add else 0)
    owners = [targets, columns, _set_angles(&angles, axis_requests, axis_list, encodings, pos,
                                            start, n > 1)]
    cdef Py_ssize_t count = len(targets), t, values = 0, nbytes = 0
    cdef rotation* rotations = <rotation*>PyMem_Calloc(count, sizeof(rotation))
    if rotations == NULL:
        raise MemoryError("cpe: could not allocate scratch memory")
    cdef _RowOffsets rows
    cdef apply_request a
    cdef apply_scratch scratch
    cdef int status
    cdef Py_ssize_t parts = 1
    try:
        for t, (x, y, varying) in enumerate(targets):
            rows = _RowOffsets()
            rows.make(x, y, varying)
            owners.append(rows)
            rotations[t] = rotation(
                x=<char*>cnp.PyArray_DATA(x), y=<char*>cnp.PyArray_DATA(y),
                x_rows=rows.x_rows, y_rows=rows.y_rows, x_heads=rows.x_heads,
                y_heads=rows.y_heads, n_heads=rows.n_heads,
                width=cnp.PyArray_DIM(y, cnp.PyArray_NDIM(y) - 1), dtype=_row_dtype(y),
                heads_inner=rows.heads_inner)
            values += cnp.PyArray_SIZE(y)
            nbytes += cnp.PyArray_NBYTES(y)
        a = apply_request(angles=&angles, n=n, add=add, x_scale=x_scale,
                          interleaved=interleaved, inverse=inverse, targets=rotations,
                          n_targets=count)
        status = _engine.apply_check(&a)
        _raise_for(status, name)
        if workers > 1:
            parts = part_count(workers, n, nbytes)
        if parts > 1:
            return _raise_for(_Parts(owners).run_apply(&a, parts), name)
        if values < _NOGIL_VALUES:
            status = _engine.apply_scratch_new(&a, n, &scratch)
            if status == CPE_OK:
                _engine.apply_part(&a, &scratch, 0, n)
            _engine.apply_scratch_free(&scratch)
        else:
            with nogil:
                status = _engine.apply_scratch_new(&a, n, &scratch)
                if status == CPE_OK:
                    _engine.apply_part(&a, &scratch, 0, n)
                _engine.apply_scratch_free(&scratch)
        return _raise_for(status, name)
    finally:
        PyMem_Free(rotations)


cdef int _row_dtype(cnp.ndarray y) noexcept:
    # The engine's code of a checked array's dtype (see as_rows): bfloat16 is
    # the one of two bytes that is not float16.
    cdef int type_num = cnp.PyArray_TYPE(y)
    if type_num == cnp.NPY_FLOAT64:
        return ROW_FLOAT64
    if type_num == cnp.NPY_FLOAT32:
        return ROW_FLOAT32
    return ROW_FLOAT16 if type_num == cnp.NPY_FLOAT16 else ROW_BFLOAT16
